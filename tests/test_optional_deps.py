"""A lent GPU machine lacks part of the project's tooling (no mlflow, datasets, snakemake, dvc, jsonschema):
training with tracking off and `pit bench` must not import them (scripts/gpu_check.sh relies on this)."""

import json
import subprocess
import sys

import pytest
from test_train import rows, spec

from pit.training.args import PretrainArgs
from pit.training.pretrain import train

ABSENT = ("mlflow", "mlflow.entities", "datasets", "snakemake", "dvc", "jsonschema")


@pytest.fixture
def without_tooling(monkeypatch):
    """`import mlflow` (and the rest) raises ImportError, as on a machine without them."""
    for name in ABSENT:
        monkeypatch.setitem(sys.modules, name, None)


def test_training_with_tracking_off_needs_no_mlflow(without_tooling, tiny_data, tmp_path):
    train(PretrainArgs.from_dict(spec(tiny_data, max_steps=3, warmup_steps=1)), tmp_path)
    assert [r["step"] for r in rows(tmp_path)] == [1, 2, 3]


def test_bench_needs_no_tooling():
    block = f"import sys; sys.modules.update(dict.fromkeys({ABSENT!r}))"
    bench = "from pit.commands import main; sys.exit(main(sys.argv[1:]))"
    args = ["bench", "--json", "--size", "tiny", "--rounds", "1", "--sections", "train", "--arms", "pit,tt"]
    run = subprocess.run(
        [sys.executable, "-c", f"{block}; {bench}", *args], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert [row["arm"] for row in json.loads(run.stdout)["train"]] == ["pit", "tt"]


def test_a_local_corpus_downloads_and_tokenizes_without_datasets(without_tooling, tmp_path):
    """The test data (tiny_data) of the cuda tests is built on the GPU machine too: a local corpus needs no
    `datasets` (the same documents, in the same order, as the manifest records)."""
    from helpers import STDLIB_CORPUS

    from pit.data.download import download

    manifest = download(STDLIB_CORPUS | {"max_documents": 12, "shard_documents": 5}, tmp_path / "c" / "manifest.json")
    assert manifest["documents"] == 12 and (tmp_path / "c" / "train-00000.parquet").is_file()

"""`pit data download`: local corpus order and manifest, seeded split, resume, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from helpers import STDLIB_CORPUS

from pit.data.download import download, is_val, local_files

SPEC = STDLIB_CORPUS


def pit(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from pit.commands import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)


def test_local_corpus_manifest_is_sorted_and_hashed(tmp_path):
    manifest = download(SPEC, tmp_path / "a/manifest.json")
    root, paths = local_files(SPEC["glob"], SPEC["exclude"])
    assert not any(p.startswith("site-packages/") for p in paths) and paths == sorted(paths)
    files = manifest["files"]
    assert [f["doc_index"] for f in files] == list(range(60)) and manifest["documents"] == 60
    assert [f["path"] for f in files] == sorted(f["path"] for f in files)
    assert manifest["splits"]["train"] + manifest["splits"]["val"] == 60 and manifest["splits"]["val"] > 0
    assert [f["split"] == "val" for f in files] == [is_val(i, 0, 0.2) for i in range(60)]
    assert len(manifest["shards"]["train"]) == 3  # chunks of 25, 25, 10 documents
    # Same spec, same corpus: same manifest hash; another seed moves documents between splits.
    again = download(SPEC, tmp_path / "b/manifest.json")
    assert again["manifest_sha256"] == manifest["manifest_sha256"]
    other = download(SPEC | {"seed": 1}, tmp_path / "c/manifest.json")
    assert other["splits"] != manifest["splits"] or other["files"] != manifest["files"]


def test_max_bytes_stops_at_the_budget(tmp_path):
    manifest = download(SPEC | {"max_documents": None, "max_bytes": 50_000}, tmp_path / "manifest.json")
    assert manifest["bytes"] >= 50_000 and manifest["documents"] < 60


def test_interrupted_download_resumes_after_the_finished_shards(tmp_path):
    out = tmp_path / "corpus/manifest.json"
    reference = download(SPEC, out)
    # Pretend the run died after its first chunk: manifest gone, later shards never written.
    progress_path = out.parent / "progress.json"
    progress = json.loads(progress_path.read_text())
    first = progress["chunks"][0]
    progress |= {"chunks": [first], "documents": first["documents"], "finished": False}
    progress["bytes"] = sum(
        len(t.encode()) for t in pq.read_table(out.parent / first["train"]["file"])["text"].to_pylist()
    )
    progress["bytes"] += sum(
        len(t.encode()) for t in pq.read_table(out.parent / first["val"]["file"])["text"].to_pylist()
    )
    progress_path.write_text(json.dumps(progress))
    out.unlink()
    for later in progress_path.parent.glob("*-0000[12].parquet"):
        later.unlink()
    kept = (out.parent / "train-00000.parquet").stat().st_mtime_ns
    resumed = download(SPEC, out)
    assert (out.parent / "train-00000.parquet").stat().st_mtime_ns == kept  # not rewritten
    assert resumed == reference


def test_missing_glob_is_one_error_line_and_no_output(tmp_path):
    spec = SPEC | {"glob": str(tmp_path / "nothing/**/*.txt")}
    proc = pit("data", "download", "--spec", json.dumps(spec), "--out", str(tmp_path / "c/manifest.json"))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"pit data: error: corpus glob {spec['glob']!r} (expanded to {spec['glob']!r}) matches no files"
    ]
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("offline", ["0", "1"])
def test_unreachable_hub_id_is_one_error_line_and_no_output(tmp_path, monkeypatch, offline):
    monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    spec = {k: v for k, v in SPEC.items() if k not in ("glob", "exclude")}
    spec |= {
        "source": "hub",
        "hub_id": "no-such-org/no-such-data",
        "hub_config": None,
        "hub_split": "train",
        "text_field": "text",
    }
    proc = pit("data", "download", "--spec", json.dumps(spec), "--out", str(tmp_path / "c/manifest.json"))
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("pit data: error: cannot open hub data set 'no-such-org/no-such-data'")
    assert not (tmp_path / "c").exists()


def test_incomplete_spec_names_the_missing_keys(tmp_path):
    proc = pit(
        "data", "download", "--spec", json.dumps({"source": "local", "name": "x"}), "--out", str(tmp_path / "m.json")
    )
    assert proc.returncode == 2 and "misses key(s)" in proc.stderr and "'glob'" in proc.stderr

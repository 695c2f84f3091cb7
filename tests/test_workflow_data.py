"""The data stage end to end through Snakemake: build, idempotence, rerun triggers, profiles, errors.

One default-profile build (about a minute on 2 cores) is shared by the tests of this module; it
runs in a temporary directory (`--directory`), never in the repository's results/.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import PAPER_CONFIG, job_counts, snakemake, write_config
from transformers import AutoTokenizer

from pit.data.download import iter_text_batches
from pit.data.reader import TokenFile
from pit.data.tokenizers import tiktoken_gpt2

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("workflow_data")]  # `built` once, on one worker


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("workflow")
    snakemake(workdir, "--cores", "all", "data")
    return workdir


def corpus_texts(workdir: Path, split: str) -> list[str]:
    manifest = workdir / "resources/corpus/stdlib/manifest.json"
    return [text for batch in iter_text_batches(manifest, split, 256) for text in batch]


def test_default_build_then_nothing_to_do(built):
    for tokenizer in ("gpt2", "bpe32k"):
        for split in ("train", "val"):
            data = TokenFile(built / f"results/data/{tokenizer}/{split}.bin")
            assert data.meta["documents"] == len(corpus_texts(built, split))
        assert (built / f"results/logs/data/tokenizer_{tokenizer}.log").is_file()
    proc = snakemake(built, "--cores", "all", "data")
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_changed_tokenizer_setting_reruns_exactly_its_jobs(built, tmp_path):
    config = write_config(tmp_path / "config.yaml", lambda c: c["tokenizers"]["bpe32k"].update(min_frequency=3))
    proc = snakemake(built, "-n", "data", "--configfile", str(config))
    assert job_counts(proc.stdout) == {"train_bpe_tokenizer": 1, "tokenize": 2, "data": 1}
    assert "output: results/data/bpe32k" in proc.stdout and "output: results/data/gpt2" not in proc.stdout
    # A data-stage setting shared by all tokenize jobs reruns those and nothing upstream.
    config = write_config(tmp_path / "config2.yaml", lambda c: c.update(context_length=64))
    assert job_counts(snakemake(built, "-n", "data", "--configfile", str(config)).stdout) == {"tokenize": 4, "data": 1}


def test_a_local_tokenizer_source_is_the_copys_input(built, tmp_path):
    """A tokenizer copied from a local checkpoint folder has that folder's tokenizer files as inputs, so editing one
    reruns the copy and the token files made with it; GPT-2's package files are no input (nothing to watch)."""
    source = tmp_path / "checkpoint"
    shutil.copytree(built / "results/tokenizers/gpt2", source)
    for name in ("meta.json", ".snakemake_timestamp"):  # not tokenizer files (pit's record, Snakemake's marker)
        (source / name).unlink()
    config = write_config(tmp_path / "config.yaml", lambda c: c["tokenizers"]["gpt2"].update(source=str(source)))
    plan = snakemake(built, "-n", "data", "--configfile", str(config)).stdout
    assert job_counts(plan) == {"copy_tokenizer": 1, "tokenize": 2, "data": 1}
    block = plan[plan.index("rule copy_tokenizer:") :].split("\n\n")[0]
    inputs = next(line for line in block.splitlines() if line.strip().startswith("input:")).split(":", 1)[1]
    assert sorted(p.strip() for p in inputs.split(",")) == sorted(str(f) for f in source.iterdir()), block
    default = snakemake(built, "-n", "--forceall", "results/tokenizers/gpt2").stdout
    copy = default[default.index("rule copy_tokenizer:") :].split("\n\n")[0]
    assert "input:" not in copy, copy


def test_gpt2_tokens_equal_tiktoken_on_the_corpus(built):
    texts = corpus_texts(built, "train")
    assert sum(len(t.encode("utf-8")) for t in texts) > 1_000_000
    documents = TokenFile(built / "results/data/gpt2/train.bin").documents()
    reference = tiktoken_gpt2().encode_ordinary_batch(texts)
    assert len(documents) == len(reference)
    for index, (ours, theirs) in enumerate(zip(documents, reference)):
        assert ours.tolist() == theirs, f"document {index} differs"


@pytest.mark.parametrize("tokenizer", ["gpt2", "bpe32k"])
def test_decoding_the_token_files_gives_back_the_documents(built, tokenizer):
    hf = AutoTokenizer.from_pretrained(built / f"results/tokenizers/{tokenizer}")
    for split in ("train", "val"):
        data = TokenFile(built / f"results/data/{tokenizer}/{split}.bin")
        assert data.meta["eos_id"] == hf.eos_token_id and data.tokens.dtype == np.uint16
        decoded = hf.batch_decode([doc.tolist() for doc in data.documents()], clean_up_tokenization_spaces=False)
        assert decoded == corpus_texts(built, split)


def test_paper_profile_dry_run_lists_the_data_jobs(tmp_path):
    proc = snakemake(tmp_path, "-n", "data", "--configfile", str(PAPER_CONFIG))
    counts = job_counts(proc.stdout)
    assert counts == {"download_corpus": 1, "copy_tokenizer": 1, "train_bpe_tokenizer": 1, "tokenize": 4, "data": 1}
    assert "resources/corpus/fineweb-edu-10BT/manifest.json" in proc.stdout
    assert not (tmp_path / "resources").exists() and not (tmp_path / "results").exists()


def test_a_gguf_teacher_slot_and_its_native_tokenizer(tmp_path):
    """A teacher slot declared as a GGUF file (`gguf:`) is materialised into resources/teachers/<slot> in the data
    stage (`pit teacher materialize`, tests/test_gguf.py); a `teacher` tokenizer copies that folder's own tokenizer,
    and the slot's runs (`tokenizer:`) train and are post-trained on its token files, none of the profile's
    teacher tokenizer (gpt2)."""
    gguf_file = tmp_path / "tiny.gguf"
    gguf_file.write_bytes(b"GGUF")  # a plan only reads its name

    def edit(config):
        config["tokenizers"]["tiny"] = {"kind": "teacher", "slot": "tiny"}
        config["pretrain"]["teacher_slots"]["tiny"] = {"gguf": str(gguf_file), "tokenizer": "tiny"}

    config = write_config(tmp_path / "real.yaml", edit)
    target = "results/posttrain/teacher/tiny/pit/mbpp/summary.json"
    plan = snakemake(tmp_path / "work", "-n", "-p", target, "--configfile", str(config)).stdout
    counts = {"download_corpus": 1, "materialize_teacher": 1, "copy_tokenizer": 1, "tokenize": 2, "pretrain": 1}
    assert job_counts(plan) == {**counts, "lora": 1}
    rules = {b.split("rule ")[1].split(":")[0]: b for b in plan.split("\n\n") if "\nrule " in b}
    assert f"input: {gguf_file}\n" in rules["materialize_teacher"]
    assert f"pit teacher materialize {gguf_file} --out resources/teachers/tiny >" in rules["materialize_teacher"]
    copy = rules["copy_tokenizer"]
    assert (
        "input: resources/teachers/tiny\n" in copy
        and '"kind": "checkpoint", "source": "resources/teachers/tiny"' in copy
    )
    assert "resources/teachers/tiny" in rules["pretrain"] and "results/data/tiny/train.bin" in rules["pretrain"]
    assert "results/data/tiny/val.bin" in rules["lora"] and "results/data/gpt2" not in plan


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda c: c["corpus"].update(sed=0),  # the key's own line, and the key it resembles
            "config.yaml:9: invalid config at corpus.sed: unknown key 'sed'; did you mean 'seed'? expected one of "
            "'domains', 'exclude', 'glob', 'hub_config', 'hub_id', 'hub_split', 'max_bytes', 'max_documents', 'name', "
            "'path', 'seed', 'shard_documents', 'source', 'text_field', 'val_fraction'",
        ),
        (
            lambda c: c["tokenize"].update(token_budget=-5),
            "invalid config at tokenize.token_budget: -5 is less than the minimum of 1",
        ),
        (
            lambda c: c["tokenizers"]["bpe32k"].update(vocab_size="big"),
            "invalid config at tokenizers.bpe32k.vocab_size: 'big' is not of type 'integer'",
        ),
    ],
)
def test_bad_config_stops_with_one_line_naming_it(tmp_path, edit, message):
    config = write_config(tmp_path / "config.yaml", edit)
    proc = snakemake(tmp_path, "-n", "--configfile", str(config), check=False)
    assert proc.returncode != 0
    assert any(line.endswith(message) for line in (proc.stdout + proc.stderr).splitlines())  # FILE:LINE: message
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("corpus", "message"),
    [
        ({"glob": "/no/such/folder/**/*.txt"}, "pit data: error: corpus glob '/no/such/folder/**/*.txt'"),
        (
            {
                "source": "hub",
                "hub_id": "no-such-org/no-such-data",
                "hub_config": None,
                "hub_split": "train",
                "text_field": "text",
            },
            "pit data: error: cannot open hub data set 'no-such-org/no-such-data'",
        ),
    ],
)
def test_unusable_corpus_fails_the_run_with_one_line_and_no_output(tmp_path, corpus, message):
    config = write_config(tmp_path / "config.yaml", lambda c: c["corpus"].update(corpus))
    proc = snakemake(tmp_path, "download_corpus", "--cores", "1", "--configfile", str(config), check=False)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert any(line.startswith(message) for line in output.splitlines()), output
    assert not (tmp_path / "resources").exists()

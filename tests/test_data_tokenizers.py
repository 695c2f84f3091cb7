"""`pit data tokenizer`: GPT-2 from the package files, deterministic BPE training, loadable folders."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from transformers import AutoTokenizer

from pit.data.download import download
from pit.data.tokenizers import build_tokenizer, load_tokenizer, tiktoken_gpt2
from pit.errors import PitError
from pit.io import sha256_file

DEFAULTS = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/config.yaml").read_text())
BPE = DEFAULTS["tokenizers"]["bpe32k"]  # the default profile's 32k BPE, trained on the default corpus
TEXT = "def f(x):\n    return x  # naïve café 😀 <|endoftext|>\r\n\t 12345 it's"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "manifest.json"
    download(DEFAULTS["corpus"], path)
    return path


def test_gpt2_tokenizer_folder(tmp_path):
    meta = build_tokenizer("gpt2", {"kind": "gpt2", "source": "package"}, tmp_path / "gpt2")
    assert (meta["vocab_size"], meta["eos_id"]) == (50257, 50256)
    assert meta["tokenizer_sha256"] == sha256_file(tmp_path / "gpt2/tokenizer.json")
    hf = AutoTokenizer.from_pretrained(tmp_path / "gpt2")
    assert hf.eos_token == "<|endoftext|>" and hf.eos_token_id == 50256 and len(hf) == 50257
    plain = TEXT.replace("<|endoftext|>", "")
    assert hf(plain, add_special_tokens=False)["input_ids"] == tiktoken_gpt2().encode_ordinary(plain)
    # A teacher checkpoint folder as the source gives the same tokenizer.
    again = build_tokenizer("gpt2", {"kind": "gpt2", "source": str(tmp_path / "gpt2")}, tmp_path / "copy")
    assert again["tokenizer_sha256"] == meta["tokenizer_sha256"]


def test_bpe_training_is_deterministic(corpus, tmp_path):
    assert BPE["vocab_size"] == 32000
    first = build_tokenizer("bpe", BPE, tmp_path / "a", corpus=corpus)
    # Again in a fresh process, through the command line, with another thread count.
    code = "import sys; from pit.commands import main; sys.exit(main())"
    args = [
        "data",
        "tokenizer",
        "--name",
        "bpe",
        "--spec",
        json.dumps(BPE),
        "--corpus",
        str(corpus),
        "--out",
        str(tmp_path / "b"),
    ]
    subprocess.run([sys.executable, "-c", code, *args], check=True, env=os.environ | {"RAYON_NUM_THREADS": "1"})
    assert (tmp_path / "a/tokenizer.json").read_bytes() == (tmp_path / "b/tokenizer.json").read_bytes()
    assert json.loads((tmp_path / "b/meta.json").read_text()) == first and first["eos_id"] == 0
    sampled = build_tokenizer("bpe", BPE | {"sample_bytes": 100_000}, tmp_path / "c", corpus=corpus)
    assert sampled["tokenizer_sha256"] != first["tokenizer_sha256"]
    hf = AutoTokenizer.from_pretrained(tmp_path / "a")
    assert hf.eos_token_id == 0
    assert hf.decode(hf(TEXT, add_special_tokens=False)["input_ids"]) == TEXT


def test_tampered_tokenizer_is_rejected(tmp_path):
    build_tokenizer("gpt2", {"kind": "gpt2", "source": "package"}, tmp_path / "gpt2")
    path = tmp_path / "gpt2/tokenizer.json"
    data = json.loads(path.read_text())
    data["model"]["vocab"]["hello"] = 7
    path.write_text(json.dumps(data))
    with pytest.raises(PitError, match="does not match the sha256"):
        load_tokenizer(tmp_path / "gpt2")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "wordpiece"}, "kind 'wordpiece'"),
        (BPE | {"vocab_size": 100}, "vocab_size 100"),
        (BPE | {"extra": 1}, "expected exactly"),
        ({"kind": "gpt2", "source": "/no/such/checkpoint"}, "source '/no/such/checkpoint'"),
    ],
)
def test_bad_tokenizer_specs_are_named(tmp_path, corpus, spec, message):
    with pytest.raises(PitError, match=message):
        build_tokenizer("t", spec, tmp_path / "t", corpus=corpus)
    assert not (tmp_path / "t").exists()


def test_the_profile_schema_takes_a_checkpoint_tokenizer():
    from pit.pipeline.config import schema_problem

    config = copy.deepcopy(DEFAULTS)
    config["tokenizers"]["gpt2"] = {"kind": "checkpoint", "source": "models/tinyllama"}
    assert schema_problem(config) is None
    config["tokenizers"]["gpt2"]["vocab_size"] = 32000
    assert schema_problem(config)[0] == ["tokenizers", "gpt2", "vocab_size"]  # the unknown key itself

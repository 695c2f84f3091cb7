"""`pit data tokenize` and the memory-mapped reader: file format, workers, budget, windows, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pit.data.download import download, iter_text_batches
from pit.data.reader import TokenFile
from pit.data.tokenize import _encode_batch, _init_worker, tokenize_split
from pit.data.tokenizers import bos_prefix, build_tokenizer
from pit.errors import PitError

CORPUS = {
    "name": "stdlib", "source": "local", "glob": "@stdlib/**/*.py", "exclude": ["site-packages/*"],
    "max_documents": 60, "max_bytes": None, "val_fraction": 0.2, "seed": 0, "shard_documents": 30,
}  # fmt: skip


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    download(CORPUS, folder / "corpus/manifest.json")
    build_tokenizer("gpt2", {"kind": "gpt2", "source": "package"}, folder / "gpt2")
    return folder / "corpus/manifest.json", folder / "gpt2"


@pytest.fixture(scope="module")
def train_file(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("tokens") / "train.bin"
    tokenize_split(*inputs[:1], "train", inputs[1], out, workers=1, batch_documents=8)
    return out


def test_sidecar_and_round_trip(inputs, train_file):
    data = TokenFile(train_file)
    texts = [t for batch in iter_text_batches(inputs[0], "train", 100) for t in batch]
    assert data.tokens.dtype == np.uint16 and len(data) == data.meta["tokens"]
    assert data.meta["documents"] == len(texts) and data.meta["eos_id"] == 50256 and data.meta["vocab_size"] == 50257
    assert data.tokens[-1] == 50256 and int((data.tokens == 50256).sum()) == len(texts)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(inputs[1] / "tokenizer.json"))
    assert [tokenizer.decode(doc.tolist()) for doc in data.documents()] == texts


def test_two_workers_write_the_same_file(inputs, train_file, tmp_path):
    tokenize_split(inputs[0], "train", inputs[1], tmp_path / "train.bin", workers=2, batch_documents=8)
    assert (tmp_path / "train.bin").read_bytes() == train_file.read_bytes()


def test_token_budget_keeps_whole_documents(inputs, train_file, tmp_path):
    full = TokenFile(train_file)
    budget = len(full) // 2
    meta = tokenize_split(inputs[0], "train", inputs[1], tmp_path / "t.bin", batch_documents=8, token_budget=budget)
    part = TokenFile(tmp_path / "t.bin")
    assert meta["tokens"] <= budget and part.tokens[-1] == 50256
    assert np.array_equal(part.tokens, full.tokens[: len(part)])
    assert meta["tokens"] + len(full.documents()[meta["documents"]]) + 1 > budget  # the next one did not fit


def test_windows_and_starts(train_file):
    data = TokenFile(train_file)
    starts = data.random_starts(4, 16, np.random.default_rng(7))
    assert np.array_equal(starts, data.random_starts(4, 16, np.random.default_rng(7)))  # stateless
    batch = data.windows(starts, 16)
    assert batch.shape == (4, 17) and batch.dtype == torch.int64
    assert torch.equal(batch[1], torch.from_numpy(data.tokens[starts[1] : starts[1] + 17].astype(np.int64)))
    sequential = data.sequential_starts(16)
    assert sequential[0] == 0 and np.all(np.diff(sequential) == 16) and sequential[-1] + 17 <= len(data)
    assert len(data.sequential_starts(16, max_windows=3)) == 3
    big = data.random_starts(10_000, 16, np.random.default_rng(0))
    assert big.min() >= 0 and big.max() + 17 <= len(data)


def test_reader_errors(train_file, tmp_path):
    with pytest.raises(PitError, match="expected it and its sidecar"):
        TokenFile(tmp_path / "missing.bin")
    (tmp_path / "cut.bin").write_bytes(train_file.read_bytes()[:-2])
    (tmp_path / "cut.json").write_text(train_file.with_suffix(".json").read_text())
    with pytest.raises(PitError, match="corrupt or truncated"):
        TokenFile(tmp_path / "cut.bin")
    data = TokenFile(train_file)
    with pytest.raises(PitError, match="fewer than one window"):
        data.random_starts(1, len(data), np.random.default_rng(0))
    with pytest.raises(PitError, match="window starts must lie"):
        data.windows([len(data) - 5], 16)


def test_context_length_too_long_for_the_split_writes_nothing(inputs, tmp_path):
    with pytest.raises(PitError, match="fewer than one window"):
        tokenize_split(inputs[0], "val", inputs[1], tmp_path / "val.bin", context_length=10**9)
    assert not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def default_profile_data(tmp_path_factory):
    """The default profile's corpus (config/config.yaml, whole) and both its tokenizers."""
    import yaml
    from helpers import ROOT

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    folder = tmp_path_factory.mktemp("default_profile")
    manifest = folder / "corpus/manifest.json"
    download(config["corpus"], manifest)
    for name, spec in config["tokenizers"].items():
        build_tokenizer(name, spec, folder / name, corpus=str(manifest))
    return manifest, folder, list(config["tokenizers"])


def test_tiktoken_path_gives_todays_ids_on_the_whole_default_corpus(default_profile_data, tmp_path):
    """Both tokenizers of the default profile, both splits, every document: the token file the data stage writes
    (tiktoken) holds exactly the ids `tokenizers` gives, EOS after each document."""
    from tokenizers import Tokenizer

    manifest, folder, names = default_profile_data
    for name in names:
        reference = Tokenizer.from_file(str(folder / name / "tokenizer.json"))
        reference.encode_special_tokens = True
        for split in ("train", "val"):
            sidecar = tokenize_split(manifest, split, folder / name, tmp_path / f"{name}-{split}.bin", workers=2)
            assert sidecar["encoder"].startswith("tiktoken ")
            texts = [t for batch in iter_text_batches(manifest, split, 256) for t in batch]
            expected = [
                i
                for e in reference.encode_batch_fast(texts, add_special_tokens=False)
                for i in [*e.ids, sidecar["eos_id"]]
            ]
            got = np.fromfile(tmp_path / f"{name}-{split}.bin", dtype=sidecar["dtype"])
            assert sidecar["documents"] == len(texts) and got.tolist() == expected, (name, split)


def test_a_tokenizer_tiktoken_cannot_serve_falls_back_to_tokenizers(default_profile_data, tmp_path):
    """A BPE whose merged ids do not grow with the merge order: tiktoken would merge in another order, so the
    data stage encodes with `tokenizers` and says so in the sidecar."""
    import json
    import shutil

    from pit.data.tokenizers import tiktoken_encoding
    from pit.io import sha256_file

    manifest, folder, _ = default_profile_data
    shutil.copytree(folder / "gpt2", tmp_path / "swapped")
    spec_path = tmp_path / "swapped/tokenizer.json"
    spec = json.loads(spec_path.read_text())
    vocab = spec["model"]["vocab"]
    first, second = ("".join(m) if isinstance(m, list) else m.replace(" ", "") for m in spec["model"]["merges"][:2])
    vocab[first], vocab[second] = vocab[second], vocab[first]
    spec_path.write_text(json.dumps(spec))
    meta = json.loads((tmp_path / "swapped/meta.json").read_text())
    (tmp_path / "swapped/meta.json").write_text(json.dumps(meta | {"tokenizer_sha256": sha256_file(spec_path)}))
    assert tiktoken_encoding(spec_path)[1] == "merged tokens' ids do not grow with the merge order"
    sidecar = tokenize_split(manifest, "val", tmp_path / "swapped", tmp_path / "val.bin", workers=2)
    assert sidecar["encoder"].startswith("tokenizers ")


def llama_style_tokenizer(folder, texts: list[str], eos: str | None = "</s>"):
    """A tokenizer checkpoint folder framed as Llama-2's: a Metaspace BPE with <unk>, <s> and </s> (no
    <|endoftext|>), whose post-processor puts <s> (id 1) before every text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"]))
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    specials = {"bos_token": "<s>", "unk_token": "<unk>"} | ({"eos_token": eos} if eos else {})
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, **specials).save_pretrained(folder)
    return folder


def test_a_checkpoint_tokenizer_keeps_its_own_bos_and_eos(inputs, train_file, tmp_path):
    """Kind `checkpoint`: a Llama-style tokenizer (EOS </s>, BOS <s> before every text) gives BOS + document + EOS
    per document; its special-token text inside a document stays text. GPT-2's tokenizer puts nothing before a
    text, so its files keep the plain framing (the default profile's data are unchanged)."""
    from transformers import AutoTokenizer

    from pit.evaluation.likelihood import encode_pair
    from pit.evaluation.tasks import load_task
    from pit.training.lora import encode_examples

    texts = [t for batch in iter_text_batches(inputs[0], "train", 100) for t in batch]
    source = llama_style_tokenizer(tmp_path / "llama", texts)
    meta = build_tokenizer("llama", {"kind": "checkpoint", "source": str(source)}, tmp_path / "tok")
    assert (meta["eos_token"], meta["eos_id"], meta["bos_id"], meta["vocab_size"]) == ("</s>", 2, 1, 400)
    hf = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert (hf.bos_token_id, hf.eos_token_id, hf("a b")["input_ids"][0]) == (1, 2, 1)
    sidecar = tokenize_split(inputs[0], "train", tmp_path / "tok", tmp_path / "t.bin", workers=2, batch_documents=8)
    data = TokenFile(tmp_path / "t.bin")
    assert sidecar["bos_id"] == 1 and data.meta["eos_id"] == 2 and sidecar["documents"] == len(texts)
    ends = np.flatnonzero(data.tokens == 2)
    assert len(ends) == len(texts) and ends[-1] == len(data) - 1
    assert data.tokens[0] == 1 and (data.tokens[ends[:-1] + 1] == 1).all() and (data.tokens == 1).sum() == len(texts)
    plain = hf(texts, add_special_tokens=False)["input_ids"]
    assert [doc.tolist() for doc in data.documents()] == plain
    _init_worker(str(tmp_path / "tok/tokenizer.json"), 2, "uint16", (1,))  # special-token text inside a document
    ids = _encode_batch(["a </s><s> b"])[0].tolist()
    assert ids[0] == 1 and ids[-1] == 2 and 1 not in ids[1:] and 2 not in ids[:-1] and len(ids) > 4
    # LoRA's examples and the likelihood's pairs start with the same BOS; GPT-2's get none.
    task = load_task("gsm8k", "offline", limit=2, split="train")
    prompts = [hf(task.spec.prompt(r), add_special_tokens=False)["input_ids"] for r in task.records.values()]
    for (ids, n_prompt), prompt in zip(encode_examples(task, hf, seq_len=64), prompts, strict=True):
        assert ids[0] == 1 and ids[1:n_prompt] == prompt[len(prompt) - n_prompt + 1 :] and 1 not in ids[1:]
    assert encode_pair(hf, "x = 1", "0", None)[0][0] == 1
    gpt2 = AutoTokenizer.from_pretrained(inputs[1])
    assert bos_prefix(gpt2) == [] and encode_pair(gpt2, "x = 1", "0", None)[0] == [87, 796, 352, 15]
    assert "bos_id" not in TokenFile(train_file).meta


def test_bos_per_window(inputs, train_file, tmp_path):
    """bos_per_window (docs/data.md): auto, for a tokenizer that puts BOS before every text, makes every window a
    model trains or is scored on start with BOS (BOS + the next seq_len tokens; a window at a document's BOS is read
    as it is); false or a tokenizer without BOS (GPT-2's, the default profile's) leaves windows as the file has
    them, and its sidecar without the key."""
    import json
    import shutil

    from pit.data.tokenizers import window_bos_id

    texts = [t for batch in iter_text_batches(inputs[0], "val", 100) for t in batch]
    source = llama_style_tokenizer(tmp_path / "llama", texts)
    meta = build_tokenizer("llama", {"kind": "checkpoint", "source": str(source)}, tmp_path / "tok")
    assert meta["window_bos_id"] == 1 and meta["bos_id"] == 1
    sidecar = tokenize_split(inputs[0], "val", tmp_path / "tok", tmp_path / "v.bin", batch_documents=8)
    data, seq_len = TokenFile(tmp_path / "v.bin"), 16
    assert sidecar["window_bos_id"] == 1 and data.meta["window_bos_id"] == 1
    starts = np.array([0, 3, 5, int(np.flatnonzero(data.tokens == 1)[1]), len(data) - seq_len - 1])
    rows = data.windows(starts, seq_len)
    assert rows.shape == (5, seq_len + 1) and (rows[:, 0] == 1).all()
    for row, s in zip(rows.tolist(), starts):
        own = data.tokens[s : s + seq_len + 1].tolist()
        assert row == (own if own[0] == 1 else [1, *own[:seq_len]])
    assert rows[0].tolist() == data.tokens[: seq_len + 1].tolist() and rows[1, 1] == data.tokens[3]
    # bos_per_window false: no window_bos_id (the same token file; its windows as the file has them)
    assert window_bos_id("x", False, 1, 1) is None
    shutil.copy(tmp_path / "v.bin", tmp_path / "plain.bin")
    (tmp_path / "plain.json").write_text(json.dumps({k: v for k, v in sidecar.items() if k != "window_bos_id"}))
    plain = TokenFile(tmp_path / "plain.bin").windows(starts, seq_len)
    assert plain.tolist() == [data.tokens[s : s + seq_len + 1].tolist() for s in starts]
    assert window_bos_id("x", True, None, 5) == 5 and window_bos_id("x", "auto", None, 5) is None
    with pytest.raises(PitError, match="bos_per_window true: the tokenizer has no BOS token"):
        window_bos_id("x", True, None, None)
    with pytest.raises(PitError, match="bos_per_window 'yes': expected auto, true or false"):
        build_tokenizer("x", {"kind": "checkpoint", "source": str(source), "bos_per_window": "yes"}, tmp_path / "x")
    from transformers import AutoTokenizer

    from pit.evaluation.likelihood import encode_pair

    ids, kept, cut, _ = encode_pair(AutoTokenizer.from_pretrained(tmp_path / "tok"), texts[0], "a b", context=8)
    assert cut and len(ids) == 8 and ids[0] == 1 and 1 not in ids[1:]  # a prompt cut to fit keeps its BOS
    gpt2 = TokenFile(train_file)  # the default profile's data: no key, windows unchanged
    assert "window_bos_id" not in gpt2.meta and "window_bos_id" not in json.loads((inputs[1] / "meta.json").read_text())
    assert gpt2.windows([0, 7], 8).tolist() == [gpt2.tokens[0:9].tolist(), gpt2.tokens[7:16].tolist()]


def test_a_checkpoint_tokenizer_without_eos_is_refused(inputs, tmp_path):
    texts = [t for batch in iter_text_batches(inputs[0], "train", 100) for t in batch]
    source = llama_style_tokenizer(tmp_path / "no-eos", texts, eos=None)
    with pytest.raises(PitError, match="has no eos_token; expected one to mark the end of a document"):
        build_tokenizer("x", {"kind": "checkpoint", "source": str(source)}, tmp_path / "tok")
    with pytest.raises(PitError, match=r"tokenizer source .*none': no such folder .*; expected a model folder"):
        build_tokenizer("x", {"kind": "checkpoint", "source": str(tmp_path / "none")}, tmp_path / "tok")
    assert not (tmp_path / "tok").exists()

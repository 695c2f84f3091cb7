"""Memory-mapped reading of token files: stateless, so a seeded per-step Generator makes resume exact."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pit.errors import PitError
from pit.io import read_json, sha256_file
from pit.sidecars import read_object

MAX_ID_CHUNK = 1 << 26  # tokens per step of the max-id pass (128 MiB of uint16)
SIDECAR_KEYS = {"dtype": str, "tokens": int, "vocab_size": int, "eos_id": int}


def read_sidecar(path: Path) -> dict[str, Any]:
    """A token file's sidecar, checked: valid JSON with dtype, tokens, vocab_size and eos_id of the right kinds."""
    meta = read_json(path)
    if not isinstance(meta, dict):
        raise PitError(f"sidecar {str(path)!r}: expected a JSON object, got {type(meta).__name__}")
    for key, kind in SIDECAR_KEYS.items():
        value = meta.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or kind is int and value < 0:
            want = "a non-negative integer" if kind is int else "a string"
            raise PitError(f"sidecar {str(path)!r}: {key} {value!r}; expected {want}")
    try:
        dtype = np.dtype(meta["dtype"])
    except TypeError:
        raise PitError(f"sidecar {str(path)!r}: dtype {meta['dtype']!r} is not a numpy dtype") from None
    if dtype.kind != "u" or meta["vocab_size"] < 1 or meta["vocab_size"] - 1 > np.iinfo(dtype).max:
        raise PitError(
            f"sidecar {str(path)!r}: dtype {dtype.name} and vocab_size {meta['vocab_size']}; expected an unsigned "
            "integer type that holds every id below vocab_size"
        )
    if meta["eos_id"] >= meta["vocab_size"]:
        raise PitError(f"sidecar {str(path)!r}: eos_id {meta['eos_id']} >= vocab_size {meta['vocab_size']}")
    for key in ("bos_id", "window_bos_id"):
        bos = meta.get(key, 0)
        if not isinstance(bos, int) or isinstance(bos, bool) or not 0 <= bos < meta["vocab_size"]:
            raise PitError(f"sidecar {str(path)!r}: {key} {bos!r}; expected an integer in [0, {meta['vocab_size']})")
    return meta


class TokenFile:
    """A flat token file (`.bin`) and its sidecar (`.json`), read through np.memmap.

    >>> data = TokenFile("results/data/gpt2/train.bin")
    >>> batch = data.windows(data.random_starts(8, 1024, np.random.default_rng(step)), 1024)
    >>> inputs, targets = batch[:, :-1], batch[:, 1:]
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        sidecar = self.path.with_suffix(".json")
        if not self.path.is_file() or not sidecar.is_file():
            raise PitError(
                f"token file {str(self.path)!r}: expected it and its sidecar {sidecar.name} (run `pit data tokenize`)"
            )
        self.meta: dict[str, Any] = read_sidecar(sidecar)
        if self.meta.get("pending"):  # pit data tokenize writes it before the tokens, the complete one after them
            raise PitError(
                f"token file {str(self.path)!r}: expected it and its sidecar, but {sidecar.name} is pending (its "
                "`pit data tokenize` was interrupted): run it again"
            )
        dtype = np.dtype(self.meta["dtype"])
        expected = self.meta["tokens"] * dtype.itemsize
        if self.path.stat().st_size != expected:
            raise PitError(
                f"token file {str(self.path)!r} is {self.path.stat().st_size} bytes, expected {expected} "
                f"({self.meta['tokens']} {dtype.name} tokens per its sidecar): corrupt or truncated"
            )
        self.tokens = np.memmap(self.path, dtype=dtype, mode="r") if expected else np.zeros(0, dtype)
        self._check_ids()

    def _check_ids(self) -> None:
        """Every token id lies below the sidecar's vocab_size (one pass over the file, in chunks): an id >= V
        would otherwise crash the first training step, or index a wrong row."""
        V, top = self.meta["vocab_size"], -1
        for start in range(0, len(self.tokens), MAX_ID_CHUNK):
            top = max(top, int(self.tokens[start : start + MAX_ID_CHUNK].max()))
        if top >= V:
            at = int(np.flatnonzero(np.asarray(self.tokens) == top)[0])
            raise PitError(
                f"token file {str(self.path)!r} holds token id {top} (first at position {at}) but its sidecar says "
                f"vocab_size = {V}; expected every id < {V} (a damaged file, or a sidecar of another tokenizer)"
            )

    def check_tokenizer(self, folder: str | os.PathLike) -> None:
        """The token file was made with the tokenizer in `folder` (its meta.json): the same tokenizer.json hash
        and vocabulary size. A sidecar claiming another vocabulary would size the model wrongly."""
        meta_path = Path(folder) / "meta.json"
        if not meta_path.is_file():
            raise PitError(f"tokenizer folder {str(folder)!r}: expected meta.json (run `pit data tokenizer`)")
        meta = read_object(meta_path, "a tokenizer's meta.json (`pit data tokenizer` writes it)",
                           optional={"tokenizer_sha256": str, "vocab_size": int})  # fmt: skip
        for key in ("tokenizer_sha256", "vocab_size"):
            if self.meta.get(key) != meta.get(key):
                raise PitError(
                    f"token file {str(self.path)!r} records {key} {self.meta.get(key)!r} but the tokenizer in "
                    f"{str(folder)!r} has {meta.get(key)!r}; expected a token file made with this tokenizer"
                )

    def check_checkpoint(self, checkpoint: str | os.PathLike) -> None:
        """The token file was made with the tokenizer a checkpoint carries (its tokenizer.json, the file
        `tokenizer_sha256` hashes): a checkpoint without one, or a sidecar without the hash, is not checked. The
        vocabulary size alone does not tell two tokenizers apart."""
        saved = Path(checkpoint) / "tokenizer.json"
        recorded = self.meta.get("tokenizer_sha256")
        if saved.is_file() and recorded and sha256_file(saved) != recorded:
            name = self.meta.get("tokenizer")
            raise PitError(
                f"token file {str(self.path)!r} was made with tokenizer {recorded[:12]} ({name!r}) but the checkpoint "
                f"{str(checkpoint)!r} carries tokenizer {sha256_file(saved)[:12]}; expected data tokenized with the "
                "checkpoint's tokenizer"
            )

    def __len__(self) -> int:
        return len(self.tokens)

    def _check_fits(self, seq_len: int) -> None:
        if len(self) < seq_len + 1:
            raise PitError(
                f"token file {str(self.path)!r} holds {len(self)} tokens, fewer than one window of "
                f"seq_len + 1 = {seq_len + 1}"
            )

    def random_starts(self, n: int, seq_len: int, rng: np.random.Generator) -> np.ndarray:
        """`n` uniformly drawn window starts; every window of seq_len + 1 tokens lies in the file."""
        self._check_fits(seq_len)
        return rng.integers(0, len(self) - seq_len, size=n)

    def sequential_starts(self, seq_len: int, max_windows: int | None = None) -> np.ndarray:
        """Starts of non-overlapping windows in file order (targets overlap inputs by one token)."""
        self._check_fits(seq_len)
        starts = np.arange(0, len(self) - seq_len, seq_len)
        return starts if max_windows is None else starts[:max_windows]

    def windows(self, starts, seq_len: int) -> torch.LongTensor:
        """The windows at `starts` as a (len(starts), seq_len + 1) int64 tensor: tokens[s : s + seq_len + 1], or
        with the sidecar's `window_bos_id` (bos_per_window, docs/data.md) BOS + tokens[s : s + seq_len], so every
        window a model trains or is scored on starts with BOS (a window that starts at a document's BOS is read as
        it is). Inputs are window[:-1], targets window[1:]."""
        self._check_fits(seq_len)
        starts = np.asarray(starts, dtype=np.int64)
        if starts.size and (starts.min() < 0 or starts.max() > len(self) - seq_len - 1):
            raise PitError(f"window starts must lie in [0, {len(self) - seq_len - 1}] for seq_len {seq_len}")
        rows = np.stack([self._window(s, seq_len) for s in starts]) if starts.size else np.zeros((0, seq_len + 1))
        return torch.from_numpy(rows.astype(np.int64))

    def _window(self, start: int, seq_len: int) -> np.ndarray:
        row, bos = self.tokens[start : start + seq_len + 1], self.meta.get("window_bos_id")
        if bos is None or row[0] == bos:
            return row
        return np.concatenate([np.array([bos], dtype=row.dtype), row[:seq_len]])

    def documents(self) -> list[np.ndarray]:
        """The token ids of each document (BOS and EOS removed), for checks and evaluation."""
        ends = np.flatnonzero(self.tokens == self.meta["eos_id"])
        starts = np.concatenate([[0], ends[:-1] + 1]) + int("bos_id" in self.meta)
        return [np.asarray(self.tokens[start:end]) for start, end in zip(starts, ends)]


def token_counts(data: TokenFile, minlength: int | None = None) -> np.ndarray:
    """How often each id occurs in the whole file (float64, at least `minlength` entries; default the sidecar's
    vocab_size): the unigram counts behind `unigram_entropy` and the context-free fit of `pit diagnose`."""
    length = data.meta["vocab_size"] if minlength is None else minlength
    return np.bincount(np.asarray(data.tokens), minlength=length).astype(np.float64)


def unigram_entropy(data: TokenFile) -> float:
    """H = -sum_v p(v) ln p(v) of the file's token frequencies (nats/token): the loss of the best model that ignores
    context, so a language model has learned something once its validation loss is well below it."""
    counts = token_counts(data)
    return entropy(counts / counts.sum())


def entropy(q: np.ndarray) -> float:
    """H(q) = -sum_v q_v ln q_v over q_v > 0 (nats)."""
    p = q[q > 0]
    return float(-(p * np.log(p)).sum())

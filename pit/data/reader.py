"""Memory-mapped reading of token files: stateless, so a seeded per-step Generator makes resume exact."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pit.errors import PitError


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
        self.meta: dict[str, Any] = json.loads(sidecar.read_text())
        dtype = np.dtype(self.meta["dtype"])
        expected = self.meta["tokens"] * dtype.itemsize
        if self.path.stat().st_size != expected:
            raise PitError(
                f"token file {str(self.path)!r} is {self.path.stat().st_size} bytes, expected {expected} "
                f"({self.meta['tokens']} {dtype.name} tokens per its sidecar): corrupt or truncated"
            )
        self.tokens = np.memmap(self.path, dtype=dtype, mode="r") if expected else np.zeros(0, dtype)

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
        """The windows at `starts` as a (len(starts), seq_len + 1) int64 tensor."""
        self._check_fits(seq_len)
        starts = np.asarray(starts, dtype=np.int64)
        if starts.size and (starts.min() < 0 or starts.max() > len(self) - seq_len - 1):
            raise PitError(f"window starts must lie in [0, {len(self) - seq_len - 1}] for seq_len {seq_len}")
        rows = (
            np.stack([self.tokens[s : s + seq_len + 1] for s in starts]) if starts.size else np.zeros((0, seq_len + 1))
        )
        return torch.from_numpy(rows.astype(np.int64))

    def documents(self) -> list[np.ndarray]:
        """The token ids of each document (EOS removed), for checks and evaluation."""
        ends = np.flatnonzero(self.tokens == self.meta["eos_id"])
        starts = np.concatenate([[0], ends[:-1] + 1])
        return [np.asarray(self.tokens[start:end]) for start, end in zip(starts, ends)]

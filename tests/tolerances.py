"""The suite's numerical tolerances: each one is a floating-point rounding-error bound at the size tested.

A fixed constant that held on one CPU failed on another (Delta_TI = 1.48e-4 at d = 1,600 on an Intel Xeon with
AVX-512 against a bound of 1e-4 met on AMD EPYC): machines add the terms of a product in other orders. The bounds
(pit/core/rounding.py, with their derivations) do not depend on the order; each test states which bound it uses and
at which size. `within(value, bound, what)` is the comparison the tests use: with PIT_TOLERANCE_LOG=FILE set it also
appends `what value bound value/bound` to FILE, so `PIT_TOLERANCE_LOG=/tmp/tol.txt python -m pytest -n 0 ...` shows
how close this machine comes to each bound (docs/reproducibility.md, "Bit-identical, or within tolerance").
"""

from __future__ import annotations

import math
import os

from pit.core.rounding import (  # noqa: F401  (re-exported: the tests import the bounds from here)
    U32,
    U64,
    delta_ti_bound,
    network_depth,
    orthonormality_bound,
    product,
    relative_bound,
)


def within(value: float, bound: float, what: str = "") -> bool:
    """value <= bound (a NaN value is not within); with PIT_TOLERANCE_LOG set, the ratio is appended to that file."""
    log = os.environ.get("PIT_TOLERANCE_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{what or '?'}\t{value:.3e}\t{bound:.3e}\t{value / bound if bound else math.inf:.4f}\n")
    return value <= bound


def close(a, b, d: int, depth: int, what: str = "", kappa: float = 1.0) -> bool:
    """max |a - b| <= relative_bound(d, depth, kappa) * max |b|: two float32 evaluations of the same function (tensors
    or arrays), compared at the scale of the reference `b` (an entry near 0 carries the error of the large ones)."""
    gap, scale = float(abs(a - b).max()), float(abs(b).max())
    return within(gap, relative_bound(d, depth, kappa) * scale, what)


def interface_bound(iface) -> float:
    """`delta_ti_bound` of a PIT interface (pit.core.interfaces.PITTying) at its own d and kappa(T)."""
    import torch

    w = torch.linalg.eigvalsh(iface.transform().detach().double())
    return delta_ti_bound(iface.dim, (w.max() / w.min()).item())


def run_bound(run_dir) -> float:
    """`delta_ti_bound` for the Delta_TI a PIT run logged, at its model's d and the kappa(T) of its final checkpoint
    (T moves by ~lr a step from where it started, so the final kappa stands for the run's)."""
    from pathlib import Path

    from pit.models.checkpoint import load_model

    return interface_bound(load_model(Path(run_dir) / "final").interface)


def loss_bound(d: int, vocab: int, scale: float = 1.0) -> float:
    """|a - b| of one mean cross-entropy computed two ways (chunked over rows or over the vocabulary, compiled or
    eager, another kernel): the logits' d-term products round by relative_bound(d) of their scale `scale` (the largest
    |logit|, ~1 for the small models here), the log-sum-exp's vocab-term sum by relative_bound(vocab); a mean over
    rows does not add to either. A gradient's relative difference has the same bound at scale 1."""
    return relative_bound(d) * scale + relative_bound(vocab)

"""Micro-benchmark: forward + backward of the token interface alone (embedding, head, loss), PIT (Z frozen /
trainable) vs TT vs untied, each with the naive loss (full logits, F.cross_entropy) and the chunked fused
loss of `pit.core.loss`, at V = 50257, d = 768, 8192 tokens, on this machine's CPU. Ratios come from one run.

    python benchmarks/bench_interface.py [--tokens 8192] [--vocab 50257] [--dim 768] [--rounds 3] [--json]

Each call: h = embed(ids) + body (a stand-in for the transformer, requires grad); loss(head_input(h),
targets); backward. With Z frozen PIT needs no weight gradient for the V x d table, so it skips the
(tokens x V x d) GEMM that TT pays for dE. Arms are interleaved over rounds (`pit.training.bench.time_arms`).
"""

from __future__ import annotations

import argparse
import json

import torch

from pit.core.interfaces import PITTying, TransposeTying, UntiedHead
from pit.core.loss import linear_cross_entropy, naive_linear_cross_entropy
from pit.training.bench import time_arms

LOSSES = {"naive": naive_linear_cross_entropy, "chunked": linear_cross_entropy}


def main(argv=None):
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    V, d, N = args.vocab, args.dim, args.tokens
    ids, targets = torch.randint(0, V, (N,)), torch.randint(0, V, (N,))
    body = torch.randn(N, d, requires_grad=True)
    interfaces = {
        "tt": TransposeTying.from_scratch(V, d),
        "pit_frozen_z": PITTying.from_scratch(V, d),
        "pit_trainable_z": PITTying.from_scratch(V, d, trainable_z=True),
        "untied": UntiedHead.from_scratch(V, d),
    }

    def call(iface, loss):
        iface.zero_grad(set_to_none=True)
        body.grad = None
        loss(*iface.head_input(iface.embed(ids) + body), targets).backward()

    arms = {
        f"{name}/{loss}": (lambda i=iface, f=fn: call(i, f))
        for name, iface in interfaces.items()
        for loss, fn in LOSSES.items()
    }
    seconds = time_arms(arms, args.rounds, 1)
    result = {
        "vocab": V,
        "dim": d,
        "tokens": N,
        "threads": torch.get_num_threads(),
        "seconds": seconds,
        "ratio_to_tt_naive": {k: v / seconds["tt/naive"] for k, v in seconds.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for k, v in seconds.items():
        print(f"{k:24s} {v * 1e3:8.1f} ms   {result['ratio_to_tt_naive'][k]:.3f} x TT (naive)")


if __name__ == "__main__":
    main()

"""Micro-benchmark: forward + backward of the token interface alone, PIT (Z frozen / trainable) vs TT
vs untied, at V = 50257, d = 768, 8192 tokens, on this machine's CPU. Ratios come from one run.

    python benchmarks/bench_interface.py [--tokens 8192] [--vocab 50257] [--dim 768] [--repeats 5]

Each step: x = embed(ids); h = x + body (a stand-in for the transformer output, requires grad);
loss = cross_entropy(logits(h), targets); loss.backward(). With Z frozen PIT needs no weight
gradient for the V x d table, so it skips the (tokens x V x d) GEMM that TT pays for dW.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from pit.tying import PITTying, TransposeTying, UntiedHead


def step(iface, ids, targets, body):
    h = iface.embed(ids) + body
    loss = F.cross_entropy(iface.logits(h), targets)
    loss.backward()
    return loss


def time_interface(iface, ids, targets, body, repeats):
    step(iface, ids, targets, body)  # warm-up
    times = []
    for _ in range(repeats):
        iface.zero_grad(set_to_none=True)
        body.grad = None
        t0 = time.perf_counter()
        step(iface, ids, targets, body)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]  # median


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    V, d, N = args.vocab, args.dim, args.tokens
    ids = torch.randint(0, V, (N,))
    targets = torch.randint(0, V, (N,))
    body = torch.randn(N, d, requires_grad=True)
    arms = {
        "tt": TransposeTying.from_scratch(V, d),
        "pit_frozen_z": PITTying.from_scratch(V, d),
        "pit_trainable_z": PITTying.from_scratch(V, d, trainable_z=True),
        "untied": UntiedHead.from_scratch(V, d),
    }
    # interleave the arms over rounds so drift in machine load hits all of them alike
    seconds = {k: [] for k in arms}
    for _ in range(2):
        for name, iface in arms.items():
            seconds[name].append(time_interface(iface, ids, targets, body, args.repeats))
    result = {"vocab": V, "dim": d, "tokens": N, "threads": torch.get_num_threads(),
              "seconds": {k: min(v) for k, v in seconds.items()}}
    result["ratio_to_tt"] = {k: v / result["seconds"]["tt"] for k, v in result["seconds"].items()}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result["seconds"].items():
            print(f"{k:16s} {v * 1e3:8.1f} ms   {result['ratio_to_tt'][k]:.3f} x TT")


if __name__ == "__main__":
    main()

"""The Table 2 interface metrics (`pit.core.metrics.interface_metrics`, float64) against the direct evaluation on the
V x d anchor matrices, in one process: the same numbers, and the seconds each takes.

    python benchmarks/bench_interface_metrics.py [--vocab 50257] [--dim 2048] [--rounds 1] [--json]

- joint frame: three thin QRs of V x d matrices, everything else on 2d x d coordinates (docs/diagnostics.md);
- direct: anchor_agreement(E, pinv(W_out)), anchor_agreement(polar(E), polar(W_out^T)) and
  direct_path_asymmetry(E, W_out), each on the V x d (or V x 2d) matrices, as the code did before.
The pair is an untied one (W_out = E^T + noise), FP32 tables as a checkpoint holds them.
Results: benchmarks/out/bench_interface_metrics.json.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from common import save_result

from pit.core.linalg import cpu_threads, pinv_of_wide, polar
from pit.core.metrics import anchor_agreement, delta_ti, direct_path_asymmetry, interface_metrics


def direct(E: torch.Tensor, W_out: torch.Tensor) -> dict:
    E, W_out = E.double(), W_out.double()
    return {
        "delta_ti": delta_ti(E, W_out),
        "raw": anchor_agreement(E, pinv_of_wide(W_out)),
        "polar": anchor_agreement(polar(E)[0], polar(W_out.T)[0]),
        "asymmetry": direct_path_asymmetry(E, W_out),
    }


def flat(m: dict) -> dict:
    out = {}
    for k, v in m.items():
        out.update({f"{k}.{kk}": vv for kk, vv in v.items()} if isinstance(v, dict) else {k: v})
    return out


def timed(arms: dict, rounds: int) -> tuple[dict, dict]:
    """Best seconds of `rounds` interleaved calls per arm (no warm-up call: one call is minutes at 1.3B's shape),
    and each arm's result."""
    seconds, results = dict.fromkeys(arms, math.inf), {}
    for _ in range(rounds):
        for name, fn in arms.items():
            t0 = time.perf_counter()
            results[name] = fn()
            seconds[name] = min(seconds[name], time.perf_counter() - t0)
    return seconds, results


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    E = torch.randn(args.vocab, args.dim, generator=g) * 0.02
    W_out = E.T + 0.01 * torch.randn(args.dim, args.vocab, generator=g)
    with cpu_threads(args.threads):
        arms = {"joint_frame": lambda: interface_metrics(E, W_out), "direct": lambda: direct(E, W_out)}
        seconds, results = timed(arms, args.rounds)
    new, old = flat(results["joint_frame"]), flat(results["direct"])
    result = {
        "shape": {"vocab": args.vocab, "dim": args.dim},
        "threads": args.threads,
        "seconds": seconds,
        "speedup": seconds["direct"] / seconds["joint_frame"],
        "max_abs_difference": max(abs(new[k] - old[k]) for k in new),
        "max_rel_difference": max(abs(new[k] - old[k]) / abs(old[k]) for k in new if abs(old[k]) > 1e-12),
        "metrics": new,
    }
    save_result("bench_interface_metrics", result, args.json)
    print(
        f"V={args.vocab} d={args.dim}: joint frame {seconds['joint_frame']:.1f} s, direct {seconds['direct']:.1f} s "
        f"({result['speedup']:.2f}x); largest difference {result['max_abs_difference']:.1e} absolute, "
        f"{result['max_rel_difference']:.1e} relative"
    )


if __name__ == "__main__":
    main()

"""Training-step throughput of PIT vs TT vs untied on this machine (CPU): the `train` section of `pit bench`
alone, with its options.

    python benchmarks/bench_train_step.py [--layers 2] [--rounds 3] [--repeats 1] [--json]

Models: scratch-tiny, and the 133M-shaped scratch model (d = 768, 12 heads, 3 KV heads, d_ff = 2304) with
its depth cut to `--layers` blocks, at V = 50257 and V = 32000. One step = pit train's step
(`pit.training.bench.TrainStep`).
"""

from __future__ import annotations

import argparse
import json

from pit.training.bench import SIZES, train_section


def main(argv=None):
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--layers", type=int, default=2, help="depth of the 133M-shaped model")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = train_section(SIZES["default"], args.layers, args.rounds, args.repeats)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        print(
            f"{r['model']:13s} L={r['layers']:<2d} V={r['vocab']:<6d} {r['arm']:16s} {r['tokens_per_s']:8.0f} tok/s  "
            f"MFU {r['mfu']:6.1%}  time / TT {r['time_ratio_to_tt']:.3f}"
        )


if __name__ == "__main__":
    main()

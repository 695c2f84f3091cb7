"""`pit bench`: training throughput, MFU and memory on this machine (pit/training/bench.py).

pit bench [--json] [--size default|tiny|gpu] [--rounds 3] [--repeats 1] [--layers 2] [--threads N]
          [--device cpu|cuda] [--precision fp32|bf16] [--peak-tflops X]
"""

from __future__ import annotations

import argparse
import json

from pit.core.linalg import cpu_threads
from pit.errors import PitError
from pit.training import bench


def run(args: argparse.Namespace) -> int:
    if args.threads is not None and args.threads < 1:
        raise PitError(f"--threads {args.threads}; expected an integer >= 1")
    with cpu_threads(args.threads):
        result = bench.run_bench(
            args.size, args.rounds, args.repeats, args.layers, args.device, args.precision, args.peak_tflops
        )
    print(json.dumps(result, indent=2) if args.json else bench.to_text(result))
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="training throughput, MFU and memory on this machine",
        description=bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (schema in docs/performance.md)")
    p.add_argument(
        "--size",
        default="default",
        help=f"shapes: one of {sorted(bench.SIZES)} (tiny: for tests; gpu: one GPU)",
    )
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; each arm keeps its best")
    p.add_argument("--repeats", type=int, default=1, help="timed calls per arm and round")
    p.add_argument("--layers", type=int, default=2, help="depth of the 133M-shaped model")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (torch's default if not given)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default=None,
        help="autocast dtype (default: bf16 on CUDA)",
    )
    p.add_argument(
        "--peak-tflops", type=float, default=None, help="dense BF16 peak of the GPU, if not in bench.BF16_PEAKS"
    )
    p.set_defaults(func=run)

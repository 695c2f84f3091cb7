"""`pit bench`: training throughput, MFU and memory on this machine (pit/training/bench.py).

pit bench [--json] [--size default|tiny|gpu] [--rounds 3] [--repeats 1] [--layers 2] [--threads N]
          [--device cpu|cuda] [--precision fp32|bf16] [--peak-tflops X] [--compile [BACKEND]] [--compile-mode M]
          [--batches 8,16,32] [--loss-chunk-rows N]
          [--sections train,reference,head_memory,generate] [--arms pit,pit_trainable_z,tt,untied] [--vocabs 50257]
"""

from __future__ import annotations

import argparse
import json
import logging

from pit.core.linalg import cpu_threads
from pit.errors import PitError
from pit.training import bench
from pit.training.args import COMPILE_MODES


def _ints(option: str, text: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",")) if text else ()
    except ValueError:
        raise PitError(f"{option} {text!r}; expected integers separated by commas, e.g. 8,16,32") from None


def run(args: argparse.Namespace) -> int:
    if args.threads is not None and args.threads < 1:
        raise PitError(f"--threads {args.threads}; expected an integer >= 1")
    # progress on stderr as each group ends (stdout holds the result): a run cut off by a time limit still says what
    # it measured
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    with cpu_threads(args.threads):
        result = bench.run_bench(
            args.size,
            args.rounds,
            args.repeats,
            args.layers,
            args.device,
            args.precision,
            args.peak_tflops,
            compile=args.compile,
            compile_mode=args.compile_mode,
            batches=_ints("--batches", args.batches),
            sections=tuple(args.sections.split(",")),
            arms=tuple(args.arms.split(",")),
            vocabs=_ints("--vocabs", args.vocabs),
            loss_chunk_rows=args.loss_chunk_rows,
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
    p.add_argument(
        "--compile",
        nargs="?",
        const="inductor",
        default=None,
        metavar="BACKEND",
        help="run each step's loss module under torch.compile (static shapes; backend: inductor unless named)",
    )
    p.add_argument(
        "--compile-mode",
        default="default",
        metavar="MODE",
        help=f"torch.compile's mode with --compile, one of {', '.join(COMPILE_MODES)} (the last two: CUDA graphs)",
    )
    p.add_argument("--batches", default=None, help="the 133M groups' batch sweep, e.g. 8,16,32 (default: the size's)")
    p.add_argument(
        "--loss-chunk-rows",
        type=int,
        default=None,
        metavar="N",
        help="rows of logits per chunk of the fused loss, as loss_chunk_rows in a spec (default: 1024 up to 16384 rows "
        "per step, past that 16 chunks)",
    )
    p.add_argument(
        "--sections",
        default=",".join(bench.SECTIONS),
        help=f"comma-separated subset of {','.join(bench.SECTIONS)} (the others are empty lists)",
    )
    p.add_argument(
        "--arms",
        default=",".join(bench.ARMS),
        help=f"comma-separated subset of {','.join(bench.ARMS)}: the training arms timed in `train`",
    )
    p.add_argument(
        "--vocabs", default=None, help="the `train` groups to time by vocabulary, e.g. 50257 (default: every group)"
    )
    p.set_defaults(func=run)

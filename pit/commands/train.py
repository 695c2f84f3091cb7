"""`pit train --spec JSON_OR_FILE --out DIR`: one pretraining run (pit/training/pretrain.py).

pit train --spec spec.json --out runs/demo --threads 2
torchrun --nproc_per_node=8 -m pit train --spec spec.json --out runs/demo   # DDP, same global batch
"""

from __future__ import annotations

import argparse
import logging

from pit.commands.common import add_run_arguments, run_spec
from pit.training import pretrain
from pit.training.args import PretrainArgs


def run_training(args: argparse.Namespace, args_class, train, summary_line) -> int:
    """`pit train` / `pit lora train`: the checked settings, the run, its summary line (or one line saying that
    --out already holds this run, finished). The host memory policy is set as `pit` starts (training/allocator.py)."""
    settings = args_class.from_dict(run_spec(args))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = train(settings, args.out, overwrite=args.overwrite)
    done = getattr(summary, "message", None)  # a FinishedRun (pit/training/run_folder.py): --out holds this run
    if done:
        print(done)
    elif summary:
        print(summary_line(summary))
    return 0


def run(args: argparse.Namespace) -> int:
    return run_training(args, PretrainArgs, pretrain.train, pretrain.summary_line)


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help="one pretraining run (resumes from the run folder's latest checkpoint)",
        description=f"{__doc__}\n{pretrain.__doc__}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_arguments(p, "the fields of pit.training.args.PretrainArgs")
    p.set_defaults(func=run)

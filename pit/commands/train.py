"""`pit train --spec JSON_OR_FILE --out DIR`: one pretraining run (pit/training/pretrain.py).

pit train --spec spec.json --out runs/demo --threads 2
torchrun --nproc_per_node=8 -m pit train --spec spec.json --out runs/demo   # DDP, same global batch
"""

from __future__ import annotations

import argparse

from pit.commands.common import add_run_arguments, run_training
from pit.training import pretrain
from pit.training.args import PretrainArgs


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

"""`pit train --config FILE --out DIR`: one pretraining run (pit/training/pretrain.py).

pit train --config train.yaml --out runs/demo --threads 2
pit train --config train.yaml --set lr=1e-3 --set interface.kind=tt --out runs/demo-tt
pit train --config train.yaml --set max_steps=5 --print-config > resolved.yaml   # the settings a run would use
pit train --config train.yaml --set mode=continue --set model=runs/demo/final --out runs/more   # train on, as it is
torchrun --nproc_per_node=8 -m pit train --spec spec.json --out runs/demo   # DDP, same global batch

The settings (every field of pit.training.args.PretrainArgs, listed below) come from a YAML or JSON file
(`--config`; `--spec` also takes a JSON object inline), then each `--set KEY=VALUE` in order, then `--threads`.
"""

from __future__ import annotations

import argparse
import logging

from pit.commands.common import check_outputs, spec_path
from pit.commands.run_settings import add_run_arguments, module_doc, print_config, run_settings
from pit.errors import PitError
from pit.training.args import PretrainArgs


def run_training(args: argparse.Namespace, settings, train, summary_line) -> int:
    """`pit train` / `pit lora train`: the run, its summary line (or one line saying that --out already holds this
    run, finished). The host memory policy is set as `pit` starts (training/allocator.py)."""
    if args.out is None:
        raise PitError("--out is required (the run folder); only --print-config runs without it")
    check_outputs([args.out], *settings.input_paths().values(), args.config, args.spec_file, spec_path(args.spec))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = train(settings, args.out, overwrite=args.overwrite)
    done = getattr(summary, "message", None)  # a FinishedRun (pit/training/run_folder.py): --out holds this run
    if done:
        print(done)
    elif summary:
        print(summary_line(summary))
    return 0


def run(args: argparse.Namespace) -> int:
    settings = run_settings(args, PretrainArgs)
    if args.print_config:
        return print_config(settings)
    from pit.training import pretrain  # torch and transformers: after the settings are checked

    return run_training(args, settings, pretrain.train, pretrain.summary_line)


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help="one pretraining run (resumes from the run folder's latest checkpoint)",
        description=f"{__doc__}\n{module_doc('pit.training.pretrain')}",
    )
    add_run_arguments(p, PretrainArgs)
    p.set_defaults(func=run)

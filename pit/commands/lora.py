"""`pit lora train|merge`: LoRA post-training (pit/training/lora.py).

pit lora train --config lora.yaml --out results/posttrain/scratch/303m/pit/mbpp
pit lora train --config lora.yaml --set rank=16 --print-config   # the settings a run would use
pit lora merge --base CKPT --adapter ADAPTER_DIR --out MERGED_DIR

`pit lora train` takes its settings (every field of pit.training.args.LoraArgs, listed by
`pit lora train --help`) as `pit train` does: --config FILE (or --spec), --set KEY=VALUE, --print-config.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pit.commands.common import check_outputs
from pit.commands.run_settings import add_run_arguments, module_doc, print_config, run_settings
from pit.commands.train import run_training
from pit.training.args import LoraArgs

log = logging.getLogger("pit.lora")


def run_train(args: argparse.Namespace) -> int:
    settings = run_settings(args, LoraArgs)  # bad settings are one error line, before the notice below
    if args.print_config:
        return print_config(settings)
    if settings.source == "offline":  # MBPP / GSM8K offline = the seeded stand-ins (pit/evaluation/standins.py)
        print(
            f"pit lora train: task {settings.task}: training on offline STAND-IN data (seeded records with the "
            "real data set's fields; source 'offline', the default, reads no hub data): not the paper's training set",
            file=sys.stderr,
        )
    from pit.training import lora  # torch, transformers, peft: after the settings are checked

    rc = run_training(args, settings, lora.train_lora, lora.summary_line)
    out = Path(args.out)
    if settings.frontier_lrs and (out / "summary.json").is_file() and not (out / "frontier.json").is_file():
        from pit.training.frontier import frontier  # a finished run's LoRA at more learning rates

        for p in frontier(settings, settings.frontier_lrs, settings.frontier_eval_limit, out / "frontier.json")[
            "points"
        ]:
            print(f"frontier lr {p['lr']:g}: gain {p['gain']:.4f} nats, KL {p['kl']:.4f}")
    return rc


def run_merge(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from pit.io import atomic_path
    from pit.models.checkpoint import write_model_card
    from pit.training import lora

    check_outputs([args.out], args.base, args.adapter)
    merged = lora.merge_adapter(args.base, args.adapter)
    with atomic_path(args.out) as tmp:
        merged.save_pretrained(tmp, safe_serialization=True)
        write_model_card(merged, tmp)
        try:
            AutoTokenizer.from_pretrained(args.base).save_pretrained(tmp)
        except (OSError, ValueError):
            log.warning("no tokenizer in %s; the merged model is saved without one", args.base)
    print(f"merged {args.adapter} into {args.base} -> {args.out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "lora",
        help="LoRA post-training of a pretrained checkpoint (peft); merge adapters",
        description=f"{__doc__}\n{module_doc('pit.training.lora')}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmds = p.add_subparsers(dest="lora_command", required=True)
    t = cmds.add_parser("train", help="one LoRA run (resumes from the run folder's latest checkpoint)")
    add_run_arguments(t, LoraArgs)
    t.set_defaults(func=run_train)
    m = cmds.add_parser("merge", help="merge a saved adapter into the base it was trained on")
    m.add_argument("--base", required=True, help="base checkpoint folder")
    m.add_argument("--adapter", required=True, help="adapter folder written by `pit lora train`")
    m.add_argument("--out", required=True, help="merged checkpoint folder to write")
    m.set_defaults(func=run_merge)

"""`pit convert-check TEACHER`: the initial loss and interface errors of each PIT teacher init
(pit/analysis/convert_check.py).

pit convert-check results/teachers/256m/final --val-data results/data/gpt2/val.bin
pit convert-check cerebras/Cerebras-GPT-256M --t-init head --t-init power --t-power 0.5 --t-power 1 \\
    --val-data results/data/gpt2/val.bin --windows 16 --seq-len 128 --out convert_check.json

A teacher folder that carries its tokenizer (tokenizer.json) must be the one the validation file was made with
(the sha256 its sidecar records), as `pit side-effects` and `pit diagnose` check: another tokenizer's ids are
refused before the teacher loads.
"""

from __future__ import annotations

import argparse

from pit.analysis import convert_check as cc
from pit.commands.common import check_outputs
from pit.core.interfaces import T_INITS
from pit.core.linalg import cpu_threads
from pit.data.reader import TokenFile
from pit.errors import PitError
from pit.io import write_json
from pit.models.any_model import load_teacher


def run(args: argparse.Namespace) -> int:
    if args.windows < 1 or args.seq_len < 2 or (args.threads is not None and args.threads < 1):
        raise PitError(
            f"--windows {args.windows}, --seq-len {args.seq_len}, --threads {args.threads}: expected >= 1, >= 2, >= 1"
        )
    check_outputs([args.out], args.teacher, args.val_data)
    configs = cc.init_configs(args.t_init, args.t_power)
    data = TokenFile(args.val_data)
    data.check_checkpoint(args.teacher)  # made with the tokenizer the teacher folder carries (as `pit side-effects`)
    with cpu_threads(args.threads):
        teacher = load_teacher(args.teacher)
        result = cc.convert_check(teacher, data, configs, args.windows, args.seq_len)
    result.update(teacher=str(args.teacher), val_data=str(args.val_data))
    if args.out:
        write_json(args.out, result)
    print(cc.markdown(result))
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "convert-check",
        help="initial loss and interface errors of each PIT teacher init (vs the teacher and TT)",
        description=f"{__doc__}\n{cc.__doc__}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("teacher", help="teacher of any supported family (pit convert --help): a local folder or a hub id")
    p.add_argument(
        "--t-init", action="append", choices=T_INITS, help="an init to check (repeatable; default: all of them)"
    )
    p.add_argument(
        "--t-power", action="append", type=float, help="exponent a of the power init, -1..1 (repeatable; default 1)"
    )
    p.add_argument(
        "--val-data", required=True, help="validation token file (.bin with its sidecar), teacher's tokenizer"
    )
    p.add_argument("--windows", type=int, default=16, help="first N non-overlapping windows (default 16)")
    p.add_argument("--seq-len", type=int, default=128, help="window length in tokens (default 128)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: unchanged)")
    p.add_argument("--out", help="also write the result as JSON here (atomically)")
    p.set_defaults(func=run)

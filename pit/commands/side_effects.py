"""`pit side-effects BEFORE AFTER`: what an update changed away from its task (pit/analysis/side_effects.py).

pit side-effects BEFORE AFTER --val-data data/val.bin [--windows 16] [--seq-len 128] --out side_effects.json
"""

from __future__ import annotations

import argparse
import json

from pit.analysis import side_effects as fx
from pit.commands.common import check_outputs
from pit.data.reader import TokenFile
from pit.errors import PitError
from pit.io import write_json
from pit.models.checkpoint import load_model


def run(args: argparse.Namespace) -> int:
    if args.windows < 1 or args.seq_len < 2:
        raise PitError(f"--windows {args.windows}, --seq-len {args.seq_len}: expected >= 1 and >= 2")
    check_outputs([args.out], args.before, args.after, args.val_data)
    data = TokenFile(args.val_data)
    for checkpoint in (args.before, args.after):
        data.check_checkpoint(checkpoint)
    result = fx.side_effects(load_model(args.before), load_model(args.after), data, args.seq_len, args.windows)
    result.update(before=str(args.before), after=str(args.after), val_data=str(args.val_data))
    if args.out:
        write_json(args.out, result)
    print(json.dumps(result, indent=2))
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "side-effects",
        help="KL, loss change and interface change between two checkpoints",
        description=f"{__doc__}\n{fx.__doc__}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("before", help="checkpoint folder before the update")
    p.add_argument("after", help="checkpoint folder after the update (e.g. a merged LoRA model)")
    p.add_argument("--val-data", required=True, help="held-out token file (.bin with its sidecar)")
    p.add_argument("--windows", type=int, default=16, help="number of held-out windows")
    p.add_argument("--seq-len", type=int, default=128, help="window length in tokens")
    p.add_argument("--out", help="write the JSON here (atomically)")
    p.set_defaults(func=run)

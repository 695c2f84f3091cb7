"""`pit diagnose CKPT`: interface diagnostics of a checkpoint (pit/analysis/diagnostics.py).

pit diagnose results/pretrain/teacher/1.3b/pit/final --val-data results/data/gpt2/val.bin --json
pit diagnose CKPT --val-data F --spec '{"positions": 512, "seq_len": 128, "bigram_tokens": 1000000, "seed": 0}'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pit.analysis.diagnostics import diagnose, summary
from pit.commands.common import add_spec_argument, check_outputs, merge_spec, read_spec, spec_path
from pit.errors import PitError
from pit.io import write_json
from pit.training.runtime import resolve_device

DEFAULTS = {"positions": 512, "seq_len": 128, "bigram_tokens": 1_000_000, "seed": 0, "device": "cpu"}


def run(args: argparse.Namespace) -> int:
    merge_spec(args, read_spec(args.spec), DEFAULTS)
    check_outputs([args.out], args.checkpoint, args.val_data, spec_path(args.spec))  # a --spec file is a source too
    if args.out is not None and Path(args.out).is_dir():  # before the work: atomic_path would refuse it at the end
        raise PitError(f"--out {args.out!r} is a folder; expected the JSON file to write (nothing was written)")
    if args.positions < 1 or args.bigram_tokens < 2:
        raise PitError(f"--positions {args.positions} and --bigram-tokens {args.bigram_tokens}: expected >= 1 and >= 2")
    if args.seq_len < 2 or args.seed < 0:
        raise PitError(f"--seq-len {args.seq_len} and --seed {args.seed}: expected >= 2 and >= 0")
    resolve_device(args.device)  # a device this machine has, before the checkpoint loads
    result = diagnose(
        args.checkpoint, args.val_data, args.positions, args.bigram_tokens, args.seed, args.seq_len, args.device
    )
    if args.out:
        write_json(args.out, result)
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else summary(result))
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "diagnose",
        help="interface diagnostics of a checkpoint (Delta_TI, anchor agreement, Figure 2)",
        description="Delta_TI, raw and polar anchor agreement (cosine distance, Procrustes error, "
        "largest principal angle), direct-path asymmetry and bigram fit, and layerwise "
        "semantic consistency with the logit lens's KL and cross-entropy in bits, of one checkpoint, all in float64 "
        "(docs/diagnostics.md).",
    )
    p.add_argument("checkpoint", help="checkpoint folder (save_pretrained)")
    p.add_argument(
        "--val-data",
        default=None,
        help="validation token file (e.g. results/data/gpt2/val.bin) for the bigram fit and layerwise consistency",
    )
    add_spec_argument(p, ", ".join(DEFAULTS))
    p.add_argument("--positions", type=int, help="held-out windows (one last-token position each; default 512)")
    p.add_argument("--seq-len", type=int, help="window length (capped at the model's context; default 128)")
    p.add_argument("--bigram-tokens", type=int, help="bigrams from the first N tokens (default 1000000)")
    p.add_argument("--seed", type=int, help="seed of the window draw (default 0)")
    p.add_argument("--device", help="device (default cpu)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", default=None, help="also write the JSON to this file (atomically)")
    p.set_defaults(func=run)

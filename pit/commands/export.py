"""`pit export SRC DST`: a plain untied `transformers` model with the same logits (pit/models/export.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pit.errors import PitError
from pit.io import check_output
from pit.models.export import export_checkpoint


def run(args: argparse.Namespace) -> int:
    check_output(args.dst, [args.src], "DST")  # with or without --force: the source is never replaced
    dst = Path(args.dst)
    if dst.is_dir() and any(dst.iterdir()) and not args.force:
        raise PitError(f"{args.dst!r} exists and is not empty; pass --force to replace it with the export")
    model, exported, check = export_checkpoint(args.src, args.dst, force=args.force)
    kind = f"{type(model).__name__} ({model.interface.kind}) -> {type(exported).__name__}"
    print(f"exported {kind} at {args.dst}; {check.words()}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a plain untied transformers model with the same logits",
        description="Write a plain untied transformers model (the source architecture of a converted causal LM, "
        "e.g. GPT2LMHeadModel or LlamaForCausalLM; CohereForCausalLM for the scratch family) whose logits equal SRC's: "
        "checked before writing on 16 tokens as a relative gap, max |difference| / max |logit|, against the float32 "
        "rounding bound at the model's size (pit/core/rounding.py); the tokenizer and chat template come along.",
    )
    p.add_argument("src", help="project checkpoint folder (save_pretrained)")
    p.add_argument("dst", help="output folder (a new one: an existing folder that is not empty needs --force)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace DST when it exists (its files are deleted; never SRC or a folder holding it)",
    )
    p.set_defaults(func=run)

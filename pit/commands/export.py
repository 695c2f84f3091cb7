"""`pit export SRC DST`: a plain untied `transformers` model with the same logits (pit/models/export.py)."""

from __future__ import annotations

import argparse

from pit.models.export import export_checkpoint


def run(args: argparse.Namespace) -> int:
    model, exported = export_checkpoint(args.src, args.dst)
    print(f"exported {type(model).__name__} ({model.interface.kind}) -> {type(exported).__name__} at {args.dst}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a plain untied transformers model with the same logits",
        description="Write a plain untied transformers model (GPT2LMHeadModel for the teacher "
        "family, CohereForCausalLM for the scratch family) whose logits equal SRC's.",
    )
    p.add_argument("src", help="project checkpoint folder (save_pretrained)")
    p.add_argument("dst", help="output folder")
    p.set_defaults(func=run)

"""`pit convert SRC OUT`: any supported `transformers` causal LM (a folder or a hub id; Llama, Qwen2/3, Gemma 1-3,
Mistral, GPT-NeoX, Phi-3, OLMo 1-2, GPT-2) with its input embedding and output head replaced by one PIT, TT or
untied token interface, the rest of its architecture as it is (pit/models/any_model.py, docs/any-model.md).

pit convert HuggingFaceTB/SmolLM2-135M smollm2-pit --t-init head
pit convert results/teachers/256m/final teacher-pit --t-init power --t-power 0.5 --trainable-z

OUT loads with `AutoModelForCausalLM.from_pretrained(OUT)` after `import pit.models`; `pit export OUT PLAIN` writes
the source architecture back, untied, with the same logits.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pit.core.interfaces import INTERFACE_KINDS, T_INITS, InterfaceConfig
from pit.errors import PitError
from pit.io import check_output
from pit.sources import check_source


def run(args: argparse.Namespace) -> int:
    check_output(args.out, [args.src], "OUT")  # with or without --force: the source (a folder) is never replaced
    out = Path(args.out)
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise PitError(f"{args.out!r} exists and is not empty; pass --force to replace it with the conversion")
    interface = InterfaceConfig(kind=args.kind, t_init=args.t_init, t_power=args.t_power, trainable_z=args.trainable_z)
    check_source(args.src, "teacher")  # a missing folder or an unreachable hub: one line, before transformers loads
    from pit.models.access import model_delta_ti
    from pit.models.export import convert_checkpoint

    source, model = convert_checkpoint(args.src, out, interface, force=args.force)
    print(
        f"converted {type(source).__name__} -> {type(model).__name__} ({interface.kind}, t_init {interface.t_init}) "
        f"at {args.out}; ||W_out E - I||_F = {model_delta_ti(model):.2e}"
    )
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "convert",
        help="convert any supported transformers causal LM to a PIT/TT/untied interface",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("src", help="source causal LM: a local folder or a hub id (never remote code)")
    p.add_argument("out", help="output folder (a new one: an existing folder that is not empty needs --force)")
    p.add_argument("--kind", choices=INTERFACE_KINDS, default="pit", help="token interface (default pit)")
    p.add_argument(
        "--t-init", choices=T_INITS, default="identity", help="PIT init of T from the source (default identity)"
    )
    p.add_argument("--t-power", type=float, default=1.0, help="exponent a of the power init, -1..1 (default 1)")
    p.add_argument("--trainable-z", action="store_true", help="PIT: train Z (polar retraction), not frozen")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace OUT when it exists (its files are deleted; never SRC or a folder holding it)",
    )
    p.set_defaults(func=run)

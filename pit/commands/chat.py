"""`pit chat CKPT`: an interactive loop over `pit generate`: one prompt per line read from stdin until EOF
(Ctrl-D), the completion printed after each. The model loads once; the sampling RNGs are seeded once, so a
piped session (`printf 'a\\nb\\n' | pit chat CKPT --seed 1`) prints the same text every time. An empty line
is skipped. The decoding flags are `pit generate`'s (pit/commands/generate.py)."""

from __future__ import annotations

import argparse
import sys

from pit.commands.generate import add_decoding_arguments, complete, load_for_decoding


def run(args: argparse.Namespace) -> int:
    from transformers import set_seed

    model, tokenizer = load_for_decoding(args)
    interactive = sys.stdin.isatty()
    if interactive:
        print(f"pit chat: {args.checkpoint}; one prompt per line, Ctrl-D to end", file=sys.stderr)
    set_seed(args.seed)
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            break
        prompt = line.rstrip("\n")
        if not prompt.strip():
            continue
        (completion,) = complete(model, tokenizer, [prompt], args, seed=False)
        print(completion, flush=True)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "chat",
        help="interactive generation: prompts from stdin (one per line) until EOF",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_decoding_arguments(p)
    p.set_defaults(func=run)

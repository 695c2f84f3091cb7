"""`pit chat CKPT`: an interactive loop over `pit generate`: one prompt per line read from stdin until EOF
(Ctrl-D). Each turn prints as litgpt's chat does:

    >> Prompt: def add(a, b):
    >> Reply:  return a + b

(at a terminal the `>> Prompt: ` marker is the input prompt, on stderr; from a pipe the prompt is echoed after it on
stdout, so the transcript reads the same). `--json` prints one JSON object per line instead,
{"prompt": ..., "completion": ...}, for scripts. The model loads once; the sampling RNGs are seeded once, so a piped
session (`printf 'a\\nb\\n' | pit chat CKPT --seed 1`) prints the same text every time. An empty line is skipped.
The decoding flags are `pit generate`'s (pit/commands/generate.py)."""

from __future__ import annotations

import argparse
import json
import sys

from pit.commands.generate import add_decoding_arguments, complete, load_for_decoding

PROMPT, REPLY = ">> Prompt: ", ">> Reply: "  # litgpt's markers


def show(prompt: str, completion: str, as_json: bool, echo: bool) -> None:
    """One turn on stdout: a JSON line, or the reply after its marker (and the prompt after its own when `echo`)."""
    if as_json:
        print(json.dumps({"prompt": prompt, "completion": completion}), flush=True)
        return
    print((f"{PROMPT}{prompt}\n" if echo else "") + f"{REPLY}{completion}", flush=True)


def run(args: argparse.Namespace) -> int:
    from transformers import set_seed

    model, tokenizer = load_for_decoding(args)
    interactive = sys.stdin.isatty()
    if interactive:
        print(f"pit chat: {args.checkpoint}; one prompt per line, Ctrl-D to end", file=sys.stderr)
    set_seed(args.seed)
    while True:
        if interactive and not args.json:
            print(PROMPT, end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            break
        prompt = line.rstrip("\n")
        if not prompt.strip():
            continue
        (completion,) = complete(model, tokenizer, [prompt], args, seed=False)
        show(prompt, completion, args.json, echo=not interactive)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "chat",
        help="interactive generation: prompts from stdin (one per line) until EOF",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_decoding_arguments(p)
    p.add_argument("--json", action="store_true", help='one JSON line per turn: {"prompt": ..., "completion": ...}')
    p.set_defaults(func=run)

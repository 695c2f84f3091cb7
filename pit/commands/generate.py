"""`pit generate CKPT --prompt TEXT`: continue prompts with any checkpoint (PIT, TT, untied, LoRA-merged, exported).

    pit generate results/pretrain/scratch/303m/pit/final --prompt "def add(a, b):" --max-new-tokens 32
    pit generate CKPT --prompt "x = " --prompt "y = " --temperature 0.8 --top-p 0.9 --seed 1 --json

Decoding is `transformers`' `generate` (pit.evaluation.generate): greedy by default (the same tokens as
`generate` on the `pit export` of the checkpoint), sampling with `--temperature > 0` (deterministic for a
given `--seed`). `pit chat` (pit/commands/chat.py) reads its prompts from stdin instead. `--out FILE` writes
{checkpoint, decoding, rows: [{prompt, completion}]} as JSON (atomically): the workflow's side-by-side generations.
"""

from __future__ import annotations

import argparse
import json
import math

from pit.errors import PitError

MAX_SEED = 2**32 - 1  # the largest seed transformers.set_seed takes (numpy's legacy seeding)

# flag -> (type, default, help); shared with `pit chat`
DECODING = {
    "max_new_tokens": (int, 64, "most new tokens per prompt (default 64)"),
    "temperature": (float, 0.0, "0 = greedy (default); > 0 samples"),
    "top_k": (int, None, "with --temperature > 0: sample from the K most likely tokens"),
    "top_p": (float, None, "with --temperature > 0: nucleus sampling with mass P, 0 < P <= 1"),
    "seed": (int, 0, f"seed of the sampling (Python, numpy and torch RNGs), 0 to {MAX_SEED} (default 0)"),
    "device": (str, "cpu", "device of the model, e.g. cuda (default cpu)"),
}


def add_decoding_arguments(p: argparse.ArgumentParser) -> None:
    """The checkpoint, its tokenizer and the DECODING flags (`pit generate`, `pit chat`)."""
    p.add_argument("checkpoint", help="checkpoint folder (save_pretrained, with its tokenizer)")
    p.add_argument("--tokenizer", help="tokenizer folder (default: the checkpoint folder)")
    for key, (kind, default, help_text) in DECODING.items():
        p.add_argument(f"--{key.replace('_', '-')}", type=kind, default=default, help=help_text)


def check_decoding(args: argparse.Namespace) -> None:
    """Each decoding setting finite and in range; one PitError naming the flag otherwise."""
    checks = [
        ("max_new_tokens", args.max_new_tokens >= 1, ">= 1"),
        ("temperature", math.isfinite(args.temperature) and args.temperature >= 0, "a finite number >= 0"),
        ("top_k", args.top_k is None or args.top_k >= 1, ">= 1"),
        ("top_p", args.top_p is None or 0 < args.top_p <= 1, "> 0 and <= 1"),
        ("seed", 0 <= args.seed <= MAX_SEED, f"an integer from 0 to {MAX_SEED}"),
    ]
    for key, ok, want in checks:
        if not ok:
            raise PitError(f"--{key.replace('_', '-')} {getattr(args, key)}: expected {want}")


def load_for_decoding(args: argparse.Namespace):
    """(model, tokenizer) of the checked arguments, on the chosen device; --max-new-tokens must fit the model's
    context (pit.evaluation.generate.check_max_new_tokens)."""
    from transformers.utils import logging as hf_logging

    from pit.evaluation.generate import check_max_new_tokens, load
    from pit.models.checkpoint import read_config
    from pit.training.runtime import resolve_device

    check_decoding(args)
    resolve_device(args.device)
    hf_logging.disable_progress_bar()  # stdout and stderr hold the text and the errors, no loading bars
    read_config(args.checkpoint)  # a missing or foreign folder is named before its tokenizer is looked for
    model, tokenizer = load(args.checkpoint, args.tokenizer, device=args.device)
    check_max_new_tokens(model, args.max_new_tokens)
    return model, tokenizer


def complete(model, tokenizer, prompts: list[str], args: argparse.Namespace, seed: bool = True) -> list[str]:
    """One completion per prompt; with `seed` the RNGs are seeded first (transformers.set_seed: Python, numpy,
    torch), so sampling repeats under the same --seed."""
    from transformers import set_seed

    from pit.evaluation.generate import generate

    if seed:
        set_seed(args.seed)
    return generate(
        model,
        tokenizer,
        prompts,
        max_new_tokens=args.max_new_tokens,
        batch_size=1,  # no padding: each prompt decodes exactly as it would alone
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        progress=False,
    )


def run(args: argparse.Namespace) -> int:
    from pit.commands.common import check_outputs
    from pit.io import write_json

    if any(not p for p in args.prompt):
        raise PitError("--prompt '': expected a non-empty prompt")
    check_outputs([args.out], args.checkpoint, args.tokenizer)
    model, tokenizer = load_for_decoding(args)
    completions = complete(model, tokenizer, args.prompt, args)
    rows = [{"prompt": p, "completion": c} for p, c in zip(args.prompt, completions)]
    if args.out:
        decoding = {key: getattr(args, key) for key in DECODING if key != "device"}
        write_json(args.out, {"checkpoint": str(args.checkpoint), "decoding": decoding, "rows": rows})
        print(f"{len(rows)} completions -> {args.out}")
    elif args.json:
        print(json.dumps(rows, indent=2))
    else:
        for prompt, completion in zip(args.prompt, completions):
            print(prompt + completion if args.echo else completion)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="continue prompts with a checkpoint (transformers generate; greedy or seeded sampling)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_decoding_arguments(p)
    p.add_argument("--prompt", action="append", required=True, help="prompt text (repeatable)")
    p.add_argument("--echo", action="store_true", help="print each prompt before its completion")
    p.add_argument("--json", action="store_true", help="print [{prompt, completion}] as JSON")
    p.add_argument("--out", help="write {checkpoint, decoding, rows: [{prompt, completion}]} to this JSON file")
    p.set_defaults(func=run)

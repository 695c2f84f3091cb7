"""What every command module shares: reading a `--spec` (a JSON object, or a file holding one) and letting
explicit flags override its keys."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from pit.errors import PitError


def read_spec(value: str | None, flag: str = "--spec") -> dict[str, Any]:
    """A JSON object given inline (`{...}`) or as the path of a JSON file; {} for None."""
    if value is None:
        return {}
    text = value
    if not value.lstrip().startswith("{"):
        path = Path(value)
        if not path.is_file():
            raise PitError(f"{flag} {value!r}: expected a JSON object or the path of a JSON file")
        text = path.read_text()
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as err:
        raise PitError(f"{flag} {value[:80]!r}: not valid JSON ({err}); expected a JSON object") from None
    if not isinstance(spec, dict):
        raise PitError(f"{flag} {value[:80]!r}: expected a JSON object, got {type(spec).__name__}")
    return spec


def merge_spec(args: argparse.Namespace, spec: dict[str, Any], defaults: dict[str, Any]) -> argparse.Namespace:
    """Fill `args` from `spec`, then from `defaults`: a flag given on the command line wins over the spec, the spec
    over the default. The flags named in `defaults` must be declared with `default=None`; a spec key that is not
    one of them is an error naming it."""
    unknown = sorted(set(spec) - set(defaults))
    if unknown:
        raise PitError(f"--spec has unknown keys {unknown}; expected a subset of {sorted(defaults)}")
    for key, default in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, spec.get(key, default))
    return args


def add_spec_argument(parser: argparse.ArgumentParser, keys: str) -> None:
    parser.add_argument(
        "--spec", default=None, help=f"settings as a JSON object or a JSON file (keys: {keys}); explicit flags win"
    )


def add_run_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """--spec / --spec-file, --out, --threads: the arguments of every training command."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--spec", help=f"the run settings ({what}) as a JSON object or the path of a JSON file")
    src.add_argument("--spec-file", help="the run settings as a JSON file (same as --spec FILE)")
    p.add_argument("--out", required=True, help="run folder")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (overrides the spec)")


def run_spec(args: argparse.Namespace) -> dict:
    spec = read_spec(args.spec_file or args.spec, "--spec-file" if args.spec_file else "--spec")
    if args.threads is not None:
        spec["threads"] = args.threads
    return spec


def run_training(args: argparse.Namespace, args_class, train, summary_line) -> int:
    """`pit train` / `pit lora train`: the memory policy, the checked settings, the run, its summary line."""
    from pit.training.allocator import retain_freed_memory

    retain_freed_memory()  # pit/training/allocator.py: no page faults from per-step tensors; PIT_MALLOC=system opts out
    settings = args_class.from_dict(run_spec(args))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = train(settings, args.out)
    if summary:
        print(summary_line(summary))
    return 0

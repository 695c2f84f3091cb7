"""The `pit` command line: the seam every pipeline step goes through.

Each subcommand lives in the module that implements it; the module exposes
`register(subparsers)` which adds its parser and sets `func` (a callable taking the parsed
arguments and returning an exit code). Add a subcommand by adding its module to COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from pit.errors import PitError

COMMANDS = [
    "pit.arch",
    "pit.checkpoint",
    "pit.data.cli",
    "pit.train",
    "pit.tracking",
    "pit.evaluation.cli",
    "pit.diagnostics",
    "pit.tables",
    "pit.figures",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pit", description="Pseudo-Inverse Tying: library and reproduction pipeline."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (PitError, FileNotFoundError) as err:
        # Bad input is one clear line; anything else is a bug and keeps its traceback.
        print(f"pit {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

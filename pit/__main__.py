"""`python -m pit ...` is the `pit` command (torchrun launches it this way: `torchrun -m pit train ...`).

Run by an interpreter without the project's dependencies (a system `python3` beside the checkout), it stops with
one line naming the missing module and the set-up, not an import traceback (`missing_dependency`).
"""

import sys

SETUP = "set up the project's environment with `bash scripts/setup.sh`, then run `.venv/bin/pit` (or `source "
SETUP += ".venv/bin/activate` first)"


def missing_dependency(err: ModuleNotFoundError) -> str | None:
    """The one line for a module that is not installed in this interpreter, None when the missing module is part of
    `pit` itself (a broken checkout: its traceback)."""
    name = err.name or ""
    if not name or name.split(".")[0] == "pit":
        return None
    return f"pit: error: this Python ({sys.executable}) has no module {name!r}, which pit needs; {SETUP}"


def run() -> int:
    """`pit.commands.entry`, with a missing dependency (at start, or when the chosen command imports it) as one line
    and exit code 2."""
    try:
        from pit.commands import entry

        return entry()
    except ModuleNotFoundError as err:
        line = missing_dependency(err)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run())

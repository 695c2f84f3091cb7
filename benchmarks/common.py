"""What every benchmark script does with its result."""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"  # git-ignored


def save_result(name: str, result: dict, print_json: bool) -> None:
    """Write `result` to benchmarks/out/<name>.json; with `print_json`, print it too (the scripts' --json)."""
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    if print_json:
        print(json.dumps(result, indent=2))

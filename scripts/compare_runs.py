"""Compare the outputs of two pipeline runs (two checkouts' results/ folders): every results/tables/*.csv and
every run's metrics.jsonl, byte for byte once the wall-clock fields are taken out.

    python3 scripts/compare_runs.py OLD_ROOT NEW_ROOT

Wall-clock fields differ between any two runs and are left out: `time_s` and `tokens_per_s` of metrics.jsonl
rows, the `runtime` (now `runtime_min`) column of table1. Everything else (losses, learning rates, gradient norms,
Delta_TI, every table cell) must be the same text. Exit status 1 when anything differs or is missing.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

WALL_CLOCK_KEYS = {"time_s", "tokens_per_s"}
WALL_CLOCK_COLUMNS = {"runtime", "runtime_min", "runtime_s"}


def metrics_text(path: Path) -> str:
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(json.dumps({k: v for k, v in json.loads(line).items() if k not in WALL_CLOCK_KEYS}))
    return "\n".join(rows)


def table_text(path: Path) -> str:
    lines = path.read_text().splitlines(keepends=True)
    body = [line for line in lines if not line.startswith("#")]
    out = io.StringIO()
    rows = list(csv.DictReader(body))
    keep = [c for c in (rows[0].keys() if rows else []) if c not in WALL_CLOCK_COLUMNS]
    writer = csv.DictWriter(out, keep, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return "".join(line for line in lines if line.startswith("#")) + out.getvalue()


def files(root: Path) -> dict[str, Path]:
    found = {str(p.relative_to(root)): p for p in (root / "results").rglob("metrics.jsonl")}
    found |= {str(p.relative_to(root)): p for p in (root / "results/tables").glob("*.csv")}
    return found


def main(old_root: str, new_root: str) -> int:
    old, new = files(Path(old_root)), files(Path(new_root))
    bad = [f"missing in {new_root}: {k}" for k in sorted(set(old) - set(new))]
    bad += [f"only in {new_root}: {k}" for k in sorted(set(new) - set(old))]
    for key in sorted(set(old) & set(new)):
        text = metrics_text if key.endswith(".jsonl") else table_text
        if text(old[key]) != text(new[key]):
            bad.append(f"differs: {key}")
    print("\n".join(bad) or f"identical: {len(old)} files (metrics.jsonl and tables/*.csv, wall-clock fields aside)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

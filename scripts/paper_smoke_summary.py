"""Each pretraining run of a paper smoke run (scripts/paper_smoke.sh) as one Markdown row: its shape, the
optimizer steps it ran, seconds per step and peak memory; the LoRA runs' seconds per step and peak memory; and the
wall time of every finished job by rule and slot, read from Snakemake's logs (.snakemake/log/, all of them, so a
resumed run counts each job once, when it finished).

    python scripts/paper_smoke_summary.py [runs/paper-smoke]
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ [\d:]{8} \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\w+):$")


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def shape(run: dict, final: Path) -> str:
    config = _json(final / "config.json")
    layers = config.get("num_hidden_layers") or config.get("n_layer")
    width = config.get("hidden_size") or config.get("n_embd")
    return f"{layers} x {width}, V {run['params']['vocab_size']}"


def pretrain_rows(root: Path) -> list[str]:
    rows = [
        "| mode | slot | arm | model | parameters | layers x d, V | optimizer | steps | s/step | peak memory (GB) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for summary_path in sorted(root.glob("results/pretrain/*/*/*/summary.json")):
        folder = summary_path.parent
        s, run = _json(summary_path), _json(folder / "run.json")
        mode, slot, arm = folder.relative_to(root / "results/pretrain").parts
        train = run["params"]["train"]
        rows.append(
            f"| {mode} | {slot} | {arm} | {train['model']} | {run['params']['parameters'] / 1e6:.0f}M "
            f"| {shape(run, folder / 'final')} | {train.get('optimizer', 'adamw')} | {s['steps']} "
            f"| {s['runtime_s'] / s['steps']:.0f} | {s['peak_memory_mb'] / 1024:.1f} |"
        )
    return rows


def lora_rows(root: Path) -> list[str]:
    rows = ["| run | steps | s/step | peak memory (GB) |", "|---|---|---|---|"]
    for summary_path in sorted(root.glob("results/posttrain/*/*/*/*/summary.json")):
        s = _json(summary_path)
        steps = s.get("steps") or 1
        peak = s.get("peak_memory_mb")
        name = "/".join(summary_path.parent.relative_to(root / "results/posttrain").parts)
        rows.append(
            f"| {name} | {steps} | {s.get('runtime_s', float('nan')) / steps:.0f} "
            f"| {'' if peak is None else f'{peak / 1024:.1f}'} |"
        )
    return rows


def job_seconds(log: Path) -> list[tuple[str, str, float]]:
    """(rule, slot, seconds) of each job a Snakemake log saw start and finish (jobs run one at a time or side by
    side: each has its own start stamp and jobid)."""
    started, done, now, current = {}, [], None, None
    for line in log.read_text().splitlines():
        if m := STAMP.match(line.strip()):
            now = datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
        elif m := RULE.match(line.strip()):
            current = {"rule": m.group(1), "slot": "", "start": now}
        elif current is not None and line.strip().startswith("jobid:"):
            started[line.split(":", 1)[1].strip()] = current
        elif current is not None and line.strip().startswith("wildcards:"):
            current["slot"] = dict(w.split("=", 1) for w in line.split(":", 1)[1].strip().split(", ")).get("slot", "")
        elif line.startswith("Finished jobid:"):
            job = started.get(line.split(":", 1)[1].split()[0])
            if job is not None and now is not None:
                done.append((job["rule"], job["slot"], (now - job["start"]).total_seconds()))
    return done


def job_rows(root: Path) -> list[str]:
    by = defaultdict(list)
    for log in sorted((root / ".snakemake" / "log").glob("*.snakemake.log")):
        for rule, slot, seconds in job_seconds(log):
            by[(rule, slot)].append(seconds)
    rows = ["| rule | slot | jobs | wall time per job (min-max) | total |", "|---|---|---|---|---|"]
    for (rule, slot), times in sorted(by.items()):
        rows.append(
            f"| {rule} | {slot} | {len(times)} | {min(times):.0f}-{max(times):.0f} s | {sum(times) / 60:.1f} min |"
        )
    total = sum(sum(t) for t in by.values())
    rows.append(f"| all | | {sum(len(t) for t in by.values())} | | {total / 60:.1f} min |")
    return rows


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/paper-smoke")
    print("\n".join(pretrain_rows(root)))
    print()
    print("\n".join(lora_rows(root)))
    print()
    print("\n".join(job_rows(root)))


if __name__ == "__main__":
    main()

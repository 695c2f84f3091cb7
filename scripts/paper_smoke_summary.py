"""Each pretraining run of a paper smoke run (scripts/paper_smoke.sh) as one Markdown row: its shape, the
optimizer steps it ran, seconds per step and peak memory; and the LoRA runs' seconds per step and peak memory.

    python scripts/paper_smoke_summary.py [runs/paper-smoke]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


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


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/paper-smoke")
    print("\n".join(pretrain_rows(root)))
    print()
    print("\n".join(lora_rows(root)))


if __name__ == "__main__":
    main()

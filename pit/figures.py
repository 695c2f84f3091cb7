"""`pit figure`: the paper's figures from run folders (PNG, matplotlib).

- `loss-curves --mode scratch` (Figure 3) / `--mode teacher` (Figure 4): training loss vs tokens,
  one panel per slot, one line per interface (PIT, TT, untied).
- `drift`: interface drift over training, Delta_TI and (when logged) the Table 2 raw metrics vs
  step for every run.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pit.errors import PitError  # noqa: E402
from pit.io import atomic_path  # noqa: E402
from pit.tables import METHOD_NAME, find_runs  # noqa: E402

COLORS = {"pit": "tab:blue", "tt": "tab:orange", "untied": "tab:green"}


def metrics_rows(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]


def runs_by_slot(root: Path, mode: str) -> dict[str, list[tuple[str, list[dict]]]]:
    slots: dict[str, list] = {}
    for m, slot, kind, _ in find_runs(root, "summary.json"):
        if m == mode:
            slots.setdefault(slot, []).append((kind, metrics_rows(root / m / slot / kind)))
    if not slots:
        raise PitError(f"no {mode}-mode runs under {str(root)!r}")
    return slots


def save(fig, out: Path) -> None:
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)


def loss_curves(root: Path, mode: str, out: Path, profile: str) -> None:
    """Figure 3 (scratch) / Figure 4 (teacher): training loss vs tokens seen."""
    slots = runs_by_slot(root, mode)
    fig, axes = plt.subplots(1, len(slots), figsize=(4.2 * len(slots), 3.4), squeeze=False)
    for ax, (slot, runs) in zip(axes[0], sorted(slots.items())):
        for kind, rows in runs:
            ok = [r for r in rows if math.isfinite(r["loss"])]
            ax.plot([r["tokens"] for r in ok], [r["loss"] for r in ok], label=METHOD_NAME.get(kind, kind),
                    color=COLORS.get(kind), lw=1.4)
        ax.set_title(f"{mode} {slot}")
        ax.set_xlabel("tokens seen")
        ax.set_ylabel("training loss")
        ax.grid(alpha=0.3)
        ax.legend()
    number = 3 if mode == "scratch" else 4
    fig.suptitle(f"Figure {number}: {mode}-mode loss curves (profile: {profile})")
    save(fig, out)


DRIFT_KEYS = (("delta_ti", "Delta_TI = ||W_out E - I||_F"), ("raw_cosine", "cosine distance (raw)"),
              ("raw_procrustes", "Procrustes error (raw)"), ("raw_angle", "principal angle (raw, rad)"))


def drift(root: Path, out: Path, profile: str) -> None:
    """Interface drift: Delta_TI and the raw Table 2 metrics vs step, every run (log scale)."""
    runs = [(m, s, k, metrics_rows(root / m / s / k)) for m, s, k, _ in find_runs(root, "summary.json")]
    keys = [(k, t) for k, t in DRIFT_KEYS if any(k in r for *_, rows in runs for r in rows)]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.6 * len(keys), 3.6), squeeze=False)
    styles = {"teacher": "-", "scratch": "--"}
    for ax, (key, title) in zip(axes[0], keys):
        for mode, slot, kind, rows in runs:
            pts = [(r["step"], max(r[key], 1e-12)) for r in rows if key in r and math.isfinite(r[key])]
            if pts:
                ax.plot(*zip(*pts), styles.get(mode, "-"), color=COLORS.get(kind), lw=1.0,
                        label=f"{mode} {slot} {METHOD_NAME.get(kind, kind)}")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=6, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(f"Interface drift over training (profile: {profile}); PIT sits at round-off")
    save(fig, out)


def cmd_figure(args: argparse.Namespace) -> int:
    root, out = Path(args.runs), Path(args.out)
    if args.name == "loss-curves":
        if args.mode is None:
            raise PitError("loss-curves needs --mode teacher or --mode scratch")
        loss_curves(root, args.mode, out, args.profile)
    else:
        drift(root, out, args.profile)
    print(f"{args.name}: {out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("figure", help="draw one of the paper's figures (PNG)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=["loss-curves", "drift"])
    p.add_argument("--runs", required=True, help="root of the pretraining run folders (results/pretrain)")
    p.add_argument("--mode", choices=["teacher", "scratch"])
    p.add_argument("--profile", required=True)
    p.add_argument("--out", required=True, help="PNG file to write")
    p.set_defaults(func=cmd_figure)

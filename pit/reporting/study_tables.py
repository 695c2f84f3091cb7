"""The study's supporting tables, from the per-seed table (pit.reporting.per_seed): `pit table stability|teacher_gap|
frontier --runs results` (docs/study.md).

- stability: per scratch slot of a learning-rate sweep (its lr) and arm, over seeds: loss spikes, non-finite
  (skipped) steps, diverged runs, the largest regression of the smoothed loss, the final validation loss.
- teacher_gap: per teacher-mode PIT arm (and untied) and validation step, the gap to TT (arm - TT, paired by seed)
  with its 95% interval: does it close as continued pretraining goes on?
- frontier: per post-trained cell, arm and LoRA learning rate, the mean in-domain gain and KL over seeds, and the
  KL at the cell's matched gain.
"""

from __future__ import annotations

import math

import pandas as pd

from pit.reporting.claims import Index, finite, paired
from pit.reporting.stats import t_interval
from pit.reporting.tables import MODE_ORDER, method_order, slot_key


def _get(index: Index, cell: tuple[str, str, str], metric: str, arm: str) -> dict:
    """seed -> value of one arm's metric in a (mode, slot, lora) cell."""
    return index.runs(*cell, metric).get(arm, {})


def _mean_ci(values: dict) -> tuple[float, float, int]:
    v = list(finite(values).values())
    mean, half = t_interval(v)
    return mean, half, len(v)


def stability(seeds: pd.DataFrame) -> pd.DataFrame:
    """One row per (sweep slot, arm) of scratch mode (module docstring)."""
    index, rows = Index(seeds), []
    for mode, slot in sorted(index.group, key=lambda k: (MODE_ORDER.get(k[0], 9), index.group[k], slot_key(k[1]))):
        if mode != "scratch":
            continue
        val = index.runs(mode, slot, "", "val_loss")
        for arm in sorted(val, key=method_order):
            mean, half, n = _mean_ci(val[arm])
            cell = (mode, slot, "")
            rows.append({
                "group": index.group[(mode, slot)], "slot": slot, "lr": _first(_get(index, cell, "lr", arm)),
                "arm": arm, "seeds": len(val[arm]), "spikes": _sum(_get(index, cell, "spikes", arm)),
                "nonfinite_steps": _sum(_get(index, cell, "nonfinite_steps", arm)),
                "diverged": _sum(_get(index, cell, "diverged", arm)),
                "max_rise": _mean_ci(_get(index, cell, "max_rise", arm))[0], "val_loss": mean, "val_loss_ci": half,
                "finite_val_runs": n,
            })  # fmt: skip
    df = pd.DataFrame(rows)
    return df.sort_values(["group", "lr", "arm"], key=_order, kind="stable") if len(df) else df


def _order(col: pd.Series) -> pd.Series:
    return col.map(method_order) if col.name == "arm" else col


def _first(values: dict) -> float:
    return next(iter(values.values()), math.nan)


def _sum(values: dict) -> float:
    return float(sum(values.values())) if values else math.nan


def teacher_gap(seeds: pd.DataFrame) -> pd.DataFrame:
    """Per teacher slot, arm (not TT) and validation step: arm - TT of the validation loss, paired by seed."""
    index, rows = Index(seeds), []
    for (mode, slot, lora, metric), runs in index.values.items():
        if mode != "teacher" or lora or not metric.startswith("val_loss@") or "tt" not in runs:
            continue
        step = int(metric.split("@", 1)[1])
        for arm in runs:
            if arm == "tt":
                continue
            diffs = paired(runs[arm], runs["tt"])
            mean, half = t_interval(diffs)
            rows.append({"slot": slot, "arm": arm, "step": step, "n": len(diffs),
                         "tt_val_loss": _mean_ci(runs["tt"])[0], "arm_val_loss": _mean_ci(runs[arm])[0], "gap": mean,
                         "gap_ci_low": mean - half, "gap_ci_high": mean + half})  # fmt: skip
    df = pd.DataFrame(rows)
    return df.sort_values(["slot", "arm", "step"], key=_order, kind="stable") if len(df) else df


def frontier(seeds: pd.DataFrame) -> pd.DataFrame:
    """Per post-trained cell, arm and LoRA learning rate: mean gain and KL over seeds; the matched-gain KL."""
    index, rows = Index(seeds), []
    for (mode, slot, lora, metric), runs in sorted(index.values.items()):
        if not lora or metric != "gain":
            continue
        cell = (mode, slot, lora)
        lrs = sorted(k[3].split("@", 1)[1] for k in index.values if k[:3] == cell and k[3].startswith("frontier_gain@"))
        for arm in sorted(runs, key=method_order):
            points = [(_first(_get(index, cell, "lora_lr", arm)), runs[arm], _get(index, cell, "lora_kl", arm))]
            points += [
                (float(lr), _get(index, cell, f"frontier_gain@{lr}", arm), _get(index, cell, f"frontier_kl@{lr}", arm))
                for lr in lrs
            ]
            matched = _first(_get(index, cell, "matched_gain", arm))
            kl_matched = _mean_ci(_get(index, cell, "kl_at_matched_gain", arm))[0]
            for lr, gain, kl in sorted(points, key=lambda p: (math.isnan(p[0]), p[0])):
                rows.append({"mode": mode, "slot": slot, "lora": lora, "arm": arm, "lora_lr": lr,
                             "seeds": len(finite(gain)), "gain": _mean_ci(gain)[0], "gain_ci": _mean_ci(gain)[1],
                             "kl": _mean_ci(kl)[0], "kl_ci": _mean_ci(kl)[1], "matched_gain": matched,
                             "kl_at_matched_gain": kl_matched})  # fmt: skip
    return pd.DataFrame(rows)


BUILDERS = {"stability": stability, "teacher_gap": teacher_gap, "frontier": frontier}

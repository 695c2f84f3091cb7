"""The study's supporting tables, from the per-seed table (pit.reporting.per_seed): `pit table stability|teacher_gap|
frontier --runs results` (docs/study.md).

- stability: per scratch slot of a learning-rate sweep (its lr) and arm, over seeds: diverged runs (k of n, with the
  exact Clopper-Pearson 95% interval of the rate), the median step of divergence, loss spikes over the runs where
  they are defined, non-finite (skipped) steps, the largest regression of the smoothed loss and the final validation
  loss of the finite runs; and per arm the first learning rate at which most of its runs diverged.
- teacher_gap: per teacher-mode arm, reference (TT, and for the primary arm the matched-start control) and validation
  step, the gap arm - reference (paired by seed) with its 95% interval: does it close as continued pretraining goes
  on? `tail_start` marks where the constant-rate tail begins.
- frontier: per post-trained cell, arm and LoRA learning rate, the mean in-domain gain and KL over seeds, and the
  KL at the cell's matched gain.
"""

from __future__ import annotations

import math

import pandas as pd

from pit.reporting.claims import Index, finite, is_pit_arm, paired
from pit.reporting.stats import t_interval
from pit.reporting.tables import MODE_ORDER, method_order, slot_key


def _get(index: Index, cell: tuple[str, str, str], metric: str, arm: str) -> dict:
    """seed -> value of one arm's metric in a (mode, slot, lora) cell."""
    return index.runs(*cell, metric).get(arm, {})


def _mean_ci(values: dict) -> tuple[float, float, int]:
    v = list(finite(values).values())
    mean, half = t_interval(v)
    return mean, half, len(v)


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 95% interval of a proportion k / n."""
    from scipy.stats import beta

    if n == 0:
        return math.nan, math.nan
    low = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
    return low, high


def stability(seeds: pd.DataFrame) -> pd.DataFrame:
    """One row per (sweep slot, arm) of scratch mode (module docstring)."""
    index, rows = Index(seeds), []
    for mode, slot in sorted(index.group, key=lambda k: (MODE_ORDER.get(k[0], 9), index.group[k], slot_key(k[1]))):
        if mode != "scratch":
            continue
        ran = index.runs(mode, slot, "", "diverged")
        for arm in sorted(ran, key=method_order):
            cell = (mode, slot, "")
            k, n = int(sum(finite(ran[arm]).values())), len(finite(ran[arm]))
            low, high = clopper_pearson(k, n)
            at = list(finite(_get(index, cell, "diverged_at", arm)).values())
            mean, half, finite_runs = _mean_ci(_get(index, cell, "val_loss", arm))
            spikes = finite(_get(index, cell, "spikes", arm))
            rows.append({
                "group": index.group[(mode, slot)], "slot": slot, "lr": _first(_get(index, cell, "lr", arm)),
                "arm": arm, "seeds": n, "diverged": k, "diverged_rate": k / n if n else math.nan,
                "diverged_ci_low": low, "diverged_ci_high": high,
                "diverged_at_median": float(pd.Series(at).median()) if at else math.nan,
                "spikes": _sum(spikes), "spike_runs": len(spikes),
                "nonfinite_steps": _sum(_get(index, cell, "nonfinite_steps", arm)),
                "max_rise": _mean_ci(_get(index, cell, "max_rise", arm))[0], "val_loss": mean, "val_loss_ci": half,
                "finite_val_runs": finite_runs,
            })  # fmt: skip
    df = pd.DataFrame(rows)
    if not len(df):
        return df
    df = df.sort_values(["group", "lr", "arm"], key=_order, kind="stable")
    first = {(g, a): part.loc[part["diverged_rate"] > 0.5, "lr"].min() for (g, a), part in df.groupby(["group", "arm"])}
    df["first_lr_most_diverged"] = [first[(g, a)] for g, a in zip(df["group"], df["arm"])]
    return df


def _order(col: pd.Series) -> pd.Series:
    return col.map(method_order) if col.name == "arm" else col


def _first(values: dict) -> float:
    return next(iter(values.values()), math.nan)


def _sum(values: dict) -> float:
    return float(sum(values.values())) if values else math.nan


def teacher_gap(seeds: pd.DataFrame) -> pd.DataFrame:
    """Per teacher slot, arm, reference and validation step: arm - reference of the validation loss, paired by seed.
    References: TT for every arm; the matched-start control (`tt-matched`, or any TT arm initialised at the polar
    factor) for the PIT arms where it ran. `ref_val_loss` and `arm_val_loss` are means over the same paired seeds as
    the gap (an arm run on fewer seeds than its reference is compared on its own seeds), so gap = arm - ref."""
    index, rows = Index(seeds), []
    for (mode, slot, lora, metric), runs in index.values.items():
        if mode != "teacher" or lora or not metric.startswith("val_loss@") or "tt" not in runs:
            continue
        step = int(metric.split("@", 1)[1])
        tail = _first(finite(_get(index, (mode, slot, ""), "tail_start", "tt")))
        refs = ["tt"] + [a for a in runs if a.startswith("tt-matched")]
        for ref in refs:
            for arm in runs:
                if arm == ref or arm == "tt" or (ref != "tt" and not is_pit_arm(arm)):
                    continue
                diffs = paired(runs[arm], runs[ref])
                mean, half = t_interval(diffs)
                both = set(finite(runs[arm])) & set(finite(runs[ref]))
                ref_loss, arm_loss = ({k: v for k, v in runs[a].items() if k in both} for a in (ref, arm))
                rows.append({"slot": slot, "arm": arm, "ref": ref, "step": step, "n": len(diffs),
                             "ref_val_loss": _mean_ci(ref_loss)[0], "arm_val_loss": _mean_ci(arm_loss)[0],
                             "gap": mean, "gap_ci_low": mean - half, "gap_ci_high": mean + half,
                             "tail_start": tail})  # fmt: skip
    df = pd.DataFrame(rows)
    return df.sort_values(["slot", "ref", "arm", "step"], key=_order, kind="stable") if len(df) else df


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


def context_free_markdown(seeds: pd.DataFrame) -> str:
    """Per main slot (not a sweep rate) and arm, the mean over seeds of the validation loss, the unigram entropy of
    the validation split and the context-free bound `span_entropy` (the best unigram fit within the span of the run's
    output matrix: the loss a model must beat to have learned more than its interface expresses without context;
    docs/diagnostics.md), as a Markdown table (docs/study.md's `bounds` block)."""
    rows = seeds[(seeds["lora"].fillna("") == "") & (seeds["slot"] == seeds["group"])]
    keys = ["val_loss", "unigram_entropy", "span_entropy"]
    means = rows[rows["metric"].isin(keys)].pivot_table(
        index=["mode", "slot", "arm"], columns="metric", values="value", aggfunc="mean"
    )
    lines = ["| mode | slot | arm | val loss | unigram entropy | context-free bound | loss below the bound |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    order = sorted(means.index, key=lambda k: (MODE_ORDER[k[0]], slot_key(k[1]), method_order(k[2])))
    for mode, slot, arm in order:
        r = means.loc[(mode, slot, arm)].reindex(keys)
        below = r["span_entropy"] - r["val_loss"]
        lines.append(f"| {mode} | {slot} | {arm} | {r['val_loss']:.3f} | {r['unigram_entropy']:.3f} | "
                     f"{r['span_entropy']:.3f} | {below:.3f} |")  # fmt: skip
    return "\n".join(lines) + "\n"

#!/usr/bin/env python3
"""Recompute a claims table from its per-seed table, independently of `pit` (numpy, scipy and the csv module only).

    python scripts/check_claims.py results/tables/claims.csv            # reads claims_seeds.csv beside it
    python scripts/check_claims.py docs/results/study/tables/claims.csv

For every row of claims.csv it recomputes, from claims_seeds.csv alone, the seeds n, both arms' means, the paired
difference arm - TT with its 95% Student-t interval and t-test p, the Holm-Bonferroni adjusted p over every tested
row, the untied control and the verdict, by the rules written in docs/study.md ("The claims table"); it prints
every mismatch and exits 1 if there is one. The rules are written again here on purpose, from the documentation,
not imported from pit.reporting.claims: a second implementation that agrees row for row.
"""

from __future__ import annotations

import csv
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

ALPHA, NEAR_UNIFORM = 0.05, 0.1
# claim id -> (metric key in the per-seed table, paper's sign of PIT - TT, evidence, untied-control rule, premise);
# the stability claims whose outcome is not learning (divergence, lr sensitivity) skip the degenerate rule
NO_DEGENERATE = {"stability_divergence", "stability_lr_sensitivity"}
CLAIMS = {
    "interface_max_delta_ti": ("max_delta_ti", -1, "construction", False, False),
    "interface_raw_cosine": ("raw_cosine", -1, "construction", False, False),
    "interface_polar_cosine": ("polar_cosine", -1, "construction_both", False, False),
    "teacher_early_rise": ("early_rise_excess", -1, "test", False, True),
    "teacher_val_loss": ("val_loss", -1, "test", False, False),
    "scratch_val_loss": ("val_loss", 1, "test", False, False),
    "stability_divergence": ("diverged", -1, "test", False, False),
    "stability_spikes": ("spikes", -1, "test", False, False),
    "stability_lr_sensitivity": ("lr_sensitivity", -1, "test", False, False),
    "lens_kl_ratio": ("lens_kl_ratio", -1, "test", True, False),
    "lens_ce_gap": ("lens_ce_gap", -1, "test", True, False),
    "side_effect_kl_per_gain": ("kl_per_gain", -1, "test", True, False),
    "side_effect_val_per_gain": ("val_change_per_gain", -1, "test", True, False),
    "side_effect_kl_matched": ("kl_at_matched_gain", -1, "test", True, False),
    "teacher_posttrain_gain": ("indomain_nll_change", -1, "test", False, False),
    "teacher_transfer_nll": ("transfer_nll_change", -1, "test", False, False),
    "teacher_posttrain_score": ("indomain_score", 1, "test", False, False),
    "teacher_transfer_score": ("transfer_score", 1, "test", False, False),
    "scratch_posttrain_gain": ("indomain_nll_change", 1, "test", False, False),
    "scratch_transfer_nll": ("transfer_nll_change", 1, "test", False, False),
    "scratch_posttrain_score": ("indomain_score", -1, "test", False, False),
    "scratch_transfer_score": ("transfer_score", -1, "test", False, False),
}
NUMBERS = ("n", "arm_mean", "tt_mean", "diff", "diff_ci_low", "diff_ci_high", "p", "p_holm", "untied_diff", "untied_p")


def num(text: str) -> float:
    return float(text) if text not in ("", None) else math.nan


def load_seeds(path: Path) -> dict:
    """values[(mode, slot, lora, metric)][arm][seed] = value, finite values only."""
    values: dict = defaultdict(lambda: defaultdict(dict))
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            v = num(r["value"])
            if math.isfinite(v):
                values[(r["mode"], r["slot"], r["lora"], r["metric"])][r["arm"]][int(r["seed"])] = v
    return values


def diffs(a: dict, b: dict) -> list[float]:
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


def test(d: list[float]) -> dict:
    n = len(d)
    if n == 0:
        return {"n": 0, "diff": math.nan, "low": math.nan, "high": math.nan, "p": math.nan}
    x = np.array(d)
    mean = float(x.mean())
    if n == 1:
        return {"n": 1, "diff": mean, "low": math.nan, "high": math.nan, "p": math.nan}
    sd = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    if sd == 0 or sd < 1e-12 * abs(mean):  # t undefined: the exact sign-flip p, 2 / 2^n (1 when all are 0)
        p = 1.0 if mean == 0 else min(1.0, 2.0 / 2**n)
    else:
        p = float(stats.ttest_1samp(x, 0.0).pvalue)
    return {"n": n, "diff": mean, "low": mean - half, "high": mean + half, "p": p}


def mean_of(values: dict, mode: str, slot: str, metric: str, arm: str) -> float:
    v = list(values.get((mode, slot, "", metric), {}).get(arm, {}).values())
    return float(np.mean(v)) if v else math.nan


def degenerate(values, key, mode, slot, arms) -> bool:
    for arm in arms:
        val, ent = mean_of(values, mode, slot, "val_loss", arm), mean_of(values, mode, slot, "unigram_entropy", arm)
        logv, first = mean_of(values, mode, slot, "log_vocab", arm), mean_of(values, mode, slot, "first_loss", arm)
        if (
            (val >= ent)
            or (val >= logv - NEAR_UNIFORM)
            or (key == "early_rise_excess" and first >= logv - NEAR_UNIFORM)
        ):
            return True
    return False


def untested_kind(row, runs, spec) -> str | None:
    key, _, evidence, _, premise = spec
    arm = row["arm"]
    if evidence == "construction_both":
        return "not testable"
    if not runs.get(arm):
        return "not measured"
    if evidence == "construction":
        return "holds by construction"
    if not runs.get("tt"):
        return "not measured"
    d = diffs(runs[arm], runs["tt"])
    if not d:
        return "not testable"
    if len(set(runs[arm].values()) | set(runs["tt"].values())) == 1:
        return "not testable"
    if len(d) == 1:
        return "n = 1"
    if premise and all(v <= 0 for v in runs["tt"].values()):
        return "not testable"
    return None


def holm(ps: list[float]) -> list[float]:
    order = sorted((p, i) for i, p in enumerate(ps) if not math.isnan(p))
    out, running, m = [math.nan] * len(ps), 0.0, len(order)
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def recompute(rows: list[dict], values: dict) -> list[dict]:
    out = []
    for row in rows:
        spec = CLAIMS[row["claim"]]
        runs = values.get((row["mode"], row["slot"], row["lora"], spec[0]), {})
        t = test(diffs(runs.get(row["arm"], {}), runs.get("tt", {})))
        u = test(diffs(runs.get("untied", {}), runs.get("tt", {})))
        kind = untested_kind(row, runs, spec)
        if (
            kind is None
            and row["claim"] not in NO_DEGENERATE
            and degenerate(values, spec[0], row["mode"], row["slot"], [row["arm"], "tt"])
        ):
            kind = "degenerate*"
        arm_v, tt_v = list(runs.get(row["arm"], {}).values()), list(runs.get("tt", {}).values())
        out.append({"n": t["n"], "arm_mean": np.mean(arm_v) if arm_v else math.nan,
                    "tt_mean": np.mean(tt_v) if tt_v else math.nan, "diff": t["diff"], "diff_ci_low": t["low"],
                    "diff_ci_high": t["high"], "p": t["p"] if kind in (None, "degenerate*") else math.nan,
                    "untied_diff": u["diff"], "untied_p": u["p"], "kind": kind, "spec": spec})  # fmt: skip
    for r, p in zip(out, holm([r["p"] for r in out])):
        r["p_holm"] = p
        if r["kind"] == "degenerate*":
            r["kind"] = "degenerate"
        elif r["kind"] is None:
            _, direction, _, control, _ = r["spec"]
            if p > ALPHA:
                r["kind"] = "inconclusive"
            elif (r["diff"] > 0) != (direction > 0):
                r["kind"] = "contradicted"
            elif control and r["untied_p"] <= ALPHA and (r["untied_diff"] > 0) == (r["diff"] > 0):
                r["kind"] = "not specific to PIT"
            else:
                r["kind"] = "supported"
    return out


def close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def main(claims_csv: str) -> int:
    claims_csv = Path(claims_csv)
    seeds_csv = claims_csv.with_name(claims_csv.stem + "_seeds.csv")
    with open(claims_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    ours = recompute(rows, load_seeds(seeds_csv))
    bad = 0
    for i, (row, mine) in enumerate(zip(rows, ours)):
        where = f"row {i + 2} ({row['claim']}, {row['mode']} {row['slot']} {row['lora']} {row['arm']})"
        for col in NUMBERS:
            if not close(num(row[col]), float(mine[col])):
                print(f"{where}: {col} = {row[col]} in the table, {mine[col]!r} recomputed")
                bad += 1
        if not row["verdict"].startswith(mine["kind"]):
            print(f"{where}: verdict {row['verdict']!r} in the table, {mine['kind']!r} recomputed")
            bad += 1
    print(f"{len(rows)} rows checked against {seeds_csv}: {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results/tables/claims.csv"))

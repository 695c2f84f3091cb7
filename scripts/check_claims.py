#!/usr/bin/env python3
"""Recompute a claims table from its per-seed table, independently of `pit` (numpy, scipy and the csv module only).

    python scripts/check_claims.py results/tables/claims.csv            # reads claims_seeds.csv beside it
    python scripts/check_claims.py docs/results/study/tables/claims.csv
    python scripts/check_claims.py docs/results/real/tables/claims.csv --primary-arm pit-head   # its declared design

A second implementation of the rules of docs/study.md, "The claims table", written from that page and not imported
from pit.reporting.claims. The rows to check are those of claims.csv (claim, role, kind, mode, slot, lora, arm, ref);
for each, from claims_seeds.csv alone, it recomputes the per-seed values of the row's kind (paired, the pooled LoRA
cell, a sweep group's count / sum / range, the slope of the gap over the constant-rate tail, Fisher's per-rate
divergence counts), n and the dropped seeds, both arms' means, the exact sign-flip p (every sign pattern enumerated)
and its exact interval (the test inverted numerically) at alpha and at alpha / family, Holm over the claim's rows of
one role, the minimal detectable effect, the untied control, the verdict (in the documented order, the degenerate
rule and the resolution rule included; a degenerate row outside the Holm family; the spike rows from runs that did not
diverge), leave-one-seed-out fragility and the two-seed drops. It also checks the declared design: every
primary row compares the paper's configuration (`pit`) with TT (`tt` or a TT arm `tt-*`), and every row's mode, kind
and cell are ones its claim has. Numbers are compared with a relative tolerance of 1e-9 (NaN equals NaN, inf equals
inf; values in the metric's units also pass within 1e-12 of the largest input of the row, so that a difference that
is 0 in exact arithmetic, e.g. the slope of a flat curve, may be rounding noise of its operands); a verdict by its
kind (the text before its reason); `fragile` by no / yes and the seed named, `two_drops` by no / yes and the pair.
It prints every mismatching cell and exits 1 if there is one (2 if the files are not a claims table and its
per-seed table).

The design's alpha and power are not columns of the table: the documented values (0.05, 0.8) are used.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy import stats

ALPHA, POWER = 0.05, 0.8  # docs/study.md, "The design, declared before the run"
NEAR_UNIFORM = 0.1  # nats: a loss within this of ln V is a model that predicts (almost) nothing
CONTROL_MIN_POLAR = 0.5  # the untied control is valid where its polar cosine distance is at least this
PAPER_SCORE_EFFECT = 1.3  # points: the largest PIT - TT score difference of the paper's Table 4
TIE = 1e-12  # a subset mean within this (relative) of 0 counts as 0
RTOL, ROUNDING = 1e-9, 1e-12  # the comparison: relative, and relative to the row's inputs
POOLED = "mean"
DECIDED = ("supported", "contradicted", "not specific to PIT")
KINDS = ("holds by construction", "not testable", "not measured", "n = 1", "degenerate", "supported", "contradicted",
         "not specific to PIT", "inconclusive")  # fmt: skip
NUMBERS = ("n", "dropped", "arm_mean", "ref_mean", "diff", "diff_ci_low", "diff_ci_high", "p", "family", "p_holm",
           "adj_ci_low", "adj_ci_high", "mde", "untied_n", "untied_diff", "untied_p", "arm_untied_diff",
           "arm_untied_p", "matched_n", "matched_diff", "matched_p", "arm_matched_diff",
           "arm_matched_p")  # fmt: skip
FLAGS = ("untied_decides", "matched_decides")  # booleans: does the control have every seed of the row
# the columns in the metric's units, compared with the rounding floor as well
IN_UNITS = {"arm_mean", "ref_mean", "diff", "diff_ci_low", "diff_ci_high", "adj_ci_low", "adj_ci_high", "mde",
            "untied_diff", "arm_untied_diff", "matched_diff", "arm_matched_diff"}  # fmt: skip
UNSETTLED = "not settled at this budget"


class Design(NamedTuple):
    """The declared design: the primary arm and the teacher-mode matched-start control ('' for none)."""

    primary: str = "pit"
    matched: str = ""


class Claim(NamedTuple):
    """The static properties of a claim (pit.reporting.claims.CLAIMS); direction: the paper's sign of arm - ref."""

    key: str
    modes: tuple
    direction: int
    evidence: str = "test"
    control: bool = False
    scope: str = "main"
    degenerate_rule: bool = True
    role: str = "primary"
    pool: bool = False
    resolution: bool = False
    binary: bool = False
    measure: str = ""
    premise: bool = False


_T, _S, _B = ("teacher",), ("scratch",), ("teacher", "scratch")
_SWEEP = {"scope": "sweep", "degenerate_rule": False}
CLAIMS = {
    "interface_max_delta_ti": Claim("max_delta_ti", _B, -1, "construction"),
    "interface_raw_cosine": Claim("raw_cosine", _B, -1, "construction"),
    "interface_polar_cosine": Claim("polar_cosine", _B, -1, "construction_both"),
    "teacher_early_rise": Claim("early_rise_excess", _T, -1, premise=True),
    "teacher_val_loss": Claim("val_loss", _T, -1, degenerate_rule=False),
    "scratch_val_loss": Claim("val_loss", _S, 1, degenerate_rule=False),
    "stability_divergence": Claim("diverged", _S, -1, **_SWEEP, binary=True, measure="count"),
    "stability_spikes": Claim("spikes", _S, -1, **_SWEEP, measure="sum"),
    "stability_lr_sensitivity": Claim("val_loss", _S, -1, scope="group", degenerate_rule=False, measure="range"),
    "lens_kl_ratio": Claim("lens_kl_ratio", _B, -1, control=True),
    "lens_ce_gap": Claim("lens_ce_gap", _B, -1, control=True, role="secondary"),
    "side_effect_kl_matched": Claim("kl_at_matched_gain", _B, -1, control=True, pool=True),
    "side_effect_kl_per_gain": Claim("kl_per_gain", _B, -1, control=True, role="secondary"),
    "side_effect_val_per_gain": Claim("val_change_per_gain", _B, -1, control=True, role="secondary"),
    "teacher_posttrain_gain": Claim("indomain_nll_change", _T, -1),
    "teacher_transfer_nll": Claim("transfer_nll_change", _T, -1),
    "teacher_posttrain_score": Claim("indomain_score", _T, 1, resolution=True),
    "teacher_transfer_score": Claim("transfer_score", _T, 1, resolution=True),
    "scratch_posttrain_gain": Claim("indomain_nll_change", _S, 1),
    "scratch_transfer_nll": Claim("transfer_nll_change", _S, 1),
    "scratch_posttrain_score": Claim("indomain_score", _S, -1, resolution=True),
    "scratch_transfer_score": Claim("transfer_score", _S, -1, resolution=True),
}


# ---- the per-seed table ----------------------------------------------------------------------------------------------
def num(text: str | None) -> float:
    return float(text) if text not in ("", None) else math.nan


class Seeds:
    """claims_seeds.csv as cells[(mode, slot, lora, metric)][arm][seed] = value (NaN kept: a run that has the
    metric but no number) and the slot -> sweep group map."""

    def __init__(self, records: list[tuple], groups: dict):
        self.records, self.groups = records, groups
        self.cells: dict = defaultdict(lambda: defaultdict(dict))
        for mode, slot, lora, arm, seed, metric, value in records:
            self.cells[(mode, slot, lora, metric)][arm][seed] = value
        self.seeds = sorted({r[4] for r in records})
        self.left_out: dict[int, Seeds] = {}

    @staticmethod
    def parse(rows: list[dict]) -> tuple[list[tuple], dict]:
        """The csv rows as (mode, slot, lora, arm, seed, metric, value) records and the slot -> group map."""
        records = [(r["mode"], r["slot"], r["lora"], r["arm"], int(float(r["seed"])), r["metric"], num(r["value"]))
                   for r in rows]  # fmt: skip
        return records, {(r["mode"], r["slot"]): r["group"] for r in rows}

    def without(self, seed: int) -> Seeds:
        """The table without one seed's rows (every run of that seed, every arm and metric)."""
        if seed not in self.left_out:
            self.left_out[seed] = Seeds([r for r in self.records if r[4] != seed], self.groups)
        return self.left_out[seed]

    def get(self, mode: str, slot: str, lora: str, metric: str, arm: str) -> dict:
        return self.cells.get((mode, slot, lora, metric), {}).get(arm, {})

    def tasks(self, mode: str, slot: str, metric: str) -> list[str]:
        return sorted({k[2] for k in self.cells if k[:2] == (mode, slot) and k[3] == metric and k[2]})

    def group_slots(self, mode: str, group: str) -> list[str]:
        return sorted(s for (m, s), g in self.groups.items() if m == mode and g == group)

    def curves(self, mode: str, slot: str, arm: str) -> dict[int, dict[float, float]]:
        """seed -> {step: validation loss} from the val_loss@<step> metrics."""
        out: dict = defaultdict(dict)
        for (m, s, lora, metric), by_arm in self.cells.items():
            if (m, s, lora) == (mode, slot, "") and metric.startswith("val_loss@"):
                for seed, v in by_arm.get(arm, {}).items():
                    out[seed][float(metric.split("@", 1)[1])] = v
        return out


def finite(values: dict) -> list[float]:
    return [v for v in values.values() if math.isfinite(v)]


def mean(values) -> float:
    values = list(values)
    return float(np.mean(values)) if values else math.nan


# ---- statistics ------------------------------------------------------------------------------------------------------
@cache
def sign_patterns(n: int) -> np.ndarray:
    """Every one of the 2^n sign patterns s in {+1, -1}^n, one per row."""
    return np.array(list(itertools.product((1.0, -1.0), repeat=n))).reshape(2**n, n)


def sign_flip_p(d: np.ndarray) -> np.ndarray:
    """The exact two-sided sign-flip p of the mean of each column of d (n x C), every sign pattern enumerated:
    p_upper = #{s: sum s_i d_i >= sum d_i} / 2^n, p_lower the same with <=, p = min(1, 2 min(p_upper, p_lower)).
    sum d - sum s_i d_i = 2 |F| mean_F(d), F the seeds s flips: s is on the upper side when the mean of its flipped
    seeds is <= 0, and a subset mean within TIE x max |d_i| of 0 counts as 0 (on both sides)."""
    s = sign_patterns(d.shape[0])
    sums = np.einsum("pi,ic->pc", s, d)  # einsum, not BLAS: small products, no thread start-up on a busy machine
    gap = sums[0] - sums  # pattern 0 flips nothing: gap 0 exactly
    tol = 2 * (s < 0).sum(axis=1)[:, None] * TIE * np.abs(d).max(axis=0)
    upper, lower = (gap <= tol).mean(axis=0), (gap >= -tol).mean(axis=0)
    return np.minimum(1.0, 2 * np.minimum(upper, lower))


def exact_p(d: list[float]) -> float:
    return float(sign_flip_p(np.asarray(d, dtype=float)[:, None])[0]) if d else math.nan


def exact_intervals(d: list[float], levels: list[float]) -> list[tuple[float, float]]:
    """Per level, the closure of {delta: p(d - delta) > level}: the test evaluated at every subset mean of d (where p
    can change), between consecutive ones and beyond both ends; (-inf, inf) where no delta is rejected (n = 1)."""
    if not d or not any(math.isfinite(level) for level in levels):
        return [(math.nan, math.nan)] * len(levels)
    x = np.asarray(d, dtype=float)
    s = sign_patterns(len(x))
    flipped = (s < 0).sum(axis=1)
    means = np.unique(((s < 0) @ x)[flipped > 0] / flipped[flipped > 0])
    pad = 1.0 + np.abs(means).max()
    points = np.sort(np.concatenate([[means[0] - pad], means, (means[:-1] + means[1:]) / 2, [means[-1] + pad]]))
    p = sign_flip_p(x[:, None] - points[None, :])
    out = []
    for level in levels:
        kept = points[p > level]
        if kept.size == 0 or not math.isfinite(level):
            out.append((math.nan, math.nan))
            continue
        low = -math.inf if kept[0] < means[0] else float(means[means <= kept[0]].max())
        high = math.inf if kept[-1] > means[-1] else float(means[means >= kept[-1]].min())
        out.append((low, high))
    return out


def holm(ps: list[float]) -> list[float]:
    """Holm-Bonferroni: sorted p, (m - j + 1) p_(j), running maximum, capped at 1."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [math.nan] * len(ps), 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - j) * ps[i]))
        out[i] = running
    return out


def min_detectable(d: list[float], a: float) -> float:
    """(t_{1 - a/2, n-1} + t_{power, n-1}) sd / sqrt(n); infinite where the smallest exact p, 2 / 2^n, exceeds a."""
    n = len(d)
    if 2 / 2**n > a:
        return math.inf
    t = stats.t.ppf(1 - a / 2, n - 1) + stats.t.ppf(POWER, n - 1)
    return float(t * np.std(d, ddof=1) / math.sqrt(n))


def fisher_p(k_arm: int, n_arm: int, k_ref: int, n_ref: int) -> float:
    return float(stats.fisher_exact([[k_arm, n_arm - k_arm], [k_ref, n_ref - k_ref]]).pvalue)


# ---- a row's per-seed values -----------------------------------------------------------------------------------------
def sources(row: dict, claim: Claim, data: Seeds) -> list[tuple[str, str, str]]:
    """The cells (mode, slot, lora) a row reads: its own, every LoRA task for the pooled cell, every slot of a sweep
    group for a group row."""
    mode, slot, lora = row["mode"], row["slot"], row["lora"]
    if row["kind"] == "group":
        return [(mode, s, "") for s in data.group_slots(mode, slot)]
    if lora == POOLED:
        return [(mode, slot, t) for t in data.tasks(mode, slot, claim.key)]
    return [(mode, slot, lora)]


def present(row: dict, claim: Claim, data: Seeds, arm: str) -> bool:
    """Whether the arm has any run with the claim's metric (a number or NaN) in the row's cells; in the pooled cell,
    any seed with every task."""
    if row["lora"] == POOLED:
        return bool(pooled(data, row, claim.key, arm))
    return any(data.get(*cell, claim.key, arm) for cell in sources(row, claim, data))


def pooled(data: Seeds, row: dict, key: str, arm: str) -> dict:
    """Per seed, the mean over the LoRA tasks of the cell; a seed counts only where every task has the metric."""
    per_task = [data.get(*cell, key, arm) for cell in sources(row, CLAIMS[row["claim"]], data)]
    seeds = set.intersection(*(set(t) for t in per_task)) if per_task else set()
    return {s: mean(t[s] for t in per_task) for s in seeds}


def slope(points: dict[float, float], start: float) -> float:
    """Least-squares slope, nats per 100 steps, of the finite validation losses at steps >= start (at least 3)."""
    xy = [(x, y) for x, y in points.items() if x >= start and math.isfinite(y)]
    if not math.isfinite(start) or len(xy) < 3:
        return math.nan
    x, y = np.array(xy).T
    return float(100 * np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2))


def slopes(data: Seeds, row: dict, arm: str) -> dict:
    """seed -> the tail slope of the arm's validation loss (NaN for a run without one: diverged, short tail)."""
    mode, slot = row["mode"], row["slot"]
    curves, starts = data.curves(mode, slot, arm), data.get(mode, slot, "", "tail_start", arm)
    runs = data.get(mode, slot, "", "val_loss", arm)
    return {s: slope(curves.get(s, {}), starts.get(s, math.nan)) for s in runs}


def group_measure(measure: str, arm: list[float], ref: list[float]) -> tuple[float, float]:
    """One seed's group measure of both arms from their values at the rates both ran: count (diverged rates), sum
    (over the rates where both are finite; none: NaN), range (max - min where both are finite; at least two)."""
    if measure == "count":
        return float(sum(arm)), float(sum(ref))
    pairs = [(a, r) for a, r in zip(arm, ref) if math.isfinite(a) and math.isfinite(r)]
    if measure == "sum":
        return (sum(p[0] for p in pairs), sum(p[1] for p in pairs)) if pairs else (math.nan, math.nan)
    if len(pairs) < 2:
        return math.nan, math.nan
    a, r = np.array(pairs).T
    return float(a.max() - a.min()), float(r.max() - r.min())


def group_values(data: Seeds, row: dict, claim: Claim, arm: str, ref: str) -> tuple[dict, dict]:
    """Per seed over the group's rates, for a seed at which both arms ran every rate of the group (`diverged` present
    for both); a seed of the arm that missed a rate has no value (dropped)."""
    at: dict = defaultdict(list)
    rates = sources(row, claim, data)
    for mode, slot, _ in rates:
        ran_a, ran_r = data.get(mode, slot, "", "diverged", arm), data.get(mode, slot, "", "diverged", ref)
        va, vr = (measured(data, mode, slot, "", claim.key, x) for x in (arm, ref))
        for seed in ran_a:
            at[seed] += [(va.get(seed, math.nan), vr.get(seed, math.nan))] if seed in ran_r else []
    out = {s: group_measure(claim.measure, [p[0] for p in v], [p[1] for p in v]) if len(v) == len(rates)
           else (math.nan, math.nan) for s, v in at.items()}  # fmt: skip
    return {s: v[0] for s, v in out.items()}, {s: v[1] for s, v in out.items()}


def values(row: dict, claim: Claim, data: Seeds, arm: str, ref: str) -> tuple[dict, dict]:
    """seed -> value of `arm` and of `ref` for the row's kind and cell."""
    if row["kind"] == "group":
        return group_values(data, row, claim, arm, ref)
    if row["kind"] == "slope":
        return slopes(data, row, arm), slopes(data, row, ref)
    if row["lora"] == POOLED:
        return pooled(data, row, claim.key, arm), pooled(data, row, claim.key, ref)
    cell = (row["mode"], row["slot"], row["lora"], claim.key)
    return measured(data, *cell, arm), measured(data, *cell, ref)


def measured(data: Seeds, mode: str, slot: str, lora: str, key: str, arm: str) -> dict:
    """seed -> value; a spike count only for a run that trained its whole length (not diverged: docs/study.md)."""
    values = data.get(mode, slot, lora, key, arm)
    if key != "spikes":
        return values
    diverged = data.get(mode, slot, "", "diverged", arm)
    return {s: math.nan if diverged.get(s) == 1 else v for s, v in values.items()}


def paired(a: dict, r: dict) -> tuple[list[float], int]:
    """The differences a - r at the seeds where both are finite, and the seeds both ran but one is not finite."""
    both = sorted(set(a) & set(r))
    d = [a[s] - r[s] for s in both if math.isfinite(a[s]) and math.isfinite(r[s])]
    return d, len(both) - len(d)


# ---- verdicts --------------------------------------------------------------------------------------------------------
def degenerate(row: dict, claim: Claim, data: Seeds) -> bool:
    """The arm or the reference has validation losses but none finite (diverged at every seed), or a mean validation
    loss at or above its context-free bound (the mean span_entropy, where every seed with a finite loss has one;
    else the unigram entropy of its validation split) or at or above ln V - 0.1; for the early rise also a (mean)
    first loss at or above ln V - 0.1."""
    for arm in (row["arm"], row["ref"]):
        losses = data.get(row["mode"], row["slot"], "", "val_loss", arm)
        if losses and not finite(losses):
            return True
        metrics = ("val_loss", "unigram_entropy", "log_vocab", "first_loss")
        loss, entropy, log_v, first = (mean(finite(data.get(row["mode"], row["slot"], "", m, arm))) for m in metrics)
        span = data.get(row["mode"], row["slot"], "", "span_entropy", arm)
        with_loss = {s for s, v in losses.items() if math.isfinite(v)}
        if with_loss and with_loss <= {s for s, v in span.items() if math.isfinite(v)}:
            entropy = mean(finite(span))
        if loss >= entropy or loss >= log_v - NEAR_UNIFORM:
            return True
        if claim.premise and first >= log_v - NEAR_UNIFORM:
            return True
    return False


def too_coarse(row: dict, claim: Claim, data: Seeds) -> bool:
    """A score on N problems moves in steps of 100 / N points: not testable where that exceeds the paper's effect, N
    being the coarsest evaluation set among the row's runs."""
    key = claim.key.replace("_score", "_problems")
    sizes = [v for arm in (row["arm"], row["ref"]) for v in finite(data.get(*sources(row, claim, data)[0], key, arm))]
    return bool(sizes) and min(sizes) > 0 and 100 / min(sizes) > PAPER_SCORE_EFFECT


def untested(row: dict, claim: Claim, data: Seeds, a: dict, r: dict, n: int) -> str | None:
    """The verdicts decided before any test, in the documented order; 'degenerate' is tested but never supported;
    None: decided by the test."""
    if claim.evidence == "construction_both":
        return "not testable"
    if not present(row, claim, data, row["arm"]):
        return "not measured"
    if claim.evidence == "construction":
        return "holds by construction"
    if not present(row, claim, data, row["ref"]):
        return "not measured"
    if claim.resolution and too_coarse(row, claim, data):
        return "not testable"
    constant = len(set(finite(a) + finite(r))) == 1
    if n == 0 or constant or (claim.premise and all(v <= 0 for v in finite(r))):
        return "not testable"
    if n == 1:
        return "n = 1"
    if claim.degenerate_rule and row["kind"] == "paired" and degenerate(row, claim, data):
        return "degenerate"
    return None


def control(row: dict, claim: Claim, data: Seeds, arm: str, prefix: str) -> dict:
    """A control arm C in the row's cell: C - ref and arm - C, and whether C has a finite value at every seed where
    the row has a finite pair (a control that lacks seeds of the row is descriptive, never decides)."""
    c, r = values(row, claim, data, arm, row["ref"])
    a, _ = values(row, claim, data, row["arm"], row["ref"])
    dc, _ = paired(c, r)
    dac, _ = paired(a, c)
    seeds = {s for s in set(a) & set(r) if math.isfinite(a[s]) and math.isfinite(r[s])}
    decides = bool(seeds) and seeds <= {s for s, v in c.items() if math.isfinite(v)}
    return {f"{prefix}_n": len(dc), f"{prefix}_diff": mean(dc), f"{prefix}_p": exact_p(dc),
            f"arm_{prefix}_diff": mean(dac), f"arm_{prefix}_p": exact_p(dac), f"{prefix}_decides": decides}  # fmt: skip


def controls(row: dict, claim: Claim, data: Seeds, design: Design) -> dict:
    """The row's controls: in teacher mode, for the primary arm's paired row against TT of a tested claim, the
    matched-start control (same function at step 0, not PIT); for a consistency claim the untied control (valid where
    its polar cosine distance is at least CONTROL_MIN_POLAR)."""
    out = {}
    if row["kind"] != "paired":
        return out
    same_start = row["mode"] == "teacher" and row["ref"] == "tt" and row["arm"] == design.primary
    if same_start and design.matched and claim.evidence == "test":
        out.update(control(row, claim, data, design.matched, "matched"))
    if claim.control:
        polar = mean(finite(data.get(row["mode"], row["slot"], "", "polar_cosine", "untied")))
        out.update(control(row, claim, data, "untied", "untied"), untied_valid=polar >= CONTROL_MIN_POLAR)
    return out


def scale(row: dict, claim: Claim, data: Seeds, a: dict, r: dict) -> float:
    """The largest magnitude a row's numbers are computed from (the losses of a slope row), for the comparison's
    rounding floor: a difference that is 0 in exact arithmetic is ~1e-16 of its operands, not of itself."""
    if row["kind"] == "slope":
        a, r = (data.get(row["mode"], row["slot"], "", claim.key, x) for x in (row["arm"], row["ref"]))
    return max((abs(v) for v in finite(a) + finite(r)), default=0.0)


def evaluate(row: dict, data: Seeds, design: Design) -> dict:
    """A row's numbers before its family: n, dropped, means, diff, the differences d, p and its pre-test verdict."""
    claim = CLAIMS[row["claim"]]
    a, r = values(row, claim, data, row["arm"], row["ref"])
    d, dropped = paired(a, r)
    out = {"n": len(d), "dropped": dropped, "arm_mean": mean(finite(a)), "ref_mean": mean(finite(r)),
           "diff": mean(d), "d": d, "p": math.nan, "scale": scale(row, claim, data, a, r)}  # fmt: skip
    if row["kind"] == "fisher":  # k of n runs of each arm, paired or not
        ka, kr = finite(a), finite(r)
        out["n"] = min(len(ka), len(kr))
        out["diff"] = out["arm_mean"] - out["ref_mean"]
        tested_n = 1 if len(ka) == len(kr) == 1 else 2 * bool(out["n"])  # n = 1: one run of each arm
        out["pre"] = untested(row, claim, data, a, r, tested_n)
        if out["pre"] is None:
            out["p"] = fisher_p(int(sum(ka)), len(ka), int(sum(kr)), len(kr))
    else:
        out["pre"] = untested(row, claim, data, a, r, len(d))
        if out["pre"] in (None, "degenerate"):
            out["p"] = exact_p(d)
    out.update(controls(row, claim, data, design))
    return out


def side(x: float) -> int:
    return int(np.sign(x)) if math.isfinite(x) else 0


def decide(claim: Claim, e: dict) -> str:
    """A tested row's verdict on its Holm-adjusted p."""
    if not e["p_holm"] <= ALPHA:
        return "inconclusive"
    if side(e["diff"]) != claim.direction:
        return "contradicted"
    prefix = "matched" if "matched_p" in e else "untied" if "untied_p" in e else ""
    if not prefix or not e[f"{prefix}_decides"] or (prefix == "untied" and not e["untied_valid"]):
        return "supported"
    same = side(e[f"{prefix}_diff"]) == side(e["diff"]) and e[f"{prefix}_p"] <= ALPHA
    beyond = e[f"arm_{prefix}_p"] <= ALPHA and side(e[f"arm_{prefix}_diff"]) == claim.direction
    return "not specific to PIT" if same and not beyond else "supported"


def family_results(rows: list[dict], data: Seeds, design: Design) -> list[dict]:
    """Every row of one family (a claim's rows of one role): family size, Holm over its tested rows, verdicts."""
    evals = [evaluate(row, data, design) for row in rows]
    tested = [i for i, e in enumerate(evals) if e["pre"] is None]  # degenerate rows are not in the family
    adjusted = dict(zip(tested, holm([evals[i]["p"] for i in tested])))
    for i, (row, e) in enumerate(zip(rows, evals)):
        e["family"], e["p_holm"] = len(tested), adjusted.get(i, math.nan)
        e["kind"] = e["pre"] or decide(CLAIMS[row["claim"]], e)
    return evals


# ---- the whole table -------------------------------------------------------------------------------------------------
def fragility(rows: list[dict], i: int, kind: str, data: Seeds, cache_: dict, design: Design) -> tuple:
    """('yes', k) for the first seed k without which row i's verdict changes kind (its whole family recomputed
    without every run of that seed), ('no', None) when none does."""
    for seed in data.seeds:
        if seed not in cache_:
            cache_[seed] = family_results(rows, data.without(seed), design)
        if cache_[seed][i]["kind"] != kind:
            return "yes", seed
    return "no", None


def two_drops(rows: list[dict], i: int, kind: str, data: Seeds, cache_: dict, design: Design) -> tuple:
    """('yes', (j, k)) for the first pair of seeds (in the order of itertools.combinations) without which row i's
    verdict changes kind, ('no', None) when no pair does."""
    for pair in itertools.combinations(data.seeds, 2):
        if pair not in cache_:
            kept = Seeds([r for r in data.records if r[4] not in pair], data.groups)
            cache_[pair] = family_results(rows, kept, design)
        if cache_[pair][i]["kind"] != kind:
            return "yes", pair
    return "no", None


def complete(rows: list[dict], data: Seeds, design: Design) -> list[dict]:
    """Every recomputed column of a family's rows: family-level numbers, intervals, mde and fragility."""
    evals, left_out, pairs_out = family_results(rows, data, design), {}, {}
    for i, (row, e) in enumerate(zip(rows, evals)):
        d, tested = e["d"], e["pre"] is None
        levels = [ALPHA, ALPHA / e["family"] if tested else math.nan] if row["kind"] != "fisher" else [math.nan] * 2
        (e["diff_ci_low"], e["diff_ci_high"]), (e["adj_ci_low"], e["adj_ci_high"]) = exact_intervals(d, levels)
        primary_open = row["role"] == "primary" and e["kind"] == "inconclusive" and row["kind"] != "fisher"
        e["mde"] = min_detectable(d, ALPHA / e["family"]) if primary_open else math.nan
        decided = e["kind"] in DECIDED
        e["fragile"] = fragility(rows, i, e["kind"], data, left_out, design) if decided else ("-", None)
        e["two_drops"] = two_drops(rows, i, e["kind"], data, pairs_out, design) if decided else ("-", None)
    return evals


def recompute(rows: list[dict], data: Seeds, design: Design) -> list[dict | None]:
    """Every row recomputed, family by family (None for a row of an unknown claim), and for each decided paired row
    with a slope row of the same cell and arms whether its gap still closes (`unsettled`: the slope's p <= alpha,
    its sign opposite to the gap's)."""
    families: dict = defaultdict(list)
    for i, row in enumerate(rows):
        if row["claim"] in CLAIMS:
            families[(row["claim"], row["role"])].append(i)
    out: list[dict | None] = [None] * len(rows)
    for members in families.values():
        for i, e in zip(members, complete([rows[i] for i in members], data, design)):
            out[i] = e
    where = {(r["claim"], r["mode"], r["slot"], r["arm"], r["ref"], r["kind"]): i for i, r in enumerate(rows)}
    for row, e in zip(rows, out):
        j = where.get((row["claim"], row["mode"], row["slot"], row["arm"], row["ref"], "slope"))
        if e is None or row["kind"] != "paired" or j is None or out[j] is None:
            continue
        s = out[j]
        e["unsettled"] = e["kind"] in DECIDED and s["p"] <= ALPHA and side(s["diff"]) == -side(e["diff"])
    return out


# ---- comparison ------------------------------------------------------------------------------------------------------
def close(a: float, b: float, scale: float) -> bool:
    """Equal within RTOL (relative), or within ROUNDING of the scale of the row's inputs (a value that is 0 in exact
    arithmetic, e.g. the slope of a flat curve, is rounding noise of its operands); NaN equals NaN, inf equals inf."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= max(RTOL * max(abs(a), abs(b)), ROUNDING * scale)


def verdict_kind(text: str) -> str:
    return next((k for k in KINDS if text.startswith(k)), text)


def fragile_cell(text: str) -> tuple[str, int | None]:
    if not text.startswith("yes"):
        return text.strip() or "-", None  # '-' (or empty): a row that is not decided
    seed = re.search(r"seed (-?\d+)", text)
    return "yes", int(seed.group(1)) if seed else None


def two_drops_cell(text: str) -> tuple[str, tuple | None]:
    if not text.startswith("yes"):
        return text.strip() or "-", None
    pair = re.search(r"seeds (-?\d+) and (-?\d+)", text)
    return "yes", (int(pair.group(1)), int(pair.group(2))) if pair else None


# which claims have rows of each kind
KIND_OF = {"paired": lambda c: c.scope != "group", "fisher": lambda c: c.binary, "group": lambda c: bool(c.measure),
           "slope": lambda c: c.key == "val_loss" and "teacher" in c.modes}  # fmt: skip


def design_problems(row: dict, claim: Claim, design: Design) -> list[str]:
    """A primary row compares the declared primary arm (the paper's configuration `pit`, unless the profile's
    `claims.primary` names another PIT arm: --primary-arm) with its declared reference: in teacher mode the
    matched-start control where one is declared (--matched-control), TT (`tt`) otherwise; a row's mode, kind, cell
    and role are ones its claim has (a secondary metric has no primary row)."""
    primary = row["role"] == "primary"
    ref = design.matched if row["mode"] == "teacher" and design.matched else "tt"
    checks = [
        (not primary or row["arm"] == design.primary,
         f"primary arm {row['arm']!r}, expected {design.primary!r} (declared)"),
        (not primary or row["ref"] == ref, f"primary ref {row['ref']!r}, expected {ref!r} (declared)"),
        (not primary or claim.role == "primary", "a primary row of a claim whose rows are all secondary"),
        (row["mode"] in claim.modes, f"mode {row['mode']!r}: the claim speaks of {', '.join(claim.modes)}"),
        (KIND_OF.get(row["kind"], lambda c: False)(claim), f"kind {row['kind']!r}: not a kind of this claim's rows"),
        (row["lora"] != POOLED or claim.pool, f"lora {POOLED!r}: the claim has no pooled cell"),
    ]  # fmt: skip
    return [problem for ok, problem in checks if not ok]


def mismatches(row: dict, mine: dict | None, design: Design) -> list[str]:
    """Every cell of a row that does not match its recomputation."""
    if mine is None:
        return [f"unknown claim {row['claim']!r}"]
    out = design_problems(row, CLAIMS[row["claim"]], design)
    for col in FLAGS:
        if row.get(col, "") != "" and (row[col] == "True") != bool(mine.get(col, False)):
            out.append(f"{col} = {row[col]!r} in the table, {bool(mine.get(col, False))!r} recomputed")
    if (UNSETTLED in row["verdict"]) != bool(mine.get("unsettled", False)):
        out.append(f"verdict {row['verdict'][:60]!r}: '{UNSETTLED}' is {'not ' * (UNSETTLED not in row['verdict'])}"
                   f"said, recomputed {'un' * bool(mine.get('unsettled'))}settled")  # fmt: skip
    for col in NUMBERS:
        floor = mine["scale"] if col in IN_UNITS else 0.0
        if col in row and not close(num(row[col]), float(mine.get(col, math.nan)), floor):
            out.append(f"{col} = {row[col]!r} in the table, {mine.get(col, math.nan)!r} recomputed")
    if verdict_kind(row["verdict"]) != mine["kind"]:
        out.append(f"verdict {row['verdict']!r} in the table, {mine['kind']!r} recomputed")
    if "fragile" in row and fragile_cell(row["fragile"]) != mine["fragile"]:
        said = "yes: without seed {1}".format(*mine["fragile"]) if mine["fragile"][0] == "yes" else mine["fragile"][0]
        out.append(f"fragile {row['fragile']!r} in the table, {said!r} recomputed")
    if "two_drops" in row and two_drops_cell(row["two_drops"]) != mine["two_drops"]:
        yes, pair = mine["two_drops"]
        said = f"yes: without seeds {pair[0]} and {pair[1]}" if pair else yes
        out.append(f"two_drops {row['two_drops']!r} in the table, {said!r} recomputed")
    return out


ROW_COLUMNS = {"claim", "role", "kind", "mode", "slot", "lora", "arm", "ref", "verdict"}
SEED_COLUMNS = {"mode", "slot", "group", "lora", "arm", "seed", "metric", "value"}


def read_rows(path: Path, needed: set[str]) -> list[dict] | str:
    """The rows of a csv file, or a one-line reason it cannot be checked."""
    if not path.is_file():
        return f"{path}: no such file"
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = needed - set(reader.fieldnames or [])
        return list(reader) if not missing else f"{path}: no column {', '.join(sorted(missing))} (docs/study.md)"


def declared_matched(rows: list[dict], primary_arm: str) -> str:
    """The matched-start control the table declares: the reference of its teacher-mode primary rows where that is a
    TT arm other than `tt` ('' where there is none); the design check then holds every such row to it."""
    refs = [r["ref"] for r in rows if r["role"] == "primary" and r["mode"] == "teacher" and r["arm"] == primary_arm]
    return next((ref for ref in refs if ref.startswith("tt-")), "")


def main(claims_csv: str, primary_arm: str = "pit", matched: str | None = None) -> int:
    claims_csv = Path(claims_csv)
    seeds_csv = claims_csv.with_name(claims_csv.stem + "_seeds.csv")
    rows, seeds = read_rows(claims_csv, ROW_COLUMNS), read_rows(seeds_csv, SEED_COLUMNS)
    problem = next((x for x in (rows, seeds) if isinstance(x, str)), None)
    if problem:
        print(f"cannot check: {problem}")
        return 2
    design = Design(primary_arm, declared_matched(rows, primary_arm) if matched is None else matched)
    ours = recompute(rows, Seeds(*Seeds.parse(seeds)), design)
    bad = 0
    for i, (row, mine) in enumerate(zip(rows, ours)):
        where = (f"row {i + 2} ({row['claim']} {row['role']} {row['kind']}: {row['mode']} {row['slot']} "
                 f"{row['lora'] or '-'} {row['arm']} - {row['ref']})")  # fmt: skip
        for problem in mismatches(row, mine, design):
            print(f"{where}: {problem}")
            bad += 1
    print(f"{len(rows)} rows checked against {seeds_csv}: {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("claims_csv", nargs="?", default="results/tables/claims.csv")
    parser.add_argument("--primary-arm", default="pit", help="the declared primary arm (the profile's claims.primary)")
    parser.add_argument("--matched-control", default=None,
                        help="the declared teacher-mode matched control (claims.matched_control; default: the TT arm "
                             "the table's teacher-mode primary rows compare with, '' for none)")  # fmt: skip
    args = parser.parse_args()
    sys.exit(main(args.claims_csv, args.primary_arm, args.matched_control))

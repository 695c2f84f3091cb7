"""The decision a user converting a real model brings (a profile's `decision` key, docs/real.md): "if I convert my
model to PIT with the best init (`arm`, e.g. pit-head) and keep training, what do I lose or gain against keeping it
as it is (`ref`, TT), and after how many tokens?". Declared before the run; every number from the run folders.

- trajectory (`pit table trajectory`): per validation step s (tokens = s x global_batch_tokens; s = 0 is the loss
  before the first update), the paired differences d_i = L_arm(s) - L_ref(s) over seeds i, their mean with the exact
  sign-flip test and its exact 95% interval (pit.reporting.stats.sign_flip), the 95% t-interval, the Holm-adjusted p
  over the trajectory's steps (one declared secondary family; with 6 seeds and 9 steps the smallest is 9 x 2/64 =
  0.28, so `reading` also says where only the step's own p is at most alpha: "pointwise only") and, where neither
  is, the smallest effect the seeds detect with 80% power (mde). The primary row, the difference at the end, is the
  claims table's teacher_val_loss row with `claims.primary.teacher` = `arm`.
- parity (`pit table parity`): per seed and threshold delta, the tokens from which on the arm stays within delta of the
  reference to the end of the run: the smallest validation step s with d(s') <= delta for every s' >= s, times the
  tokens per step; +inf ("beyond the budget") where the last gap is above delta. Over seeds: the median and its
  distribution-free interval [x_(k), x_(n+1-k)] (order statistics; coverage 1 - 2 P(Binomial(n, 1/2) <= k - 1), the
  largest k with coverage >= 95%: k = 1 for 6 <= n <= 8), which holds with seeds beyond the budget (censored above).
- final_scores (`pit table final_scores`): the teacher and each final model of arm and ref on the decision's tasks as
  they are (results/teachers/<slot>/eval/, results/posttrain/<run>/final-eval/): pass@1 (%, moves in steps of
  100 / problems points) and the per-token NLL of the reference solutions, mean over seeds with the 95% t-interval;
  the paired arm - ref differences and each arm - the teacher, with the exact sign-flip test.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pandas as pd

from pit.errors import PitError
from pit.io import read_json
from pit.reporting.claims import Index, finite
from pit.reporting.stats import holm, min_detectable, sign_flip, t_interval

LEVEL = 0.95  # the intervals' coverage
FINAL_EVAL = "final-eval"  # a run's final model scored as it is: pit.pipeline.layout.final_eval_dir (same layer)
TEACHER = "teacher"  # the final_scores row of the slot's own teacher


def parse_decision(text: str | None) -> dict:
    """The declared decision from a command's --decision (the profile's `decision` key as JSON)."""
    import json

    try:
        d = json.loads(text or "")
    except json.JSONDecodeError:
        raise PitError(f"--decision {text!r}: expected the profile's `decision` key as JSON") from None
    missing = [k for k in ("slot", "arm", "ref") if not isinstance(d, dict) or not d.get(k)]
    if missing:
        raise PitError(f"--decision {text!r}: missing {missing}; expected {{slot, arm, ref[, thresholds, tasks]}}")
    return {"thresholds": [0.05, 0.1, 0.25], "tasks": ["humaneval"], **d}


def curves(index: Index, slot: str, arm: str) -> dict[int, dict[int, float]]:
    """seed -> {validation step: loss} of one arm's teacher-mode runs in `slot`."""
    out: dict[int, dict[int, float]] = {}
    for (mode, s, lora, metric), runs in index.values.items():
        if (mode, s, lora) == ("teacher", slot, "") and metric.startswith("val_loss@"):
            for seed, value in finite(runs.get(arm, {})).items():
                out.setdefault(seed, {})[int(metric.split("@", 1)[1])] = value
    return out


def gaps(seeds: pd.DataFrame, d: dict) -> tuple[dict[int, dict[int, float]], dict[int, float]]:
    """(seed -> {step: arm - ref}, seed -> tokens per step) over the seeds and steps both arms have."""
    index = Index(seeds)
    a, r = curves(index, d["slot"], d["arm"]), curves(index, d["slot"], d["ref"])
    per_step = index.runs("teacher", d["slot"], "", "tokens_per_step")
    out, tokens = {}, {}
    for seed in sorted(set(a) & set(r)):
        out[seed] = {s: a[seed][s] - r[seed][s] for s in sorted(set(a[seed]) & set(r[seed]))}
        t_arm, t_ref = (per_step.get(x, {}).get(seed, math.nan) for x in (d["arm"], d["ref"]))
        if t_arm != t_ref:
            raise PitError(f"seed {seed}: {d['arm']} trained {t_arm} tokens per step, {d['ref']} {t_ref}: not paired")
        tokens[seed] = t_arm
    if not out:
        raise PitError(
            f"no seed where both {d['arm']} and {d['ref']} of teacher slot {d['slot']} have a learning curve"
        )
    return out, tokens


def trajectory(seeds: pd.DataFrame, d: dict, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """One row per validation step (module docstring)."""
    by_seed, tokens = gaps(seeds, d)
    steps = sorted({s for g in by_seed.values() for s in g})
    rows = []
    for step in steps:
        diffs = [g[step] for g in by_seed.values() if step in g]
        test, (mean, half) = sign_flip(diffs, 1 - LEVEL), t_interval(diffs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (len(diffs) - 1)) if len(diffs) > 1 else math.nan
        rows.append({
            "slot": d["slot"], "arm": d["arm"], "ref": d["ref"], "step": step,
            "tokens": step * next(iter(tokens.values())), "n": test.n, "gap": test.mean,
            "exact_low": test.low, "exact_high": test.high, "t_low": mean - half, "t_high": mean + half, "p": test.p,
            "mde": min_detectable(test.n, sd, alpha, power),
        })  # fmt: skip
    df = pd.DataFrame(rows)
    df["p_holm"] = holm(list(df["p"]))
    df["reading"] = [_reading(r, alpha, d) for r in df.itertuples()]
    return df


def _reading(r, alpha: float, d: dict) -> str:
    """The arm lower / higher where the Holm-adjusted p (the family of steps) is at most alpha, `(pointwise only)`
    where only the step's own exact p is, else inconclusive with the mde."""
    side = f"{d['arm']} {'lower' if r.gap < 0 else 'higher'}"
    if r.p_holm <= alpha:
        return side
    if r.p <= alpha:
        return f"{side} (pointwise only)"
    return f"inconclusive (mde {r.mde:.3g})" if math.isfinite(r.mde) else "inconclusive (too few seeds)"


def parity_step(gap: dict[int, float], threshold: float) -> float:
    """The first validation step from which on gap <= threshold to the end; +inf where the last gap is above it."""
    steps = sorted(gap)
    above = [s for s in steps if not gap[s] <= threshold]
    if not above:
        return float(steps[0])
    later = [s for s in steps if s > above[-1]]
    return float(later[0]) if later else math.inf


def median_interval(values: list[float], level: float = LEVEL) -> tuple[float, float, float, float]:
    """(median, low, high, coverage): the distribution-free interval of the median from order statistics (module
    docstring); low/high NaN (coverage of [min, max]) where no k reaches `level`."""
    from scipy.stats import binom

    x, n = sorted(values), len(values)
    if n == 0:
        return (math.nan,) * 4
    median = float(statistics.median(x))  # +inf where half the seeds or more are beyond the budget
    best = 0
    for k in range(1, n // 2 + 1):
        if 1 - 2 * binom.cdf(k - 1, n, 0.5) >= level:
            best = k
    if best == 0:
        return median, math.nan, math.nan, float(1 - 2 * binom.cdf(0, n, 0.5))
    return median, x[best - 1], x[n - best], float(1 - 2 * binom.cdf(best - 1, n, 0.5))


def parity(seeds: pd.DataFrame, d: dict) -> pd.DataFrame:
    """One row per threshold: per seed the tokens to parity, and over seeds the median with its interval."""
    by_seed, tokens = gaps(seeds, d)
    rows = []
    for threshold in d["thresholds"]:
        per_seed = {s: parity_step(g, threshold) * tokens[s] for s, g in by_seed.items()}
        median, low, high, coverage = median_interval(list(per_seed.values()))
        budget = max(max(g) for g in by_seed.values()) * next(iter(tokens.values()))
        rows.append({
            "slot": d["slot"], "arm": d["arm"], "ref": d["ref"], "threshold": threshold, "n": len(per_seed),
            "reached": sum(map(math.isfinite, per_seed.values())), "budget_tokens": budget,
            "median_tokens": median, "low": low, "high": high, "coverage": coverage,
            **{f"seed{s}": v for s, v in per_seed.items()},
        })  # fmt: skip
    return pd.DataFrame(rows)


# ---- the final models as they are ----------------------------------------------------------------------------------
def _result(path: Path) -> dict | None:
    if not path.is_file():
        return None
    r = read_json(path)
    return {"score": r.get("pass@1", r.get("accuracy")), "nll": r.get("nll"), "problems": r.get("n")}


def final_results(results: Path, d: dict, task: str) -> dict[str, dict[int, dict]]:
    """model -> seed -> {score, nll, problems}: the teacher (seed -1) and every seed of arm and ref."""
    out: dict[str, dict[int, dict]] = {}
    teacher = _result(results / "teachers" / d["slot"] / "eval" / f"{task}.json")
    if teacher:
        out[TEACHER] = {-1: teacher}
    for arm in (d["arm"], d["ref"]):
        folder = results / "posttrain" / "teacher" / d["slot"] / arm
        for path in sorted(folder.glob(f"seed*/{FINAL_EVAL}/{task}.json")) + [folder / FINAL_EVAL / f"{task}.json"]:
            r = _result(path)
            if r:
                run = path.parent.parent.name
                seed = int(run.removeprefix("seed")) if run.startswith("seed") else -1
                out.setdefault(arm, {})[seed] = r
    return out


def _model_row(model: str, task: str, runs: dict[int, dict]) -> dict:
    row = {"row": model, "task": task, "n": len(runs), "problems": _one(r["problems"] for r in runs.values())}
    for key in ("score", "nll"):
        mean, half = t_interval([float(r[key]) for r in runs.values() if r[key] is not None])
        row.update({key: mean, f"{key}_low": mean - half, f"{key}_high": mean + half, f"{key}_p": math.nan})
    return row


def _diff_row(label: str, task: str, a: dict[int, dict], r: dict[int, dict]) -> dict:
    """a - r paired by seed (r with one seed -1, the teacher: every seed of a against it)."""
    pairs = [(a[s], r[s if s in r else -1]) for s in sorted(a) if s in r or -1 in r]
    row = {"row": label, "task": task, "n": len(pairs), "problems": _one(x["problems"] for x, _ in pairs)}
    for key in ("score", "nll"):
        test = sign_flip([float(x[key]) - float(y[key]) for x, y in pairs if None not in (x[key], y[key])], 1 - LEVEL)
        row.update({key: test.mean, f"{key}_low": test.low, f"{key}_high": test.high, f"{key}_p": test.p})
    return row


def _one(values) -> float:
    found = {v for v in values if v is not None}
    return float(found.pop()) if len(found) == 1 else math.nan  # NaN: the models saw different problem sets


def final_scores(results: str | Path, d: dict) -> pd.DataFrame:
    """The teacher, arm and ref on each task as they are, and the paired differences (module docstring)."""
    rows = []
    for task in d["tasks"]:
        found = final_results(Path(results), d, task)
        rows += [_model_row(m, task, found[m]) for m in (TEACHER, d["arm"], d["ref"]) if m in found]
        if d["arm"] in found and d["ref"] in found:
            rows.append(_diff_row(f"{d['arm']} - {d['ref']}", task, found[d["arm"]], found[d["ref"]]))
        for arm in (d["arm"], d["ref"]) if TEACHER in found else ():
            if arm in found:
                rows.append(_diff_row(f"{arm} - {TEACHER}", task, found[arm], found[TEACHER]))
    if not rows:
        raise PitError(f"no final-model scores of {d['tasks']} under {results}: run the evaluate_final rule first")
    df = pd.DataFrame(rows)
    df.insert(4, "resolution_points", 100 / df["problems"])
    return df


def table_notes(name: str, d: dict) -> list[str]:
    """The lines under each decision table: what a row is, declared before the run."""
    arm, ref = d["arm"], d["ref"]
    return {
        "trajectory": [f"Declared secondary rows (profile `decision`): {arm} - {ref} of the validation loss at each "
                       "validation step, paired by seed; exact sign-flip p, exact 95% interval, Holm over the steps; "
                       "t_low/t_high: 95% t-interval; mde: the smallest effect detected with 80% power."],
        "parity": [f"Tokens from which {arm}'s validation loss stays within `threshold` nats of {ref}'s to the end, "
                   "per seed (inf: not within the budget); median over seeds with its distribution-free interval "
                   "[low, high] at `coverage`. Resolution: one validation interval."],
        "final_scores": [f"The teacher and the final models of {arm} and {ref} as they are (no LoRA): score = pass@1 "
                         "(%) or accuracy, nll = per-token NLL of the reference solutions; model rows: mean over seeds "
                         "with the 95% t-interval; difference rows: paired by seed (against the teacher: each seed), "
                         "exact sign-flip p and exact 95% interval."],
    }[name]  # fmt: skip


BUILDERS = {"trajectory": trajectory, "parity": parity, "final_scores": final_scores}

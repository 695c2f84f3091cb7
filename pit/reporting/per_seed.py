"""Every number the claims table rests on, one row per run and metric (`claims_seeds.csv`, docs/study.md).

Columns: mode, slot, group, lora, arm, seed, metric, value. `group` is the slot a learning-rate sweep belongs to
(a slot with `sweep_of: <slot>` in the profile, recorded in its runs' tags; a slot's own name otherwise); `lora` is
the LoRA task of post-training metrics ('' elsewhere). The claims table (pit.reporting.claims) is computed from this
table alone, and so can anyone else (scripts/check_claims.py does, with numpy and scipy only).

Metrics of a pretraining run (pretrain/<run>/summary.json, metrics.jsonl, run.json):
  val_loss, first_loss, final_train_loss, log_vocab (ln V), unigram_entropy (of the run's validation split, nats), lr,
  max_delta_ti, early_rise, early_rise_noise, early_rise_excess, loss_noise, spikes, nonfinite_steps, max_rise,
  val_loss@<step> (the learning curve; val_loss@0 is the loss before the first update, summary's initial_val_loss,
  where the run recorded it), tokens_per_step (train.global_batch_tokens: a step's training tokens); diverged (1:
  the run ended with a non-finite validation loss, in scratch mode
  one no lower than its first loss, or was recorded as diverged in its summary: non-finite weights, too many skipped
  steps, stopped after stop_after_nonfinite non-finite steps; a teacher-mode run starts at the teacher's low loss, and
  ending above it is a regression, kept as its loss, not a divergence), diverged_at (the first step of the non-finite
  stretch the run ended in, NaN for a run that did not end non-finite), tail_start (decay_steps: where a constant-rate
  tail begins). A run that diverged has no loss measures: its val_loss, val_loss@*, early rise and max rise are NaN
  (an outcome, not a number), and its spikes are NaN when it diverged before the count starts (the end of warmup). The
  learning-rate sweep's group measures (diverged rates, spikes over the rates both arms ran, lr sensitivity) are made
  from these by the claims table (pit.reporting.claims), not here.
Of a diagnosis (diagnostics/<run>/diagnostics.json): raw_cosine, polar_cosine, lens_kl_ratio, lens_ce_gap,
  lens_mean_kl_bits, lens_mean_ce_bits, final_entropy_bits, span_entropy (H_span, nats: the cross-entropy on the
  validation split's unigram frequencies of the best context-free model the head can express, softmax(W u + b) for
  one u; the line a degenerate run's val_loss does not get below; NaN for a diagnosis written before it existed,
  docs/diagnostics.md section 6).
Of a LoRA run on task k (posttrain/<run>/<k>/): lora_kl, lora_val_loss_change, nll_before, nll_after,
  indomain_nll_change (after - before), gain (before - after), kl_per_gain, val_change_per_gain (per nat of gain;
  NaN where gain <= 0), indomain_score, transfer_nll_change and transfer_score (its out-of-domain task: HumanEval
  after MBPP, SVAMP after GSM8K), and with a frontier (frontier.json) frontier_gain@<lr>, frontier_kl@<lr>,
  matched_gain and kl_at_matched_gain (KL interpolated at one gain shared by every arm of the cell: the smallest
  of the arm-seeds' largest gains, on the piecewise-linear KL-vs-gain curve through (0, 0) and the points);
  indomain_problems and transfer_problems (the evaluation sets' sizes: a score moves in steps of 100 / N points).
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from pit.analysis.curves import early_rise, max_rise, spikes
from pit.errors import PitError
from pit.io import read_json, read_jsonl
from pit.reporting.tables import check_diagnostics, check_summary, find_runs, posttrain_runs, run_paths
from pit.sidecars import read_run_record

COLUMNS = ["mode", "slot", "group", "lora", "arm", "seed", "metric", "value"]
EARLY_FRACTION = 0.1  # the early window: the first 10% of the steps (Figure 4's "beginning phase")
SMOOTH_WINDOW = 10  # steps of the trailing mean the early rise and the max rise read
SPIKE_WINDOW, SPIKE_SIGMAS = 20, 5.0  # a spike: loss > median of the previous 20 losses + 5 sigma


def _runs(root: Path, name: str) -> list:
    """find_runs(root, name), or [] where root holds none (a stage that did not run)."""
    try:
        found = root.is_dir() and run_paths(root, name)
    except PitError:  # run_paths' only error: nothing found
        return []
    return find_runs(root, name) if found else []  # a damaged file among them is its PitError, never skipped


@cache
def _val_entropy(path: str) -> float:
    """The unigram entropy of a validation token file (NaN where the file is not at `path` any more)."""
    from pit.data.reader import TokenFile, unigram_entropy

    try:
        return unigram_entropy(TokenFile(path))
    except (OSError, PitError):
        return math.nan


def unigram_baseline(run_json: dict) -> float:
    """The unigram entropy of a run's validation split (run.json's `params.train.val_data`; NaN without it): the loss
    of a model that predicts token frequencies and ignores context, the line a learning curve must get below."""
    path = run_json.get("params", {}).get("train", {}).get("val_data")
    return _val_entropy(path) if path else math.nan


def _f(value) -> float:
    return math.nan if value is None else float(value)


def diverged_at(summary: dict, losses: list[float]) -> float:
    """The first step of the non-finite stretch a run ended in (summary's `diverged_at_step` where the run was stopped
    in one), NaN when its last loss is finite."""
    if summary.get("diverged_at_step") is not None:
        return float(summary["diverged_at_step"])
    if not losses or math.isfinite(losses[-1]):
        return math.nan
    finite_steps = [i for i, v in enumerate(losses) if math.isfinite(v)]
    return float(finite_steps[-1] + 2 if finite_steps else 1)


def pretrain_metrics(summary: dict, rows: list[dict], run_json: dict) -> dict[str, float]:
    """The metrics of one pretraining run (module docstring)."""
    params = run_json.get("params", {})
    train = params.get("train", {})
    vocab = params.get("vocab_size")
    losses = [r["loss"] for r in sorted(rows, key=lambda r: r["step"]) if "loss" in r]
    warmup = train.get("warmup_steps", 0)
    val, first = _f(summary.get("val_loss")), _f(summary.get("first_step_loss"))
    deltas = [r["delta_ti"] for r in rows if r.get("delta_ti") is not None and math.isfinite(r["delta_ti"])]
    learned_nothing = summary.get("mode") != "teacher" and math.isfinite(first) and val >= first
    diverged = not math.isfinite(val) or learned_nothing or bool(summary.get("diverged"))
    at = diverged_at(summary, losses)
    out = {
        "val_loss": math.nan if diverged else val,
        "first_loss": first,
        "final_train_loss": _f(summary.get("final_train_loss")),
        "log_vocab": math.log(vocab) if vocab else math.nan,
        "unigram_entropy": unigram_baseline(run_json),
        "lr": _f(train.get("lr")),
        "max_delta_ti": max(deltas) if deltas else math.nan,
        "nonfinite_steps": float(sum(r.get("event") == "nonfinite" for r in rows)),
        "diverged": float(diverged),
        "diverged_at": at,
        "tail_start": _f(train.get("decay_steps")),  # the first step of a constant-rate tail (NaN: none)
        "tokens_per_step": _f(train.get("global_batch_tokens")),
    }
    if losses:
        rise = early_rise(losses, EARLY_FRACTION, SMOOTH_WINDOW)
        out.update(dict.fromkeys(rise, math.nan) if diverged else rise)
        out["spikes"] = math.nan if at <= warmup else float(spikes(losses, warmup, SPIKE_WINDOW, SPIKE_SIGMAS))
        out["max_rise"] = math.nan if diverged else max_rise(losses, warmup, SMOOTH_WINDOW)
    if summary.get("initial_val_loss") is not None and not diverged:
        out["val_loss@0"] = float(summary["initial_val_loss"])
    for r in rows if not diverged else []:
        if r.get("val_loss") is not None:
            out[f"val_loss@{r['step']}"] = float(r["val_loss"])
    if summary.get("steps") and not diverged:
        out[f"val_loss@{summary['steps']}"] = val
    return out


def diagnostics_metrics(d: dict) -> dict[str, float]:
    lens = d.get("lens") or {}
    return {
        "raw_cosine": _f(d.get("raw", {}).get("cosine_distance")),
        "polar_cosine": _f(d.get("polar", {}).get("cosine_distance")),
        "lens_kl_ratio": _f(lens.get("kl_ratio")),
        "lens_ce_gap": _f(lens.get("ce_gap")),
        "lens_mean_kl_bits": _f(lens.get("mean_kl_bits")),
        "lens_mean_ce_bits": _f(lens.get("mean_ce_bits")),
        "final_entropy_bits": _f(lens.get("final_entropy_bits")),
        "span_entropy": _f((d.get("context_free") or {}).get("span_entropy")),
    }


def _per_gain(value: float, gain: float) -> float:
    return value / gain if math.isfinite(gain) and gain > 0 else math.nan


def lora_metrics(record: dict, task: str, frontier: dict | None) -> dict[str, float]:
    """The metrics of one LoRA run (a pit.reporting.tables.posttrain_runs record's task entry)."""
    before, after = _f(record["base_nll"].get(task)), _f(record["nll"].get(task))
    effects = record["side_effects"]
    gain = before - after
    out = {
        "lora_kl": _f(effects.get("kl")),
        "lora_val_loss_change": _f(effects.get("val_loss_change")),
        "nll_before": before,
        "nll_after": after,
        "indomain_nll_change": after - before,
        "gain": gain,
        "kl_per_gain": _per_gain(_f(effects.get("kl")), gain),
        "val_change_per_gain": _per_gain(_f(effects.get("val_loss_change")), gain),
        "indomain_score": _f(record["scores"].get(task)),
    }
    out["indomain_problems"] = _f(record.get("problems", {}).get(task))
    transfer = [t for t in record["scores"] if t != task]
    if transfer:
        t = transfer[0]
        out["transfer_nll_change"] = _f(record["nll"].get(t)) - _f(record["base_nll"].get(t))
        out["transfer_score"] = _f(record["scores"].get(t))
        out["transfer_problems"] = _f(record.get("problems", {}).get(t))
    if frontier:
        out["lora_lr"] = _f(frontier.get("lora_lr"))
        for p in frontier["points"]:
            out[f"frontier_gain@{p['lr']:g}"] = p["gain"]
            out[f"frontier_kl@{p['lr']:g}"] = p["kl"]
    return out


def kl_at_gain(points: list[tuple[float, float]], gain: float) -> float:
    """KL at `gain` on the piecewise-linear curve through (0, 0) and the (gain, kl) points sorted by gain (NaN
    beyond the largest gain)."""
    pts = sorted([(0.0, 0.0), *((g, k) for g, k in points if math.isfinite(g) and math.isfinite(k) and g > 0)])
    gains, kls = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    return float(np.interp(gain, gains, kls)) if gain <= gains[-1] else math.nan


def frontier_points(metrics: dict[str, float]) -> list[tuple[float, float]]:
    """(gain, kl) of a LoRA run: its own point and its frontier's."""
    pts = [(metrics["gain"], metrics["lora_kl"])]
    for key, g in metrics.items():
        if key.startswith("frontier_gain@"):
            pts.append((g, metrics["frontier_kl@" + key.split("@", 1)[1]]))
    return pts


def add_matched_gain(table: list[dict]) -> list[dict]:
    """matched_gain and kl_at_matched_gain rows for every LoRA run whose cell (mode, slot, lora) has frontiers."""
    by_run: dict[tuple, dict[str, float]] = {}
    for r in table:
        if r["lora"]:
            by_run.setdefault((r["mode"], r["slot"], r["lora"], r["arm"], r["seed"]), {})[r["metric"]] = r["value"]
    cells: dict[tuple, list[tuple]] = {}
    for key, m in by_run.items():
        if any(k.startswith("frontier_gain@") for k in m):
            cells.setdefault(key[:3], []).append(key)
    out = []
    for keys in cells.values():
        tops = [max((g for g, _ in frontier_points(by_run[k]) if math.isfinite(g)), default=math.nan) for k in keys]
        target = min(tops) if tops and all(math.isfinite(t) and t > 0 for t in tops) else math.nan
        for k in keys:
            kl = kl_at_gain(frontier_points(by_run[k]), target) if math.isfinite(target) else math.nan
            base = dict(zip(("mode", "slot", "lora", "arm", "seed"), k), group=k[1])
            out += [{**base, "metric": "matched_gain", "value": target}, {**base, "metric": "kl_at_matched_gain",
                                                                             "value": kl}]  # fmt: skip
    return out


def _rows(mode: str, slot: str, arm: str, seed, group: str, lora: str, metrics: dict[str, float]) -> list[dict]:
    """The per-seed rows of one run's metrics (seed -1 for a run of a profile without seeds)."""
    base = {"mode": mode, "slot": slot, "group": group, "lora": lora, "arm": arm, "seed": -1 if seed is None else seed}
    return [{**base, "metric": k, "value": v} for k, v in metrics.items()]


STAGES = ("pretrain", "diagnostics", "posttrain")


def per_seed_table(results: str | Path, stages: tuple[str, ...] = STAGES) -> pd.DataFrame:
    """The per-seed table of every run under `results` in `stages` (pretrain/, diagnostics/, posttrain/; any may be
    absent)."""
    results = Path(results)
    table: list[dict] = []
    groups: dict[tuple[str, str], str] = {}
    for run, summary in _runs(results / "pretrain", "summary.json"):
        check_summary(summary, run)
        path = run.path.with_name("metrics.jsonl")
        run_json = read_run_record(run.path.with_name("run.json")) if run.path.with_name("run.json").is_file() else {}
        group = run_json.get("params", {}).get("train", {}).get("tags", {}).get("sweep_of") or run.slot
        groups[(run.mode, run.slot)] = group
        rows = read_jsonl(path) if path.is_file() else []
        table += _rows(*run[:4], group, "", pretrain_metrics(summary, rows, run_json))
    for run, d in _runs(results / "diagnostics", "diagnostics.json") if "diagnostics" in stages else []:
        check_diagnostics(d, run)
        table += _rows(*run[:4], groups.get((run.mode, run.slot), run.slot), "", diagnostics_metrics(d))
    post = results / "posttrain"
    if "posttrain" in stages and post.is_dir() and _runs(post, "*/side_effects.json"):
        for r in posttrain_runs(post):
            folder = post / r["mode"] / r["slot"] / r["interface"] / ("" if r["seed"] is None else f"seed{r['seed']}")
            for task, record in r["lora"].items():
                path = folder / task / "frontier.json"
                metrics = lora_metrics(record, task, read_json(path) if path.is_file() else None)
                table += _rows(r["mode"], r["slot"], r["interface"], r["seed"], r["slot"], task, metrics)
    table += add_matched_gain(table)
    return pd.DataFrame(table, columns=COLUMNS)

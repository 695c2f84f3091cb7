"""The paper's claims put to the test: per-seed statistics and a verdict per claim (`pit table claims`).

Each claim is data (CLAIMS): the paper's words and where they stand, the metric that measures it here and the
sign the paper gives to PIT - TT. For every claim x (mode, slot[, LoRA task]) x PIT arm (`pit`, `pit-*`):

- per arm, the mean over seeds with its 95% Student-t interval, mean +- t(0.975, n-1) sd / sqrt(n);
- the paired difference arm - TT over the seeds both ran (paired by seed), its mean and 95% Student-t interval,
  and untied - TT the same way (informational);
- a verdict: `supported` (the interval excludes 0 on the paper's side), `contradicted` (excludes 0 on the other
  side), `inconclusive` (covers 0), `n = 1, no interval`, `not testable: <why>`, `not measured: <what>`.

RESULTS_ROOT holds pretrain/ (summary.json, metrics.jsonl), diagnostics/ (diagnostics.json) and posttrain/
(pit.reporting.tables.posttrain_runs), each in the `<mode>/<slot>/<arm>/[seed<k>/]` layout; any may be absent.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pit.errors import PitError
from pit.io import read_jsonl
from pit.reporting.tables import find_runs, method_order, posttrain_runs, run_paths, slot_key

GROUPS = ("interface", "training", "layerwise", "side_effects", "posttrain")


@dataclass(frozen=True)
class Claim:
    """One claim of the paper: its words (`quote`, from `where`), the metric (`metric`, computed as `how` by the
    extractor `key` of `source`), the modes it speaks of and the sign the paper gives to PIT - TT (`direction`)."""

    id: str
    group: str
    quote: str
    where: str
    metric: str
    how: str
    source: str  # pretrain | diagnostics | posttrain
    key: str
    modes: tuple[str, ...]
    direction: int  # -1: PIT - TT < 0; +1: PIT - TT > 0


_CONSISTENT = ("guaranteeing a pseudo-inverse-consistent interface throughout training", "Abstract; Section 5.5")
_SIDE = ("substantially reduced side effects", "Abstract; Section 5.6")
_LAYER = ("stronger layerwise semantic consistency", "Abstract; Figure 2; Section 5.5")
_TEACHER = ("In teacher-mode, PIT is modestly better in most cells", "Table 4 discussion, Section 5.6")
_SCRATCH = ("In scratch-mode, TT is slightly better across the board", "Table 4 discussion, Section 5.6")
_FIG4 = ("PIT performs more stable than TT, and obtained lower loss", "Figure 4 caption; Section 5.4")
_FIG3 = ("TT keep a lower level of loss in the whole process", "Figure 3 caption; Section 5.4")
_BOTH = ("teacher", "scratch")

CLAIMS = [
    Claim("interface_max_delta_ti", "interface", *_CONSISTENT, "max Delta_TI", "max over logged steps of "
          "||W_out E - I||_F (metrics.jsonl)", "pretrain", "max_delta_ti", _BOTH, -1),
    Claim("interface_raw_cosine", "interface", *_CONSISTENT, "raw cosine distance", "Table 2 cosine distance of "
          "the raw anchors (Eqs. 1-2) at the end of training (diagnostics.json)", "diagnostics", "raw_cosine", _BOTH,
          -1),
    Claim("teacher_early_rise", "training", "PIT is more stable early on, while TT exhibits a brief loss increase",
          "Section 5.4; Figure 4", "early loss rise", "max over steps t <= ceil(0.1 T) of loss_t - loss_1 "
          "(metrics.jsonl, T = last step)", "pretrain", "early_rise", ("teacher",), -1),
    Claim("teacher_final_train_loss", "training", *_FIG4, "final train loss", "summary.json final_train_loss",
          "pretrain", "final_train_loss", ("teacher",), -1),
    Claim("teacher_val_loss", "training", *_FIG4, "val loss", "summary.json val_loss", "pretrain", "val_loss",
          ("teacher",), -1),
    Claim("scratch_final_train_loss", "training", *_FIG3, "final train loss", "summary.json final_train_loss",
          "pretrain", "final_train_loss", ("scratch",), 1),
    Claim("scratch_val_loss", "training", *_FIG3, "val loss", "summary.json val_loss", "pretrain", "val_loss",
          ("scratch",), 1),
    Claim("lens_mean_kl", "layerwise", *_LAYER, "lens KL (bits)", "mean over layers of KL(final || logit lens), "
          "bits (diagnostics.json lens.mean_kl_bits)", "diagnostics", "lens_mean_kl_bits", _BOTH, -1),
    Claim("lens_mean_ce", "layerwise", *_LAYER, "lens CE (bits)", "mean over layers of the logit lens' "
          "cross-entropy, bits (diagnostics.json lens.mean_ce_bits)", "diagnostics", "lens_mean_ce_bits", _BOTH, -1),
    Claim("side_effect_kl", "side_effects", *_SIDE, "LoRA KL", "KL(p_before || p_after) on held-out pretraining "
          "text, nats/token, per LoRA task (side_effects.json kl)", "posttrain", "lora_kl", _BOTH, -1),
    Claim("side_effect_val_loss", "side_effects", *_SIDE, "LoRA val-loss change", "validation loss after minus "
          "before the LoRA, per LoRA task (side_effects.json val_loss_change)", "posttrain", "lora_val_loss_change",
          _BOTH, -1),
    Claim("teacher_posttrain_nll", "posttrain", *_TEACHER, "LoRA in-domain NLL", "reference NLL (nats/token) of "
          "the LoRA model on its own task (eval/<task>.json nll)", "posttrain", "lora_nll", ("teacher",), -1),
    Claim("teacher_posttrain_score", "posttrain", *_TEACHER, "LoRA in-domain score", "pass@1 / exact match (%) "
          "of the LoRA model on its own task", "posttrain", "lora_score", ("teacher",), 1),
    Claim("scratch_posttrain_nll", "posttrain", *_SCRATCH, "LoRA in-domain NLL", "reference NLL (nats/token) of "
          "the LoRA model on its own task (eval/<task>.json nll)", "posttrain", "lora_nll", ("scratch",), 1),
    Claim("scratch_posttrain_score", "posttrain", *_SCRATCH, "LoRA in-domain score", "pass@1 / exact match (%) "
          "of the LoRA model on its own task", "posttrain", "lora_score", ("scratch",), -1),
]  # fmt: skip


def _finite(values) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def max_delta_ti(rows: list[dict]) -> float | None:
    """max_t Delta_TI(t) over the steps that logged it (non-finite values skipped); None when none did."""
    values = _finite(r.get("delta_ti") for r in rows)
    return max(values) if values else None


def early_rise(rows: list[dict]) -> float | None:
    """max_{t <= ceil(0.1 T)} (loss_t - loss_1): the largest rise of the training loss above its first-step
    value over the first 10% of the T steps (0 when it only falls); non-finite losses are skipped."""
    rows = sorted((r for r in rows if "loss" in r and math.isfinite(r["loss"])), key=lambda r: r["step"])
    if not rows:
        return None
    window = math.ceil(0.1 * rows[-1]["step"])
    return max(r["loss"] - rows[0]["loss"] for r in rows if r["step"] <= max(window, rows[0]["step"]))


PRETRAIN: dict[str, Callable[[dict, list[dict]], float | None]] = {
    "max_delta_ti": lambda s, rows: max_delta_ti(rows),
    "early_rise": lambda s, rows: early_rise(rows),
    "final_train_loss": lambda s, rows: s.get("final_train_loss"),
    "val_loss": lambda s, rows: s.get("val_loss"),
}
DIAGNOSTICS: dict[str, Callable[[dict], float | None]] = {
    "raw_cosine": lambda d: d.get("raw", {}).get("cosine_distance"),
    "lens_mean_kl_bits": lambda d: (d.get("lens") or {}).get("mean_kl_bits"),
    "lens_mean_ce_bits": lambda d: (d.get("lens") or {}).get("mean_ce_bits"),
}
POSTTRAIN: dict[str, Callable[[dict, str], float | None]] = {
    "lora_kl": lambda r, task: r["side_effects"].get("kl"),
    "lora_val_loss_change": lambda r, task: r["side_effects"].get("val_loss_change"),
    "lora_nll": lambda r, task: (r.get("nll") or {}).get(task),
    "lora_score": lambda r, task: r["scores"].get(task),
}


def _runs(root: Path, name: str) -> list:
    """run_paths(root, name), or [] where root holds none (a stage that did not run)."""
    try:
        return run_paths(root, name) if root.is_dir() else []
    except PitError:  # run_paths' only error: nothing found
        return []


# values[(claim id, mode, slot, lora task)][arm][seed] = value (None: the run exists but lacks the metric)
Values = dict[tuple[str, str, str, str], dict[str, dict]]


def measure(results: str | Path) -> tuple[Values, dict[tuple[str, str, str], list[str]]]:
    """Every claim's metric from every run under `results` (pretrain/, diagnostics/, posttrain/), and the
    LoRA tasks seen per (source, mode, slot)."""
    results = Path(results)
    values: Values = {}
    tasks: dict[tuple[str, str, str], list[str]] = {}

    def put(source: str, mode: str, slot: str, task: str, arm: str, seed, metrics: dict) -> None:
        for c in CLAIMS:
            if c.source == source and mode in c.modes:
                values.setdefault((c.id, mode, slot, task), {}).setdefault(arm, {})[seed] = metrics[c.key]

    if _runs(results / "pretrain", "summary.json"):
        for run, s in find_runs(results / "pretrain", "summary.json"):
            path = run.path.with_name("metrics.jsonl")
            rows = read_jsonl(path) if path.is_file() else []
            metrics = {k: get(s, rows) for k, get in PRETRAIN.items()}
            put("pretrain", run.mode, run.slot, "", run.interface, run.seed, metrics)
    if _runs(results / "diagnostics", "diagnostics.json"):
        for run, d in find_runs(results / "diagnostics", "diagnostics.json"):
            metrics = {k: get(d) for k, get in DIAGNOSTICS.items()}
            put("diagnostics", run.mode, run.slot, "", run.interface, run.seed, metrics)
    if _runs(results / "posttrain", "*/side_effects.json"):
        for r in posttrain_runs(results / "posttrain"):
            for task, lora in r["lora"].items():
                seen = tasks.setdefault(("posttrain", r["mode"], r["slot"]), [])
                seen += [task] if task not in seen else []
                metrics = {k: get(lora, task) for k, get in POSTTRAIN.items()}
                put("posttrain", r["mode"], r["slot"], task, r["interface"], r["seed"], metrics)
    return values, tasks


def t_interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width) of the 95% Student-t interval: mean +- t(0.975, n-1) sd / sqrt(n); half-width NaN for
    n = 1 (no interval), mean NaN for n = 0."""
    from scipy.stats import t

    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def paired(arm: dict, tt: dict) -> list[float]:
    """arm - TT for every seed both ran with the metric measured, in seed order."""
    seeds = sorted((s for s in arm if s in tt and arm[s] is not None and tt[s] is not None), key=lambda s: s or 0)
    return [arm[s] - tt[s] for s in seeds]


def usable(runs: dict | None) -> dict:
    """seed -> value of the seeds whose value was measured and is finite."""
    return {s: v for s, v in (runs or {}).items() if v is not None and math.isfinite(v)}


def verdict(claim: Claim, arm: str, runs: dict[str, dict]) -> str:
    """The claim's verdict for `arm` from the per-seed values of every arm (`runs`: arm -> seed -> value), by the
    rules of the module docstring."""
    if arm not in runs:
        return f"not measured: no {claim.source} runs of {arm}"
    if not usable(runs[arm]):
        return f"not measured: {claim.metric} absent from the {arm} runs"
    if "tt" not in runs:
        return "not testable: no TT runs"
    if not usable(runs["tt"]):
        return f"not measured: {claim.metric} absent from the TT runs"
    diffs = paired(usable(runs[arm]), usable(runs["tt"]))
    if not diffs:
        return f"not testable: no seed ran both {arm} and TT"
    constant = set(usable(runs[arm]).values()) | set(usable(runs["tt"]).values())
    if len(constant) == 1:
        return f"not testable: every seed of both arms reads {constant.pop():g}"
    mean, half = t_interval(diffs)
    if len(diffs) == 1:
        return "n = 1, no interval"
    low, high = mean - half, mean + half
    if low > 0 or high < 0:
        return "supported" if (low > 0) == (claim.direction > 0) else "contradicted"
    return "inconclusive"


def _summary(values: dict) -> tuple[float, float]:
    return t_interval(list(usable(values).values()))


def claim_row(claim: Claim, mode: str, slot: str, task: str, arm: str, runs: dict[str, dict]) -> dict:
    """One table row: the claim, both arms' means and intervals, the paired differences and the verdict."""
    arm_mean, arm_ci = _summary(runs.get(arm, {}))
    tt_mean, tt_ci = _summary(runs.get("tt", {}))
    diffs = paired(usable(runs.get(arm)), usable(runs.get("tt")))
    diff, half = t_interval(diffs)
    untied, untied_ci = t_interval(paired(usable(runs.get("untied")), usable(runs.get("tt"))))
    return {
        "claim": claim.id,
        "paper": f'"{claim.quote}" ({claim.where})',
        "metric": claim.metric,
        "direction": f"PIT - TT {'<' if claim.direction < 0 else '>'} 0",
        "mode": mode,
        "slot": slot,
        "lora": task,
        "arm": arm,
        "n": len(diffs),
        "arm_mean": arm_mean,
        "arm_ci": arm_ci,
        "tt_mean": tt_mean,
        "tt_ci": tt_ci,
        "diff": diff,
        "diff_ci_low": diff - half,
        "diff_ci_high": diff + half,
        "untied_diff": untied,
        "untied_ci": untied_ci,
        "verdict": verdict(claim, arm, runs),
    }


def is_pit_arm(arm: str) -> bool:
    return arm == "pit" or arm.startswith("pit-")


def cells(claim: Claim, values: Values, tasks: dict) -> list[tuple[str, str, str, str]]:
    """The (mode, slot, LoRA task, PIT arm) cells of a claim: every slot and PIT arm any run of the claim's modes
    shows (a placeholder slot '' and arm 'pit' where none ran), every LoRA task for post-training claims."""
    layout: dict[str, dict[str, set]] = {}
    for (_, mode, slot, _), runs in values.items():
        layout.setdefault(mode, {}).setdefault(slot, set()).update(runs)
    out = []
    for mode in claim.modes:
        for slot in sorted(layout.get(mode, {"": set()}), key=slot_key):
            arms = sorted((a for a in layout.get(mode, {}).get(slot, ()) if is_pit_arm(a)), key=method_order)
            for task in tasks.get((claim.source, mode, slot), [""]) if claim.source == "posttrain" else [""]:
                out += [(mode, slot, task, arm) for arm in arms or ["pit"]]
    return out


def claims_table(results: str | Path) -> pd.DataFrame:
    """The claims table: one row per claim x (mode, slot, LoRA task) x PIT arm (module docstring)."""
    values, tasks = measure(results)
    rows = [
        claim_row(c, mode, slot, task, arm, values.get((c.id, mode, slot, task), {}))
        for c in CLAIMS
        for mode, slot, task, arm in cells(c, values, tasks)
    ]
    return pd.DataFrame(rows)


def table_notes() -> list[str]:
    """How each metric is computed (printed under the Markdown table)."""
    seen = {}
    for c in CLAIMS:
        seen.setdefault(c.metric, c.how)
    return [
        "Verdicts: `supported` = the interval of arm - TT excludes 0 on the paper's side (`direction`), "
        "`contradicted` = it excludes 0 on the other side, `inconclusive` = it covers 0 (not resolved at this "
        "scale and seed count, not 'no effect'); `n = 1, no interval` = one seed; `not testable` / `not measured` "
        "say why no test was possible.",
        "\n".join(f"- `{metric}`: {how}." for metric, how in seen.items()),
    ]

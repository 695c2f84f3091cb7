"""What real tied models show (REPORT.md's first findings for a profile with real teachers: teacher slots declared as
a GGUF model, config/real.yaml, docs/real.md). Every number comes from the run folders through the per-seed table
(pit.reporting.per_seed), the teacher-gap table (pit.reporting.study_tables) and the teachers' own files:

- the teacher: its release (package, version, quantisation, GGUF sha256) from resources/teachers/<slot>/provenance.json,
  and its own scores (results/teachers/<slot>/eval/<task>.json: pass@1 / exact match on the evaluated sets);
- the starting cost of each init: the first training step's loss of the arm minus TT's (the same first batch: arms of
  one seed read the same windows), paired by seed, mean over the seeds both ran (an arm with fewer seeds, e.g.
  pit-head, is compared with TT on its own seeds only);
- the trajectories: the gap of the primary PIT arm to the matched-start control and to TT at the first and the last
  validation step, with the 95% interval over seeds (none with one seed);
- consistency: Delta_TI (max over training) and the raw-anchor cosine distance of TT, PIT and untied at the end.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from pit.io import read_json
from pit.reporting.claims import Index, finite, paired
from pit.reporting.tables import METHOD_NAME, method_order


def real_slots(config: dict) -> list[str]:
    """The teacher slots of real pretrained models (declared as a GGUF model)."""
    return [s for s, e in config["pretrain"]["teacher_slots"].items() if "gguf" in e]


def _mean(values: dict) -> float:
    v = list(finite(values).values())
    return sum(v) / len(v) if v else math.nan


def _cost(first: dict, arm: str) -> float:
    """Mean over shared seeds of arm's first-step loss minus TT's."""
    diffs = paired(first.get(arm, {}), first.get("tt", {}))
    return sum(diffs) / len(diffs) if diffs else math.nan


def teacher_line(slot: str, resources: Path, results: Path) -> str:
    """The teacher's release and its own scores, in one line."""
    prov_path = resources / "teachers" / slot / "provenance.json"
    prov = read_json(prov_path) if prov_path.is_file() else {}
    scores = []
    for f in sorted((results / "teachers" / slot / "eval").glob("*.json")):
        r = read_json(f)
        if "task" in r and not f.name.endswith(".lm_eval.json"):
            value = r.get("pass@1", r.get("accuracy"))
            if value is not None:
                scores.append(f"{r['task']} {value:.3g}% of {r.get('n', '?')}{' (stand-in)' * bool(r.get('standin'))}")
    release = (
        f"{prov.get('gguf_file', '?')} from `{prov.get('package', '?')}=={prov.get('version', '?')}` "
        f"({prov.get('quantization', '?')}, sha256 {str(prov.get('gguf_sha256', '?'))[:12]}..., dequantised to "
        f"{prov.get('dequantised_dtype', '?')})"
        if prov
        else "release unknown (no provenance.json)"
    )
    return f"- **{slot}**: {release}; its own scores: {', '.join(scores) or 'not evaluated'}."


def starting_costs(index: Index, slot: str) -> str:
    """Each arm's first training-step loss minus TT's (the cost of its init on the first batch)."""
    first = index.runs("teacher", slot, "", "first_loss")
    tt = _mean(first.get("tt", {}))
    arms = sorted(first, key=method_order)
    parts = [f"{METHOD_NAME.get(a, a)} {_cost(first, a):+.2f}" for a in arms if a != "tt" and first[a]]
    return f"  - starting cost (first-step loss minus TT's {tt:.3f} nats): {', '.join(parts)}."


def gap_text(gaps: pd.DataFrame, slot: str, ref: str, arm: str = "pit") -> str:
    """The gap arm - ref at the first and the last validation step, with the interval where there are seeds."""
    part = gaps[(gaps["slot"] == slot) & (gaps["ref"] == ref) & (gaps["arm"] == arm)].sort_values("step")
    if part.empty:
        return ""

    def at(r) -> str:
        ci = "" if math.isnan(r.gap_ci_low) else f" [{r.gap_ci_low:.2f}, {r.gap_ci_high:.2f}]"
        return f"{r.gap:+.2f}{ci} at step {r.step}"

    first, last = part.iloc[0], part.iloc[-1]
    n = int(last["n"])
    seeds = f"n = {n}" + (": no interval" if n < 2 else ", 95% t-intervals over seeds")
    return f"{METHOD_NAME.get(arm, arm)} - {METHOD_NAME.get(ref, ref)}: {at(first)}, {at(last)} ({seeds})"


def consistency(index: Index, slot: str) -> str:
    """Delta_TI and the raw-anchor cosine distance of TT, PIT and untied at the end."""
    parts = []
    for arm in ("tt", "pit", "untied"):
        dti = _mean(index.runs("teacher", slot, "", "max_delta_ti").get(arm, {}))
        raw = _mean(index.runs("teacher", slot, "", "raw_cosine").get(arm, {}))
        if math.isfinite(dti) or math.isfinite(raw):
            parts.append(f"{METHOD_NAME.get(arm, arm)} Delta_TI {dti:.3g}, raw cosine {raw:.3g}")
    return f"  - consistency at the end: {'; '.join(parts)}." if parts else ""


def real_teacher_findings(config: dict, results: Path) -> list[str]:
    """REPORT.md's block on the real teachers (module docstring); [] for a profile without one."""
    slots = real_slots(config)
    if not slots or not (results / "pretrain").is_dir():
        return []
    from pit.reporting.per_seed import per_seed_table
    from pit.reporting.study_tables import teacher_gap

    seeds = per_seed_table(results, ("pretrain", "diagnostics"))
    index, gaps = Index(seeds), teacher_gap(seeds)
    lines = ["What real tied models show (continued pretraining of each teacher; every number from this run):", ""]
    for slot in slots:
        lines += [teacher_line(slot, results.parent / "resources", results), starting_costs(index, slot)]
        trajectories = [t for t in (gap_text(gaps, slot, r) for r in ("tt-matched", "tt")) if t] if len(gaps) else []
        if trajectories:
            lines.append(f"  - trajectories of the validation loss: {'; '.join(trajectories)}.")
        lines.append(consistency(index, slot))
    return [line for line in lines if line] + [""]


def real_summary(config: dict, results: Path) -> list[str]:
    """Three lines for the README, from the same numbers as `real_teacher_findings`: per teacher the starting cost of
    the paper's init and of pit-head, and where PIT ends against the matched-start control and against TT."""
    from pit.reporting.per_seed import per_seed_table
    from pit.reporting.study_tables import teacher_gap

    seeds = per_seed_table(results, ("pretrain",))
    index, gaps = Index(seeds), teacher_gap(seeds)
    lines = []
    for slot in real_slots(config):
        first = index.runs("teacher", slot, "", "first_loss")
        cost = {a: _cost(first, a) for a in ("pit", "pit-head")}
        ends = [t for t in (gap_text(gaps, slot, r) for r in ("tt-matched", "tt")) if t] if len(gaps) else []
        lines.append(
            f"- {slot}: PIT (T = I) starts {cost['pit']:+.2f} nats from the teacher, pit-head {cost['pit-head']:+.2f}; "
            f"{'; '.join(ends)}."
        )
    steps = int(gaps["step"].max()) if len(gaps) else 0
    n = int(gaps["n"].max()) if len(gaps) else len(config.get("seeds", [])) or 1  # seeds of the compared arms
    profile = config.get("profile", "default")
    lines.append(
        f"- After {steps} steps ({n} paired seed{'s' if n != 1 else ''}, profile {profile}) this is the early phase "
        f"only: docs/real.md says what it can and cannot show; docs/results/{profile}/REPORT.md has every number."
    )
    return lines

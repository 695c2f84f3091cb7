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
- consistency: Delta_TI (max over training) and the raw-anchor cosine distance of TT, PIT and untied at the end;
- with a `decision` (docs/real.md), its answer from the decision tables (pit.reporting.decision) and the claims
  table's primary row: the end-of-training difference with its verdict, the gap along training, the tokens to
  parity and the final models' scores (`decision_lines`), and the generations side by side (`generations_section`).
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


def _csv(tables: Path, name: str) -> pd.DataFrame | None:
    path = tables / f"{name}.csv"
    return pd.read_csv(path) if path.is_file() and path.read_text().strip() else None


def _tokens(x: float) -> str:
    return "beyond the budget" if not math.isfinite(x) else f"{x:,.0f}"


def primary_line(tables: Path, d: dict) -> str:
    """The claims table's primary row of the loss claim: arm - ref at the end, exact test, verdict or mde."""
    from pit.reporting.claims import read_claims

    claims = read_claims(tables)
    if claims is None:
        return ""
    rows = claims[
        (claims["claim"] == "teacher_val_loss") & (claims["role"] == "primary") & (claims["slot"] == d["slot"])
    ]
    if rows.empty:
        return ""
    r = rows.iloc[0]
    mde = (
        f"; the smallest effect these seeds detect with 80% power: {r.mde:.3g} nats"
        if r.verdict == "inconclusive"
        else ""
    )
    return (
        f"- Primary (declared): {r.arm} - {r.ref} validation loss at the end = {r['diff']:+.3f} nats, exact 95% "
        f"[{r.diff_ci_low:.3f}, {r.diff_ci_high:.3f}], exact sign-flip p = {r.p:.3g} over {int(r.n)} paired seeds: "
        f"**{r.verdict}**{mde}."
    )


def trajectory_line(tables: Path) -> str:
    """The gap at the start, halfway and at the end of training (trajectory table)."""
    t = _csv(tables, "trajectory")
    if t is None:
        return ""
    picks = [t.iloc[0], t.iloc[(len(t) - 1) // 2], t.iloc[-1]]
    parts = [
        f"{_tokens(r.tokens)} tokens {r.gap:+.3f} [{r.exact_low:.3f}, {r.exact_high:.3f}] ({r.reading})" for r in picks
    ]
    return _bullet(f"Along training ({t.iloc[0].arm} - {t.iloc[0].ref}, exact 95%, Holm over {len(t)} steps)", parts)


def parity_line(tables: Path) -> str:
    """Tokens to parity per threshold: median over seeds with its interval, and how many seeds got there."""
    t = _csv(tables, "parity")
    if t is None:
        return ""
    parts = []
    for r in t.itertuples():
        within = f"{int(r.reached)} of {int(r.n)} seeds within the budget"
        ci = "" if math.isnan(r.low) else f" [{_tokens(r.low)}, {_tokens(r.high)}] ({r.coverage:.1%})"
        parts.append(f"within {r.threshold:g} nats: median {_tokens(r.median_tokens)}{ci}, {within}")
    budget = _tokens(t.iloc[0].budget_tokens)
    return _bullet(f"Tokens to parity (the arm stays within the threshold to the end; budget {budget} tokens)", parts)


def _bullet(head: str, parts: list[str]) -> str:
    """One Markdown bullet: the head, then the parts separated by semicolons."""
    return f"- {head}: " + "; ".join(parts) + "."


def scores_line(tables: Path) -> str:
    """The teacher and the final models on each task: pass@1 with its resolution, NLL, arm - ref."""
    t = _csv(tables, "final_scores")
    if t is None:
        return ""
    lines = []
    for task, part in t.groupby("task", sort=False):
        models = part[~part["row"].str.contains(" - ")]
        diffs = part[part["row"].str.contains(" - ")]
        res = part["resolution_points"].dropna()
        head = f"{task} ({int(100 / res.iloc[0])} problems, one = {res.iloc[0]:.2g} points)" if len(res) else task
        said = [f"{r.row} {r.score:.3g}% / NLL {r.nll:.3f} (n = {int(r.n)})" for r in models.itertuples()]
        tests = [f"{r.row}: NLL {r.nll:+.3f} [{r.nll_low:.3f}, {r.nll_high:.3f}], p = {r.nll_p:.3g}; pass@1 "
                 f"{r.score:+.3g} points" for r in diffs.itertuples()]  # fmt: skip
        lines.append(f"- {head}, final models as they are (pass@1 / per-token NLL of the reference solutions): "
                     f"{', '.join(said)}; paired: {'; '.join(tests)}.")  # fmt: skip
    return "\n".join(lines)


def decision_lines(tables: Path, d: dict) -> list[str]:
    """The decision's answer (module docstring), one line per table; [] where none of them ran."""
    lines = [primary_line(tables, d), trajectory_line(tables), parity_line(tables), scores_line(tables)]
    lines = [line for part in lines if part for line in part.split("\n")]
    if not lines:
        return []
    head = f"The decision (declared in the profile: convert {d['slot']} to `{d['arm']}` or keep `{d['ref']}`?):"
    return [head, "", *lines, ""]


def generations_section(results: Path, d: dict) -> list[str]:
    """REPORT.md's generations side by side: per prompt, each model's greedy continuation
    (results/posttrain/generations)."""
    files = {p.stem: read_json(p) for p in sorted((results / "posttrain" / "generations").glob("*.json"))}
    if not files:
        return []
    order = [m for m in ("teacher", d.get("arm"), d.get("ref")) if m in files] + sorted(
        set(files) - {"teacher", d.get("arm"), d.get("ref")}
    )
    lines = ["## Generations side by side", "",
             "Greedy continuations of the profile's prompts (`decision.prompts`) by the teacher and the first seed "
             "of each compared arm (results/posttrain/generations/).", ""]  # fmt: skip
    prompts = [row["prompt"] for row in files[order[0]]["rows"]]
    for i, prompt in enumerate(prompts, 1):
        lines += [f"**Prompt {i}**", "", *fenced(prompt.rstrip()), ""]
        for name in order:
            completion = files[name]["rows"][i - 1]["completion"]
            shown = (prompt + completion).rstrip()
            blank = " (then only whitespace)" if completion.strip() == "" and completion else ""
            lines += [f"- {name}{blank}:", "", *fenced(shown), ""]
    return lines


def fenced(text: str) -> list[str]:
    """`text` in a code fence longer than any run of backticks in it (a completion may hold a fence of its own)."""
    import re

    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return [fence + "python", text, fence]


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
    decision = decision_lines(results / "tables", config["decision"]) if config.get("decision") else []
    for slot in slots:
        lines += [teacher_line(slot, results.parent / "resources", results), starting_costs(index, slot)]
        trajectories = [t for t in (gap_text(gaps, slot, r) for r in ("tt-matched", "tt")) if t] if len(gaps) else []
        if trajectories:
            lines.append(f"  - trajectories of the validation loss: {'; '.join(trajectories)}.")
        lines.append(consistency(index, slot))
    return decision + [line for line in lines if line] + [""]


def decision_summary(config: dict, tables: Path) -> list[str]:
    """The README's lines of a profile with a `decision`: its answer as REPORT.md gives it (decision_lines), and
    what ran; from the tables alone, so that a test can regenerate them from docs/results/<profile>/tables."""
    lines = [line for line in decision_lines(tables, config["decision"])[2:] if line]
    tokens = _tokens(_csv(tables, "parity").iloc[0].budget_tokens)
    n = int(_csv(tables, "trajectory")["n"].max())
    profile = config.get("profile", "default")
    said = f"docs/real.md says what this can and cannot show; docs/results/{profile}/REPORT.md has every number"
    return [*lines, f"- {n} paired seeds of {tokens} training tokens each (profile {profile}); {said}."]


def real_summary(config: dict, results: Path) -> list[str]:
    """Three lines for the README, from the same numbers as `real_teacher_findings`: per teacher the starting cost of
    the paper's init and of pit-head, and where PIT ends against the matched-start control and against TT."""
    from pit.reporting.per_seed import per_seed_table
    from pit.reporting.study_tables import teacher_gap

    if config.get("decision"):  # the decision's answer, as REPORT.md gives it
        return decision_summary(config, results / "tables")
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

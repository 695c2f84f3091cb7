"""The paper's tables from run folders, ours beside the paper's (Markdown, CSV, LaTeX); `pit table`.

Every table names the profile that produced it; the paper's numbers come from
pit/reporting/paper_values.yaml (cited to table and row). Runs are found by their folder layout
`<root>/<mode>/<slot>/<interface>/` (results/pretrain, results/diagnostics, results/posttrain).
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from pit.errors import PitError
from pit.io import file_set_complete, json_text, read_json, write_file_set
from pit.reporting.paper import paper_value, paper_values
from pit.sidecars import check_object

MODE_ORDER = {"teacher": 0, "scratch": 1}
# arms: TT, PIT with the paper's settings, extra PIT arms (`pretrain.teacher_arms` / `scratch_arms`, e.g. pit-head,
# pit-z), untied
METHOD_ORDER = {"tt": 0, "tt-matched": 0.5, "pit": 1, "pit-head": 2, "pit-z": 2.2, "untied": 3}
METHOD_NAME = {"tt": "TT", "tt-matched": "TT-matched", "pit": "PIT", "pit-head": "PIT-head", "pit-z": "PIT-Z",
               "untied": "Untied"}  # fmt: skip


def method_order(kind: str) -> float:
    return METHOD_ORDER.get(kind, 2.5 if kind.startswith("pit-") else 9)


TASK_ORDER = {"mbpp": 0, "humaneval": 1, "gsm8k": 2, "svamp": 3}  # the paper's column order


def slot_key(slot: str) -> tuple[float, str]:
    """Slots in size order: '256m' < '1.3b' (names that are not sizes sort after, by name)."""
    units = {"m": 1e6, "b": 1e9}
    try:
        return float(slot[:-1]) * units[slot[-1].lower()], slot
    except (KeyError, ValueError, IndexError):
        return float("inf"), slot


def runtime_seconds(text: str | None) -> float | None:
    """A runtime as the paper writes it ('1h 24m') in seconds (5040.0); None stays None."""
    if text is None:
        return None
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    return sum(float(part[:-1]) * units[part[-1]] for part in str(text).split())


def format_duration(seconds: float | None) -> str:
    """Seconds as a person reads them in the .md/.tex/.html tables: 5040 -> '1h 24m', 7.3 -> '7.3s', None -> ''."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return ""
    if seconds < 60:
        return f"{seconds:.2g}s" if seconds < 10 else f"{seconds:.0f}s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes}m {rest:02d}s"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours}h {minutes:02d}m"


class Run(NamedTuple):
    """One run's file: <root>/<mode>/<slot>/<interface>/<file>, or .../<interface>/seed<k>/<file> in a profile with
    `seeds` (seed None for the unseeded layout)."""

    mode: str
    slot: str
    interface: str
    seed: int | None
    path: Path


def _run_of(root: Path, path: Path, name: str) -> Run:
    parts = path.relative_to(root).parts
    mode, slot, interface = parts[:3]
    seeded = len(parts) > 3 and re.fullmatch(r"seed\d+", parts[3]) and len(parts) - 4 == len(Path(name).parts)
    return Run(mode, slot, interface, int(parts[3][4:]) if seeded else None, path)


def run_paths(root: str | Path, name: str) -> list[Run]:
    """Every <root>/<mode>/<slot>/<interface>/[seed<k>/]<name>, in table order (mode, slot size, arm, seed)."""
    root = Path(root)
    found = [_run_of(root, p, name) for pattern in (f"*/*/*/{name}", f"*/*/*/seed*/{name}") for p in root.glob(pattern)]
    found = [r for r in found if r.seed is not None or len(r.path.relative_to(root).parts) == 3 + len(Path(name).parts)]
    if not found:
        raise PitError(
            f"no {name} under {str(root)!r}: run the stage that makes them first "
            f"(expected {root}/<mode>/<slot>/<interface>/[seed<k>/]{name})"
        )
    return sorted(
        found, key=lambda r: (MODE_ORDER.get(r.mode, 9), slot_key(r.slot), method_order(r.interface), r.seed or 0)
    )


def find_runs(root: str | Path, filename: str) -> list[tuple[Run, dict]]:
    """(run, json) for every <root>/<mode>/<slot>/<interface>/[seed<k>/]<filename>, in table order; each a JSON
    object (pit.sidecars.check_object: else a PitError naming the file)."""
    what = f"a run's {Path(filename).name}"
    return [(run, check_object(read_json(run.path), repr(str(run.path)), what)) for run in run_paths(root, filename)]


NUMBER = (float, type(None))  # a JSON number, or null where a value was not measured
SUMMARY_NUMBERS = ("first_step_loss", "final_train_loss", "final_train_ppl", "val_loss", "runtime_s")
ANCHOR_KEYS = ("cosine_distance", "procrustes_error", "principal_angle")
LENS_KEYS = ("kl_ratio", "ce_gap", "mean_kl_bits", "mean_ce_bits", "final_entropy_bits")
CONTEXT_FREE_KEYS = ("unigram_entropy", "span_entropy", "grad_norm")


def check_summary(summary: dict, run: Run, required: tuple[str, ...] = ()) -> dict:
    """A pretraining run's summary.json as the tables read it: SUMMARY_NUMBERS (the `required` ones present) numbers
    or null, `diverged` true, false, null or the reason the run was stopped (`pit train` writes why a run that
    diverged ended, e.g. "stopped after 20 consecutive non-finite steps from step 62"), `mode` a string; else a
    PitError naming the file."""
    diverged = (bool, str, type(None))
    optional = {**dict.fromkeys(SUMMARY_NUMBERS, NUMBER), "diverged_at_step": NUMBER, "diverged": diverged, "mode": str}
    return check_object(summary, repr(str(run.path)), "the summary.json of `pit train`",
                        dict.fromkeys(required, NUMBER), optional)  # fmt: skip


def check_diagnostics(d: dict, run: Run, required: bool = False) -> dict:
    """A diagnostics.json as the tables read it: `delta_ti` a number, `raw` and `polar` objects of ANCHOR_KEYS
    numbers, `lens` an object of LENS_KEYS numbers and `context_free` one of CONTEXT_FREE_KEYS numbers (each present
    when `required`, but `lens` and `context_free`, newer than the first diagnostics); else a PitError naming the
    file and the key."""
    label, what = repr(str(run.path)), "the diagnostics.json of `pit diagnose`"
    parts = {"delta_ti": NUMBER, "raw": dict, "polar": dict}
    newer = {"lens": (dict, type(None)), "context_free": (dict, type(None))}
    check_object(d, label, what, parts if required else {}, {**parts, **newer})
    for part, keys in (
        ("raw", ANCHOR_KEYS),
        ("polar", ANCHOR_KEYS),
        ("lens", LENS_KEYS),
        ("context_free", CONTEXT_FREE_KEYS),
    ):
        numbers = dict.fromkeys(keys, NUMBER)
        if d.get(part) is not None:
            check_object(d[part], f"{label} {part}", what, numbers if required and part not in newer else {}, numbers)
    return d


def seed_columns(run: Run) -> dict:
    """The `seed` column of a table row: present only for runs of a seeded profile."""
    return {} if run.seed is None else {"seed": run.seed}


def table1(runs_root: str | Path) -> pd.DataFrame:
    """Table 1: first-step and final training loss, training PPL, validation loss and runtime per slot and arm.
    Runtimes in seconds, ours and the paper's: ours sums the optimizer steps' wall time (no evaluation, no
    checkpoints) on whatever machine ran them."""
    rows = []
    for run, s in find_runs(runs_root, "summary.json"):
        check_summary(s, run, SUMMARY_NUMBERS)
        mode, slot, kind = run.mode, run.slot, run.interface
        p = paper_value("table1", mode, slot, kind)
        rows.append(
            {
                "mode": mode,
                "slot": slot,
                "method": METHOD_NAME.get(kind, kind),
                **seed_columns(run),
                "first_loss": s["first_step_loss"],
                "train_loss": s["final_train_loss"],
                "train_ppl": s["final_train_ppl"],
                "val_loss": s["val_loss"],
                "runtime_s": s["runtime_s"],
                "paper_train_loss": p.get("loss"),
                "paper_train_ppl": p.get("ppl"),
                "paper_runtime_s": runtime_seconds(p.get("runtime")),
            }
        )
    return pd.DataFrame(rows)


def table2(diag_root: str | Path) -> pd.DataFrame:
    """Table 2: token-interface consistency, both anchor variants (raw Eqs. 1-2, polar Section 5.5)."""
    rows = []
    for run, d in find_runs(diag_root, "diagnostics.json"):
        check_diagnostics(d, run, required=True)
        mode, slot, kind = run.mode, run.slot, run.interface
        p = paper_value("table2", mode, slot, kind)
        row = {"mode": mode, "slot": slot, "method": METHOD_NAME.get(kind, kind), **seed_columns(run)}
        row["delta_ti"] = d["delta_ti"]
        for variant in ("raw", "polar"):
            for key, short in (
                ("cosine_distance", "cosine"),
                ("procrustes_error", "procrustes"),
                ("principal_angle", "angle"),
            ):
                row[f"{variant}_{short}"] = d[variant][key]
        lens = d.get("lens") or {}  # absent in diagnostics written before the logit-lens measures
        row.update(lens_kl_bits=lens.get("mean_kl_bits"), lens_ce_bits=lens.get("mean_ce_bits"))
        row.update(paper_cosine=p.get("cosine"), paper_procrustes=p.get("procrustes"), paper_angle=p.get("angle"))
        rows.append(row)
    return pd.DataFrame(rows)


def table3() -> pd.DataFrame:
    """Table 3: architectures and parameter counts (`pit arch`)."""
    from pit.models.arch import architecture_table

    rows = []
    for r in architecture_table(paper=paper_values()["table3"]):
        p = r.get("paper", {})
        rows.append(
            {
                "model": r["model"],
                "paper_name": p.get("name"),
                "layers": r["layers"],
                "d_model": r["d_model"],
                "n_heads": r["n_heads"],
                "n_kv_heads": r["n_kv_heads"],
                "d_head": r["d_head"],
                "kv_width": r["kv_width"],
                "d_ff": r["d_ff"],
                "params_m": r["params"] / 1e6,
                "paper_params_m": p["params"] / 1e6 if p else None,
                "embed_pct": r["embed_pct"],
                "paper_embed_pct": p.get("embed_pct"),
                "pit_extra_params": r["pit_extra_params"],
            }
        )
    return pd.DataFrame(rows)


def metric_percent(result: dict) -> float:
    """pass@1 (code) or exact-match accuracy (math) of a `pit evaluate` result, in %."""
    return 100.0 * result.get("pass@1", result.get("accuracy"))


def _by_task_order(names) -> list[str]:
    """Task names in the paper's column order (unknown tasks after, by name)."""
    return sorted(names, key=lambda name: (TASK_ORDER.get(name, 9), name))


def _lora_record(task_dir: Path) -> tuple[dict, list[dict]]:
    """One LoRA run <run>/<task>/: its scores and its base model's (in %), the in-domain gain, the reference
    NLL of both (nats/token; None in results written before it existed) and its in-domain gain (base - LoRA),
    the side effects; and the raw `pit evaluate` results it read."""
    task = task_dir.name
    evals, base = (
        {f.stem: read_json(f) for f in (task_dir / sub).glob("*.json") if f.stem.count(".") == 0}  # not *.lm_eval.json
        for sub in ("eval", "base")
    )
    if task not in evals or task not in base:
        raise PitError(f"{task_dir}: expected eval/{task}.json and base/{task}.json (run the evaluate rule)")
    evals = {t: evals[t] for t in _by_task_order(evals)}
    record = {
        "scores": {t: metric_percent(r) for t, r in evals.items()},
        "base": {t: metric_percent(r) for t, r in base.items()},
        "gain": metric_percent(evals[task]) - metric_percent(base[task]),
        "nll": {t: r.get("nll") for t, r in evals.items()},
        "base_nll": {t: r.get("nll") for t, r in base.items()},
        "side_effects": read_json(task_dir / "side_effects.json"),
        "problems": {t: r["n"] for t, r in evals.items()},
    }
    lora_nll, base_nll = evals[task].get("nll"), base[task].get("nll")
    record["nll_gain"] = None if lora_nll is None or base_nll is None else base_nll - lora_nll
    return record, [*evals.values(), *base.values()]


def posttrain_runs(post_root: str | Path) -> list[dict]:
    """Every post-training run folder <root>/<mode>/<slot>/<interface>/ as one record: per LoRA task
    the scores of the updated model (<task>/eval/) and of its base (<task>/base/) on the same sets,
    the in-domain gain and the side effects (results/posttrain layout, docs/posttraining.md)."""
    runs = []
    for run in run_paths(post_root, "*/side_effects.json"):
        mode, slot, kind, seed = run.mode, run.slot, run.interface, run.seed
        if runs and (runs[-1]["mode"], runs[-1]["slot"], runs[-1]["interface"], runs[-1]["seed"]) == run[:4]:
            continue
        folder = run.path.parent.parent
        tasks = {d.name: d for d in folder.iterdir() if (d / "side_effects.json").is_file()}
        lora, results = {}, []
        for task in _by_task_order(tasks):
            lora[task], read = _lora_record(tasks[task])
            results += read
        runs.append(
            {
                "mode": mode,
                "slot": slot,
                "interface": kind,
                "seed": seed,
                "lora": lora,
                "standin": sorted({r["task"] for r in results if r.get("standin")}),
                "sandbox": sorted({r.get("sandbox", "not recorded") for r in results if "pass@1" in r}),
                "problems": {t: n for record in lora.values() for t, n in record["problems"].items()},
            }
        )
    return runs


def _run_columns(run: dict) -> dict:
    row = {"mode": run["mode"], "slot": run["slot"], "method": METHOD_NAME.get(run["interface"], run["interface"])}
    if run["seed"] is not None:
        row["seed"] = run["seed"]
    return row


def _table4_scores_row(run: dict) -> dict:
    p = paper_value("table4", run["mode"], run["slot"], run["interface"])
    row = _run_columns(run)
    for r in run["lora"].values():
        for t, v in r["scores"].items():
            row[t] = v
            row[f"paper_{t}"] = p.get(t)
        for t, v in r["nll"].items():
            row[f"nll_{t}"] = v
            row[f"base_nll_{t}"] = r["base_nll"].get(t)
    row.update({f"problems_{t}": n for t, n in run["problems"].items()})
    row["standin_data"] = ", ".join(run["standin"]) or "none"
    row["sandbox"] = ", ".join(run["sandbox"]) or "no code run"
    return row


def _table4_side_effects_row(run: dict) -> dict:
    row = _run_columns(run)
    for task, r in run["lora"].items():
        fx = r["side_effects"]
        row[f"gain_{task}"] = r["gain"]
        row[f"nll_gain_{task}"] = r["nll_gain"]
        row[f"kl_{task}"] = fx["kl"]
        row[f"val_loss_change_{task}"] = fx["val_loss_change"]
        row[f"interface_change_{task}"] = max(fx["embedding_change"], fx["head_change"])
    return row


def table4_scores(post_root: str | Path) -> pd.DataFrame:
    """Table 4, scores (post-training, Section 5.6): each LoRA's scores in-domain / out-of-domain (%), the
    paper's beside them, the reference solutions' NLL (nats/token, pit.evaluation.likelihood) of the LoRA model
    (`nll_<task>`) and of its base (`base_nll_<task>`), the problems scored per set (`problems_<task>`) and which
    sets were offline stand-ins."""
    return pd.DataFrame([_table4_scores_row(run) for run in posttrain_runs(post_root)])


def table4_side_effects(post_root: str | Path) -> pd.DataFrame:
    """Table 4, side effects: per LoRA task the in-domain gain over the base model (points), the NLL gain
    (base - LoRA, > 0: the LoRA helped), the KL of the next-token distributions and the validation-loss change
    on held-out pretraining text, and the relative change of the interface (max of ||dE||/||E||,
    ||dW_out||/||W_out||)."""
    return pd.DataFrame([_table4_side_effects_row(run) for run in posttrain_runs(post_root)])


def _decoding_words(decoding: dict) -> str:
    """A score file's decoding in words: '0-shot, greedy, at most 32 new tokens (batch 8)'."""
    how = "greedy" if decoding["greedy"] else f"sampled at temperature {decoding.get('temperature')}"
    extra = [f"{k} {decoding[k]}" for k in ("top_k", "top_p") if decoding.get(k) is not None]
    return (
        f"{decoding['shots']}-shot, {', '.join([how, *extra])}, at most {decoding['max_new_tokens']} new tokens "
        f"(batch {decoding['batch_size']})"
    )


def decoding_notes(post_root: str | Path) -> list[str]:
    """The note under Table 4 (scores): how its scores were made, from the `protocol` of every score file under
    `post_root` (<run>/<task>/{eval,base}/<set>.json): the decoding, each set's stop strings and prompt template
    (its sha256; the templates are in the files and docs/evaluation.md), and how many files record none."""
    files = sorted(f for f in Path(post_root).rglob("*.json") if f.parent.name in ("eval", "base"))
    files = [f for f in files if "." not in f.stem]  # not <set>.lm_eval.json
    protocols = [p for p in (read_json(f).get("protocol") for f in files) if p and p.get("decoding")]
    if not protocols:
        return ["Decoding: not recorded (score files written before they carried their `protocol`)."]
    ways = sorted({_decoding_words(p["decoding"]) for p in protocols})
    order = _by_task_order({p["task"].removesuffix("-standin") for p in protocols})  # the paper's column order
    sets = {p["task"]: p for p in sorted(protocols, key=lambda p: order.index(p["task"].removesuffix("-standin")))}
    stops = "; ".join(f"{t}: {', '.join(f'`{json.dumps(s)}`' for s in p['decoding']['stop'])}" for t, p in sets.items())
    prompts = ", ".join(f"{t} {p['prompt']['template_sha256'][:12]}" for t, p in sets.items())
    lacking = len(files) - len(protocols)
    return [
        f"Decoding (the `protocol` of each score file, `<set>.json` and `<set>.lm_eval.json`): {'; '.join(ways)}; "
        f"one completion per problem (pass@1); it stops at the first of the set's stop strings ({stops}). Prompts: "
        f"each set's template, no examples before it (sha256 {prompts}; docs/evaluation.md)."
        + (f" {lacking} of {len(files)} score files record no protocol (written before it existed)." if lacking else "")
    ]


RUN_NOTES = {"table4_scores": decoding_notes}  # notes read from the runs a table is built from (`pit table`)


def zero_scores_note(df: pd.DataFrame) -> list[str]:
    """Table 4 (scores): how many of its scores are 0, counted from the table itself (the score columns: each
    `<task>` with a `problems_<task>` beside it): 'Every score above is 0' only when every one is, else the count
    and the tasks whose scores are not all 0; [] for a table without scores."""
    tasks = [c for c in df.columns if f"problems_{c}" in df.columns]
    counts = {t: (int((df[t] == 0).sum()), int(df[t].notna().sum())) for t in tasks}
    zero, total = sum(z for z, _ in counts.values()), sum(n for _, n in counts.values())
    if not total:
        return []
    if zero == total:
        return [f"Every score above is 0 ({total} scores)."]
    others = ", ".join(f"{t} {n - z} of {n}" for t, (z, n) in counts.items() if z < n)
    return [f"{zero} of {total} scores above are 0; not 0: {others}."]


DATA_NOTES = {"table4_scores": zero_scores_note}  # notes computed from the table's own rows (`write_table`)


BUILDERS = {  # claims: pit/reporting/claims.py
    "table1": table1,
    "table2": table2,
    "table3": table3,
    "table4_scores": table4_scores,
    "table4_side_effects": table4_side_effects,
}
TITLES = {
    "claims": "Claims. The paper's claims tested at this scale. Each claim has declared `primary` rows (the paper's "
    "configuration) that decide its verdict, and exploratory `secondary` rows. Per arm the mean over seeds and its 95% "
    "half-width (`*_ci`); `diff` = arm - `ref` paired by seed with its exact 95% interval (`diff_ci_*`) and the "
    "interval at the family's level (`adj_ci_*`), the exact p (sign-flip; Fisher for one rate's diverged runs), the "
    "Holm-adjusted p over the claim's primary rows or over its secondary rows (`p_holm`, `family` = their number), "
    "the minimal detectable effect of inconclusive primary rows (`mde`), seeds `dropped` (diverged or undefined), "
    "`fragile` (the verdict changes when one seed is dropped); `untied_*` = the untied control (untied - ref) and "
    "whether it is valid (`control_valid`), `control_*` = the no-re-warm control of the early rise; `evidence` says "
    "what kind of evidence a row is. Verdicts hold for this scale only",
    "table1": "Table 1. Effects of weight tying on LM training (first-step and final training loss, training PPL, "
    "validation loss, runtime)",
    "table2": "Table 2. Token-interface consistency (0 = perfect agreement); raw = anchors of Eqs. 1-2, "
    "polar = polar factors (Section 5.5); lens_kl_bits / lens_ce_bits = logit-lens KL to the final layer (mean over "
    "layers before the last) and cross-entropy on the next token (mean over all layers), in bits",
    "table3": "Table 3. Scratch-model architectures (V = 32,000, tied embeddings)",
    "table4_scores": "Table 4 (scores). LoRA post-training: pass@1 (MBPP, HumanEval) and exact match (GSM8K, "
    "SVAMP), in %, and the reference solutions' NLL in nats/token",
    "table4_side_effects": "Table 4 (side effects). LoRA post-training: in-domain gain over the base model "
    "(points, and in NLL), and the update's side effects on held-out pretraining text and on the interface",
    "stability": "Stability. Scratch-mode learning-rate sweep: per learning rate and arm over seeds, diverged runs "
    "(k of n, the rate with its exact 95% interval, the median step at which they diverged), loss spikes (5 sigma "
    "above the median of the previous 20 steps) over the runs where they are defined (`spike_runs`: not diverged "
    "before the count starts), non-finite (skipped) steps, the largest regression of the smoothed loss (mean) and "
    "the final validation loss of the finite runs (mean and 95% half-width); `first_lr_most_diverged`: the lowest "
    "rate at which most of the arm's runs diverged",
    "teacher_gap": "Teacher mode, continued pretraining: the validation-loss gap of each arm to its reference (TT, and "
    "for the PIT arms the matched-start control, TT from the teacher's polar factor: the same function at step 0), "
    "paired by seed with its 95% interval, at every validation step; `tail_start`: where the constant-rate tail "
    "begins. Does the gap close as training goes on?",
    "frontier": "Side-effect frontier: per LoRA learning rate, the mean in-domain gain (reference NLL before - after, "
    "nats/token) and KL on held-out pretraining text over seeds; KL at the cell's matched gain",
    "trajectory": "The decision along training: the arm's validation loss minus the reference's at every validation "
    "step (tokens = step x tokens per step), paired by seed",
    "parity": "The decision: tokens to parity, per seed and threshold, and the median over seeds",
    "final_scores": "The decision: the teacher and the final models as they are, on the decision's tasks",
}


# the notes under each table: what a reader needs to read its columns (REPORT.md, .md, .html, .json sidecar)
TABLE_NOTES = {
    "table2": [
        "`raw` compares the anchors of Eqs. 1-2 (B_in = E, B_out = pinv(W_out)); `polar` compares the "
        "orthonormal polar factors of E and W_out^T, as Section 5.5 words it. PIT reads 0 in both because "
        "pinv(T Z^T) = Z T^-1: these structural zeros are the only entries comparable with the paper.",
        "An exactly tied TT (W_out = E^T) has principal angle 0 in both variants, so the paper's non-zero TT angles "
        "(0.009-0.069 rad) come from neither reading, and its TT cosine and Procrustes values cannot be matched "
        "either: raw Procrustes grows like the square of E's singular values (pinv(E^T) vs E), so our raw TT values "
        "are on another scale. Do not read the TT columns against the paper's.",
        "Principal angles are computed from the sine side in float64: an exactly consistent interface reads "
        "about 1e-7 rad or below. The paper's PIT angles (3-5e-4 rad) are the resolution of arccos in FP32 near 1 "
        "(arccos(1 - 6e-8) = 3.5e-4).",
    ],
    "table3": [
        "The XL row reads Eq. 17 with q/o projections of width d = 1600 and key/value width d/4 = 400 (20 heads of "
        "80, 5 KV heads): 1167.5M parameters, the paper's 1.17B. With 24 heads, d_head = floor(1600/24) = 66 gives "
        "1164.9M, which rounds to 1.16B. These are parameter counts from the architecture, computed exactly.",
    ],
    "table4_scores": [
        "Scores are in %: pass@1 from executing the unit tests in a sandbox (MBPP, HumanEval) and numeric exact "
        "match of the final answer (GSM8K, SVAMP); the paper calls all four exact-match accuracy. Each LoRA is "
        "evaluated in-domain (its own task) and out-of-domain.",
        "A score moves in steps of 100 / problems points, so a continuous measure sits beside it: `nll_<task>` "
        "(LoRA model) and `base_nll_<task>` (its base) = teacher-forced NLL of the set's reference solutions given "
        "the same prompts, in nats per reference token (pooled over the problems scored). Not a quantity of the paper. "
        "Sets in `standin_data` are offline stand-ins, not the real benchmarks; `problems_<task>` = problems "
        "scored in that set. One seed, no intervals.",
        "`sandbox` = where the code tasks' samples ran (every result JSON records it): `bubblewrap` (namespaces, a "
        "private file system), or `weak (opted in)` (no bubblewrap on that machine: the samples could read its "
        "files, so a wrong program that reads the answers passes; docs/evaluation.md).",
    ],
    "table4_side_effects": [
        "`gain_<task>` = the in-domain score minus the base model's, in points; `nll_gain_<task>` = base minus "
        "LoRA reference NLL in-domain (> 0: the LoRA made the references more likely).",
        "Side effects (not defined as a number in the paper) are measured on held-out pretraining text: "
        "`kl_<task>` = mean KL(p_before || p_after) of the next-token distributions (nats/token), "
        "`val_loss_change_<task>` = validation loss after minus before, `interface_change_<task>` = relative "
        "Frobenius change of E or W_out (0 when the interface is frozen). One seed, no intervals.",
    ],
    "table1": [
        "first_loss = training loss of the first step; train_loss = mean of the last `final_loss_window` steps; "
        "PPL = exp(loss). runtime_s sums the wall time of the optimizer steps only (no evaluation, checkpoints "
        "or start-up; in seconds in the CSV, formatted here), on the machine REPORT.md's provenance names, which "
        "other jobs shared; "
        "paper_runtime_s is the paper's runtime in the same unit. One seed per arm, no intervals: differences "
        "between arms carry no stated uncertainty.",
        "Teacher mode: PIT with the paper's init (T = I, Z = polar factor of E0) replaces the teacher's head "
        "W_out = E0^T = H U^T by U^T, so it does not start from the teacher's function (its first_loss against "
        "TT's says how far). PIT-head (`t_init: power`, "
        "T = H / sigma^2 with sigma^2 moved into the final norm) keeps the teacher's head exactly and changes "
        "only its input embedding (docs/models.md). Whether TT's loss rises early in teacher mode beyond its noise, "
        "and whether the controls that read the same batches (untied, TT without the re-warm) rise the same way, is "
        "the claims table's early-rise row (`early_rise_excess`, `untied_*`, `control_*`), not this table.",
        "The paper does not give its budget, learning rate or hardware: compare shapes and orderings, not "
        "absolute values, unless the paper profile ran.",
    ],
}


# what the notes say of uncertainty with one seed per arm -> what they say in a profile with `seeds`
ONE_SEED = {
    "One seed per arm, no intervals: differences between arms carry no stated uncertainty.": "One row per seed; "
    "the claims table gives the paired intervals over seeds.",
    "One seed, no intervals.": "One row per seed; the claims table gives the paired intervals over seeds.",
}


def table_notes(name: str, seeded: bool) -> list[str]:
    """A table's notes (under the table in every format); a profile with `seeds` gets its rows per seed and its
    intervals in the claims table."""
    notes = TABLE_NOTES.get(name, [])
    if seeded:
        for one, many in ONE_SEED.items():
            notes = [n.replace(one, many) for n in notes]
    return notes


def table_manifest(out_stem: str | Path) -> Path:
    """<stem>.sha256: the hashes of a table's files, written after them (`sha256sum -c` checks it)."""
    return Path(out_stem).with_suffix(".sha256")


def table_set_complete(out_stem: str | Path) -> bool:
    """Whether <stem>.md/.csv/.tex/.json/.html are one complete set written by one `write_table` (checked against
    <stem>.sha256); False for a set that a killed `pit table` left half-replaced."""
    return file_set_complete(table_manifest(out_stem))


# the unit of each numeric column, by name (first match wins); the sidecar <stem>.json records it per column
COLUMN_UNITS = [
    (r"(paper_)?runtime_s", "seconds"),
    (r"seed|problems_.*|layers|d_model|n_heads|n_kv_heads|d_head|kv_width|d_ff|pit_extra_params|n", "count"),
    (r"(paper_)?params_m", "millions of parameters"),
    (r"(paper_)?embed_pct", "%"),
    (r"first_loss|train_loss|val_loss|paper_train_loss", "nats/token"),
    (r"lens_.*_bits", "bits"),
    (r".*_angle", "radians"),
    (r"(base_)?nll_(gain_)?.*|kl_.*|val_loss_change_.*", "nats/token"),
    (r"gain_.*", "points (%)"),
    (r"interface_change_.*", "relative Frobenius change"),
    (r"(paper_)?(mbpp|humaneval|gsm8k|svamp)", "%"),
    (r"arm_.*|tt_.*|diff.*|untied_.*", "unit of `metric`"),
]


def column_unit(name: str) -> str:
    """A numeric column's unit for the sidecar (COLUMN_UNITS); '' for dimensionless ones (PPL, distances)."""
    return next((unit for pattern, unit in COLUMN_UNITS if re.fullmatch(pattern, name)), "")


def table_sidecar(df: pd.DataFrame, name: str, profile: str, notes: list[str]) -> dict:
    """<stem>.json: what the plain CSV leaves out: caption, profile, notes and each column's type and unit."""
    columns = [
        {"name": str(c), "type": "number", "unit": column_unit(str(c))}
        if df[c].dtype.kind in "fiu"
        else {"name": str(c), "type": "text", "unit": ""}
        for c in df.columns
    ]
    return {"table": name, "caption": TITLES[name], "profile": profile, "columns": columns, "notes": list(notes)}


def _shown(df: pd.DataFrame) -> pd.DataFrame:
    """The table as people read it (.md, .tex, .html): 4 significant digits, runtimes as '1h 24m', blanks for
    missing values."""
    shown = df.copy().astype(object).where(df.notna(), "")
    for c in df.columns:
        if str(c).endswith("runtime_s"):
            shown[c] = df[c].map(format_duration)
        elif df[c].dtype.kind == "f":
            shown[c] = df[c].map(lambda v: "" if v is None or math.isnan(v) else f"{v:.4g}")
    return shown


def paper_beside(df: pd.DataFrame) -> pd.DataFrame:
    """The columns with each `paper_<x>` right after ours: after `<x>`, else after the first `*_<x>` (table 2's
    `raw_cosine` for `paper_cosine`); a paper column with no match of ours stays where it is. A wide table then
    shows the paper's number beside ours instead of off-screen at the end."""
    ours = [c for c in df.columns if not str(c).startswith("paper_")]
    for paper in [c for c in df.columns if str(c).startswith("paper_")]:
        x = str(paper).removeprefix("paper_")
        match = next((c for c in ours if c == x), None) or next((c for c in ours if str(c).endswith(f"_{x}")), None)
        where = ours.index(match) + 1 if match is not None else len(ours)
        while where < len(ours) and str(ours[where]).startswith("paper_"):
            where += 1  # after the paper columns already placed there
        ours.insert(where, paper)
    return df[ours]


TABLE_CSS = (
    "body{font:13px sans-serif;margin:8px}.wrap{overflow-x:auto;max-width:100%}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;white-space:nowrap}"
    "th{position:sticky;top:0;background:#f4f4f4}.paper{background:#eef4ff;color:#1f3f7a}"
    "p.note{max-width:110ch;color:#333}"
)


def table_html(shown: pd.DataFrame, caption: str, notes: list[str]) -> str:
    """<stem>.html: one self-contained page (the table the HTML report opens inline): the caption, the notes
    first (a reader sees them without scrolling past a wide table), then the table in a scrolling box, the paper's
    columns shaded."""
    cls = [' class="paper"' if str(c).startswith("paper_") else "" for c in shown.columns]
    head = "".join(f"<th{k}>{html.escape(str(c))}</th>" for c, k in zip(shown.columns, cls, strict=True))
    body = "".join(
        "<tr>" + "".join(f"<td{k}>{html.escape(str(v))}</td>" for v, k in zip(row, cls, strict=True)) + "</tr>\n"
        for row in shown.itertuples(index=False)
    )
    paragraphs = "".join(f'<p class="note">{html.escape(n).replace(chr(10), "<br>")}</p>\n' for n in notes)
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(caption)}</title>\n'
        f"<style>{TABLE_CSS}</style></head>\n<body><p><b>{html.escape(caption)}</b></p>\n{paragraphs}"
        f'<div class="wrap"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody></table></div>\n'
        "</body></html>\n"
    )


SIDECAR_KEYS = {"table", "caption", "profile", "columns", "notes"}


TABLE_SUFFIXES = (".md", ".csv", ".tex", ".json", ".html")  # a table set's files; <stem>.sha256 lists them


def table_files_owned(out_stem: str | Path) -> bool:
    """Whether the files <stem>.* are a table set `write_table` made (pit.io's output rule): its <stem>.json is a
    table's sidecar, or its <stem>.sha256 lists only the set's files (`sha256sum` lines). The set's other files vary
    with the profile and settings, so they are known by these two (either may be gone: Snakemake removes a job's
    outputs before it runs it again, a kill leaves a set without its manifest)."""
    stem = Path(out_stem)
    try:
        record = json.loads(stem.with_suffix(".json").read_text())
        if isinstance(record, dict) and set(record) == SIDECAR_KEYS:
            return True
    except (OSError, ValueError):
        pass
    try:
        lines = stem.with_suffix(".sha256").read_text().splitlines()
    except (OSError, ValueError):
        return False
    names = {stem.with_suffix(s).name for s in TABLE_SUFFIXES}
    return bool(lines) and all(re.fullmatch(r"[0-9a-f]{64}  (.+)", ln) and ln[66:] in names for ln in lines)


def write_table(df: pd.DataFrame, out_stem: str | Path, name: str, profile: str, notes: list[str] = ()) -> None:
    """Write <stem>.csv (a plain table: header row, then values; numbers unformatted, runtimes in seconds),
    <stem>.json (caption, profile, notes, each column's type and unit), and for people <stem>.md, <stem>.tex and
    <stem>.html (caption, formatted numbers, the table's notes (`table_notes`), the notes computed from its rows
    (DATA_NOTES) and `notes`; each `paper_*` column beside ours), as one set: written to temporaries, renamed
    together, then <stem>.sha256 lists their hashes (pit.io.write_file_set). Temporaries of an earlier, killed
    `pit table` are removed first."""
    out_stem = Path(out_stem)
    df = paper_beside(df)
    computed = DATA_NOTES[name](df) if name in DATA_NOTES else []
    notes = [*table_notes(name, "seed" in df.columns), *computed, *notes]
    shown = _shown(df)
    head = f"**{TITLES[name]}.** Profile: `{profile}`." + (
        " Columns `paper_*` are the paper's values." if any(str(c).startswith("paper_") for c in df.columns) else ""
    )
    md = "\n\n".join([head, shown.to_markdown(index=False), *notes]) + "\n"
    caption = f"{TITLES[name]}. Profile: {profile}."
    latex = shown.to_latex(index=False, caption=caption, label=f"tab:{name}", escape=True)
    texts = {
        out_stem.with_suffix(".md"): md,
        out_stem.with_suffix(".csv"): df.to_csv(index=False),
        out_stem.with_suffix(".tex"): latex,
        out_stem.with_suffix(".json"): json_text(table_sidecar(df, name, profile, notes)),
        out_stem.with_suffix(".html"): table_html(shown, caption, list(notes)),
    }
    write_file_set(texts, table_manifest(out_stem), replaces=lambda old: table_files_owned(out_stem))

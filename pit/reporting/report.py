"""results/REPORT.md, the page a person reads first (`pit report`), and REPORT.html, the same page as HTML (the
Snakemake HTML report shows it).

In reading order: a short summary (profile, what ran, what is and is not comparable with the paper, the few
findings), provenance (commit, date, machine, wall time), the paper's claims with their figures, what was run in
detail, every table (ours beside the paper's) with its notes, every other figure with its caption, and a link to the
full claims table.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from pit.arms import mode_arms, slot_tokenizer
from pit.errors import PitError
from pit.io import read_json
from pit.reporting.captions import caption_name
from pit.reporting.claims import read_claims
from pit.reporting.tables import method_order, slot_key, table_notes  # noqa: F401  (table_notes: the notes each table carries)

REPORT_TITLE = "PIT reproduction report"  # REPORT.md's and REPORT.html's opening (pit report replaces only those)
# the tables REPORT.md shows, in order, with their headings
REPORT_TABLES = {
    "trajectory": "The decision: the gap along training",
    "parity": "The decision: tokens to parity",
    "final_scores": "The decision: the final models as they are",
    "table1": "Table 1",
    "table2": "Table 2",
    "table3": "Table 3",
    "table4_scores": "Table 4 (scores)",
    "table4_side_effects": "Table 4 (side effects)",
    "stability": "Stability: the learning-rate sweep",
    "teacher_gap": "Teacher mode: the gap to TT over continued pretraining",
    "frontier": "Side effects against adaptation: the LoRA frontier",
}


def slot_model(mode: str, entry: dict) -> tuple[str, str]:
    """(model name, how it got there) of one Table 1 slot."""
    if mode == "scratch":
        return entry["model"], "trained from scratch"
    if "stand_in" in entry:
        return entry["stand_in"], "a GPT-2 stand-in teacher pretrained by this pipeline"
    if "gguf" in entry:
        return entry["gguf"], "a real pretrained model, dequantised from its 4-bit GGUF release"
    return entry["teacher"], "the teacher checkpoint"


def architecture(name: str) -> str:
    """'2 layers, d = 64' for a registered model name; '' for a hub id or a folder."""
    from pit.models.configs import get_spec

    try:
        spec = get_spec(name)
    except PitError:  # not a registered name: a hub id or a local checkpoint
        return ""
    if hasattr(spec, "n_layers"):  # scratch family (ScratchSpec)
        return f"{spec.n_layers} layers, d = {spec.d_model}"
    return f"{spec.n_layer} layers, d = {spec.n_embd}"  # GPT-2 family (TeacherSpec)


def _millions(n: float) -> str:
    return f"{n / 1e6:.1f}M"


def run_facts(runs: Path | None, mode: str, slot: str) -> str:
    """'V = 21,630 (actual tokenizer), 1.2M parameters, 20,480 training tokens per run, device cpu x 1' from every
    run of the slot (run.json, summary.json), never from one run standing for the others: the parameters as a range
    where the arms differ (an untied head, PIT's T); the tokens of the longest run, and how many runs stopped before
    it (a diverged run ends early) out of how many."""
    if runs is None:
        return ""
    records = sorted([*(runs / mode / slot).glob("*/run.json"), *(runs / mode / slot).glob("*/seed*/run.json")])
    if not records:
        return ""
    params = [read_json(f)["params"] for f in records]
    sizes = sorted({_millions(p["parameters"]) for p in params}, key=lambda m: float(m[:-1]))
    span = sizes[0] if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]}"
    facts = [
        f"V = {params[0]['vocab_size']:,} (actual tokenizer)",
        f"{span} parameters" + " (by arm)" * (len(sizes) > 1),
    ]
    summaries = [read_json(f.with_name("summary.json")) for f in records if f.with_name("summary.json").is_file()]
    if summaries:
        longest = max(s["tokens"] for s in summaries)
        short = [s for s in summaries if s["tokens"] < longest]
        facts.append(f"{longest:,} training tokens per run" + (_stopped_early(short, len(summaries)) if short else ""))
    return ", ".join([*facts, f"device {params[0]['device']} x {params[0]['world_size']}"])


def _stopped_early(short: list[dict], n: int) -> str:
    """' (3 of 17 runs stopped earlier: diverged)': the runs of a slot that trained fewer tokens than its longest,
    and how many of them recorded a divergence in their summary."""
    diverged = sum(bool(s.get("diverged") or s.get("diverged_at_step") is not None) for s in short)
    why = {len(short): ": diverged", 0: ""}.get(diverged, f", {diverged} of them diverged")
    return f" ({len(short)} of {n} runs stopped earlier{why})"


def data_facts(data: Path, tokenizers: list[str]) -> tuple[list[str], dict[tuple[str, str | None], float]]:
    """Per tokenizer and corpus domain (results/data/<tokenizer>/[<domain>/]): train / val tokens and the validation
    split's unigram entropy (the no-context baseline loss); the lines and the entropies by (tokenizer, domain)."""
    from pit.data.reader import TokenFile, unigram_entropy

    lines, entropy = [], {}
    for name in tokenizers:
        folders = [(None, data / name)] + [(d.name, d) for d in sorted((data / name).glob("*/")) if d.is_dir()]
        for domain, folder in folders:
            if (folder / "val.bin").is_file() and (folder / "train.json").is_file():
                val = TokenFile(folder / "val.bin")
                train_tokens = read_json(folder / "train.json")["tokens"]
                entropy[(name, domain)] = unigram_entropy(val)
                part = "" if domain is None else f", domain `{domain}`"
                lines.append(
                    f"- Data `{name}`{part} (V = {val.meta['vocab_size']:,}): {train_tokens:,} train and "
                    f"{val.meta['tokens']:,} validation tokens; unigram entropy of the validation split "
                    f"{entropy[(name, domain)]:.3f} nats/token (a model that ignores context scores this)."
                )
    return lines, entropy


def final_val_losses(runs: Path, mode: str) -> dict[Path, float]:
    """summary.json -> the run's validation loss as Table 1 shows it, NaN where it has none (a diverged run)."""
    found = {f: read_json(f).get("val_loss") for f in (runs / mode).glob("**/summary.json")}
    return {f: math.nan if v is None else float(v) for f, v in found.items()}


def learned(runs: Path, mode: str, entropy: float | dict[str, float] | None) -> str:
    """A mode's validation losses against the unigram entropy of their data, in plain words: a model whose loss is
    at or above it predicts no better than token frequencies alone (no context). `entropy`: one value, or one per
    slot where the slots read different tokenizers (two real teachers of different families). Every count, range and
    quantifier is over the runs that have a finite validation loss (Table 1's non-blank val_loss); the runs with none
    (diverged) are counted apart, never as better or worse than the baseline."""
    found = final_val_losses(runs, mode)
    per_slot = entropy if isinstance(entropy, dict) else None
    limit = {f: per_slot.get(f.relative_to(runs / mode).parts[0]) if per_slot else entropy for f in found}
    found = {f: v for f, v in found.items() if limit[f] is not None}
    finite = {f: v for f, v in found.items() if math.isfinite(v)}
    k = len(found) - len(finite)
    if not finite:
        return f"- No {mode}-mode run has a finite validation loss ({k} runs, every one diverged)." if found else ""
    values = sorted({limit[f] for f in finite})
    against = (
        f"the unigram entropy {values[0]:.3f} of its validation split"
        if len(values) == 1
        else "the unigram entropy of each slot's validation split ("
        + ", ".join(f"{slot} {e:.3f}" for slot, e in sorted(per_slot.items()) if e is not None)
        + ")"
    )
    low, high = min(finite.values()), max(finite.values())
    span = f"validation loss {low:.3f} to {high:.3f} nats/token over {len(finite)} runs"
    rest = f"; {k} more run{'s' * (k != 1)} diverged, with no validation loss" if k else ""
    model = f"{mode}-mode model" + (" with a validation loss" if k else "")  # a diverged run has none
    worse = {f: v for f, v in finite.items() if not v < limit[f]}
    if len(worse) == len(finite):
        return (
            f"- Every {model} ends worse than a unigram model (one that predicts token frequencies and ignores "
            f"context): {span}, against {against}{rest}."
        )
    if worse:
        arms = sorted({f.relative_to(runs / mode).parts[1] for f in worse})
        many = model.replace("model", "models", 1)
        return (
            f"- {len(worse)} of {len(finite)} {many} end worse than a unigram model (arms {', '.join(arms)}); "
            f"{span}, against {against}{rest}."
        )
    margins = [limit[f] - v for f, v in finite.items()]
    return (
        f"- Every {model} beats a unigram model: {span}, {min(margins):.2f} to {max(margins):.2f} below {against}"
        f"{rest}."
    )


def profile_tokenizers(p: dict) -> list[str]:
    """Every tokenizer the profile's runs read, in order, once."""
    return list(
        dict.fromkeys([*p["tokenizer"].values(), *(slot_tokenizer(p, "teacher", s) for s in p["teacher_slots"])])
    )


def seed_span(seeds: list[str]) -> str:
    """'0-6' for consecutive seeds, else '0, 2, 5'."""
    ints = sorted(int(x) for x in seeds)
    consecutive = len(ints) > 2 and ints == list(range(ints[0], ints[-1] + 1))
    return f"{ints[0]}-{ints[-1]}" if consecutive else ", ".join(map(str, ints))


def ran_seeds(runs: Path | None, mode: str, slot: str) -> dict[str, list[str]]:
    """arm -> the seeds of its finished runs in one slot (<runs>/<mode>/<slot>/<arm>/[seed<k>/]summary.json: the runs
    Table 1 shows; [] for the unseeded layout); {} where there are none."""
    found: dict[str, list[str]] = {}
    for f in [] if runs is None else (runs / mode / slot).glob("*/summary.json"):
        found.setdefault(f.parent.name, [])
    for f in [] if runs is None else (runs / mode / slot).glob("*/seed*/summary.json"):
        found.setdefault(f.parent.parent.name, []).append(f.parent.name.removeprefix("seed"))
    return found


def slot_arms(runs: Path | None, mode: str, slot: str) -> str:
    """'pit, tt (seeds 0-6); pit-lrt (seeds 0-2)': the arms of one slot with the seeds each ran (`ran_seeds`), arms
    of the same seeds together, in the tables' arm order; 'none run yet' for a slot without runs."""
    ran = ran_seeds(runs, mode, slot)
    if not ran:
        return "none run yet"
    groups: dict[tuple[str, ...], list[str]] = {}
    for arm in sorted(ran, key=method_order):
        groups.setdefault(tuple(sorted(ran[arm], key=int)), []).append(arm)
    return "; ".join(", ".join(arms) + (f" (seeds {seed_span(list(k))})" if k else "") for k, arms in groups.items())


def slot_lines(config: dict, runs: Path | None) -> list[str]:
    """One bullet per slot, in size order: the model behind it, its real vocabulary and size (`run_facts`), its
    arms and their seeds (`slot_arms`)."""
    p, lines = config["pretrain"], []
    for mode, slots in (("teacher", p["teacher_slots"]), ("scratch", p["scratch_slots"])):
        for slot, entry in sorted(slots.items(), key=lambda kv: slot_key(kv[0])):  # in size order
            name, how = slot_model(mode, entry)
            shape = ", ".join(x for x in (architecture(name), run_facts(runs, mode, slot)) if x)
            arms = slot_arms(runs, mode, slot)
            lines.append(f"- {mode} slot {slot}: `{name}` ({how}{'; ' + shape if shape else ''}); arms {arms}.")
    return lines


def describe_profile(config: dict, runs: Path | None = None) -> list[str]:
    """What was run: profile, corpus, the model behind each slot with its real vocabulary and size, arms, steps and
    batch, the post-training setup (Markdown bullets)."""
    p = config["pretrain"]
    corpus = config["corpus"]
    where = corpus.get("glob") if corpus["source"] == "local" else corpus.get("dataset", corpus["name"])
    lines = [
        f"- Profile: `{config['profile']}`; context {config['context_length']} tokens; corpus "
        f"`{corpus['name']}` ({corpus['source']}: `{where}`, at most {corpus.get('max_documents') or 'all'} "
        "documents)."
    ]
    lines += slot_lines(config, runs)
    if runs is not None:
        lines += data_facts(runs.parent / "data", profile_tokenizers(p))[0]
    seeds = config.get("seeds")
    lines.append(
        f"- Seeds: {', '.join(map(str, seeds))}; each slot above lists the seeds its arms ran (a seed sets "
        "initialisation, data order and the LoRA's; runs of one seed read the same data)."
        if seeds
        else f"- Seeds: one run per arm (seed {p['train']['seed']}): no interval on any comparison."
    )
    for mode in ("teacher", "scratch"):
        for arm, overrides in p.get(f"{mode}_arms", {}).items():
            flat = {**{k: v for k, v in overrides.items() if k != "train"}, **overrides.get("train", {})}
            settings = ", ".join(f"{k} = {v}" for k, v in flat.items())
            kind = arm.split("-")[0].upper()
            lines.append(
                f"- {mode.capitalize()} arm `{arm}`: {kind if arm != kind.lower() else 'runs'} with {settings}."
            )
    for role, domain in p.get("domains", {}).items():
        if domain:
            rule = corpus.get("domains", {}).get(domain, {})
            lines.append(
                f"- Data of the {role.replace('_', '-')} runs: corpus domain `{domain}` ({describe_domain(rule)})."
            )
    modes = [m for m in ("teacher", "scratch") if p[f"{m}_slots"]] or ["teacher", "scratch"]  # the modes that ran
    steps = ", ".join(f"{m} {({**p['train'], **p['mode_train'].get(m, {})})['max_steps']}" for m in modes)
    z = "trainable" if p["interface"]["trainable_z"] else "frozen"
    lines.append(
        f"- Steps: {steps}; global batch "
        f"{p['train']['global_batch_tokens']} tokens; PIT: Z {z}, t_init `{p['interface']['t_init']}`."
    )
    post = config.get("posttrain")
    if post:
        lora, post_arms = post["lora"], post.get("interfaces") or mode_arms(p["interfaces"], p.get("teacher_arms", {}))
        lines.append(
            f"- Post-training: LoRA r={lora['rank']}, alpha={lora['alpha']}, {lora['max_steps']} steps of "
            f"{lora['batch_size']} examples on {', '.join(post['tasks'])} ({post['data_source']} data) for arms "
            f"{', '.join(post_arms)}; evaluation on "
            f"{post['evaluate']['limit'] or 'all'} problems per set."
        )
    return lines


def describe_domain(rule: dict) -> str:
    """A corpus domain in words: the documents whose path matches include and not exclude."""
    inc = ", ".join(f"`{x}`" for x in rule.get("include") or []) or "every path"
    exc = ", ".join(f"`{x}`" for x in rule.get("exclude") or [])
    return f"documents matching {inc}" + (f", except {exc}" if exc else "")


def claims_summary(tables: Path) -> list[str]:
    """The summary of the claims table (pit.reporting.claims.summary_markdown): one line per claim, grouped."""
    from pit.reporting.claims import summary_markdown

    table = read_claims(tables)
    if table is None:
        return []
    return ["## The paper's claims at this scale", "", summary_markdown(table).strip(), ""]


def claims_findings(tables: Path) -> list[str]:
    """The claims in two bullets: how many claims got which overall verdict, and the claims decided either way."""
    from pit.reporting.claims import KIND_ORDER, summary

    table = read_claims(tables)
    if table is None:
        return []
    s = summary(table)
    kinds = [k for k in ["mixed", *KIND_ORDER, "exploratory"] if k in set(s["verdict"])]
    counts = ", ".join(f"{(s['verdict'] == k).sum()} `{k}`" for k in kinds)
    lines = [f"- The paper's {len(s)} claims, verdict of each claim's primary test at this scale: {counts} (section "
             "below)."]  # fmt: skip
    decided = s[s["verdict"].isin(["supported", "contradicted", "mixed", "not specific to PIT"])]
    if decided.empty:
        lines.append("- No claim's primary test is decided either way at this scale.")
    for r in decided.itertuples(index=False):
        tag = " (fragile: one seed fewer changes it)" if r.fragile else ""
        lines.append(f"- {r.title}: **{r.verdict}**{tag}. {'; '.join(r.primary)}.")
    return lines


def run_counts(runs: Path) -> str:
    """What ran, counted from the run folders: pretraining runs per mode, stand-in teachers, LoRA updates."""
    results = runs.parent
    counts = {m: len(list((runs / m).glob("**/summary.json"))) for m in ("teacher", "scratch")}
    teachers = len(list((results / "teachers").glob("*/summary.json")))
    loras = len(list((results / "posttrain").glob("**/side_effects.json")))
    parts = [f"{n} {m}-mode pretraining runs" for m, n in counts.items() if n]
    parts += [f"{teachers} stand-in teacher{'s' * (teachers != 1)} pretrained first"] if teachers else []
    parts += [f"{loras} LoRA updates, each evaluated in- and out-of-domain"] if loras else []
    return "- What ran: " + (", ".join(parts) or "no run folders found") + "."


def comparability(config: dict) -> str:
    """What in this profile's results can be compared with the paper's numbers, and what cannot."""
    from pit.reporting.real_teachers import real_slots

    if real_slots(config):
        return (
            "This profile continues real pretrained tied models (dequantised from their 4-bit releases) for "
            f"{config['pretrain']['train']['max_steps']} steps on CPU: the arms are comparable with each other (same "
            "teacher, same data, same order), not with the paper's numbers (other models, data and scale, and far "
            "fewer tokens than its Figure 4); docs/real.md says what this can show."
        )
    if config.get("seeds"):
        return (
            "This profile tests the paper's claims at laptop scale: tiny models on an offline corpus, each arm once "
            "per seed. Losses, perplexities and scores are not comparable with the paper's numbers; the claims "
            "compare arms with paired 95% intervals over seeds, and their verdicts hold for this scale only. "
            "Comparable with the paper as numbers: Table 3 (parameter counts, computed exactly) and PIT's structural "
            "zeros in Table 2."
        )
    if config["profile"] == "paper":
        return (
            "This is the paper profile: its losses, perplexities, runtimes and scores can be put beside the paper's "
            "(`paper_*` columns), with one seed per arm and the paper's unstated budget and hardware as caveats."
        )
    return (
        "Comparable with the paper: only Table 3 (parameter counts of the paper's architectures, computed exactly) "
        "and PIT's structural zeros in Table 2 (they hold at any scale). Not comparable: every loss, perplexity, "
        "runtime and score here, since the models are tiny stand-ins trained for a few steps on a small corpus; with "
        "one seed per arm, no ordering between arms here is evidence for or against the paper. These results show "
        "that the machinery runs."
    )


def unigram_findings(config: dict, runs: Path) -> list[str]:
    """Each mode's `learned` line; one line when every model of every mode ends worse than a unigram model."""
    p = config["pretrain"]
    entropy = data_facts(runs.parent / "data", profile_tokenizers(p))[1]
    domains = p.get("domains", {})
    found = {}
    for m in ("teacher", "scratch"):
        slots = {s: entropy.get((slot_tokenizer(p, m, s), domains.get(m))) for s in p[f"{m}_slots"]}
        found[m] = learned(runs, m, slots if len(set(slots.values())) > 1 else next(iter(slots.values()), None))
    found = {m: x for m, x in found.items() if x}
    if len(found) > 1 and all(x.startswith("- Every") and "ends worse" in x for x in found.values()):
        each = "; ".join(f"{m} mode {x.split(': ', 1)[1].rstrip('.')}" for m, x in found.items())
        return [
            "- Every model of this profile ends worse than a unigram model (one that predicts token frequencies "
            f"and ignores context): {each}."
        ]
    return list(found.values())


def summary_section(config: dict, tables: Path, runs: Path | None) -> list[str]:
    """The report's opening: profile, what ran, what is comparable, the few findings."""
    from pit.reporting.real_teachers import real_slots

    what = (
        "the paper's teacher-mode experiment on real pretrained tied models"
        if real_slots(config)
        else "tests the paper's claims at laptop scale"
        if config.get("seeds")
        else ("the paper's settings" if config["profile"] == "paper" else "checks that the whole pipeline runs")
    )
    lines = ["## Summary", "", f"- Profile `{config['profile']}`: {what}."]
    if runs is not None:
        lines.append(run_counts(runs))
    lines += ["", comparability(config), "", "Findings:", ""]
    if runs is not None:
        from pit.reporting.real_teachers import real_teacher_findings

        lines += real_teacher_findings(config, runs.parent)
    lines += unigram_findings(config, runs) if runs is not None else []
    lines += claims_findings(tables)
    return [*lines, ""]


def machine() -> str:
    """This machine in one line: CPU model, cores, Python, torch."""
    import platform

    import torch

    cpu = platform.processor() or platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}"


def provenance(config: dict, results: Path | None) -> list[str]:
    """Commit, date, profile, machine and the wall time so far (from the first data log to now)."""
    import time

    from pit.tracking.provenance import git_commit

    lines = [
        f"- Commit `{git_commit()}`; report written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        f"- Profile `{config['profile']}`; machine: {machine()}.",
    ]
    logs = sorted((results / "logs").glob("data/*.log")) if results is not None else []
    if logs:
        start = min(log.stat().st_mtime for log in logs)
        lines.append(
            f"- Wall time from the first data job to this report: {(time.time() - start) / 60:.1f} minutes (jobs "
            "that ran in an earlier invocation of the workflow count from then)."
        )
    return ["## Provenance", "", *lines, ""]


def figure_caption(stem: str, captions: Path | None) -> str:
    """A figure's caption from the HTML report's caption file (reStructuredText literals to Markdown), or ''."""
    path = None if captions is None else captions / f"{caption_name(stem)}.rst"
    if path is None or not path.is_file():
        return ""
    return " ".join(path.read_text().split()).replace("``", "`")


def figure_blocks(pngs: list[Path], out: Path, captions: Path | None) -> list[str]:
    """Figures linked relative to the report, each caption (in italics) once, under the first figure it captions."""
    parts, shown = [], set()
    for png in pngs:
        caption = figure_caption(png.stem, captions)
        parts += [f"![{png.stem}]({Path(os.path.relpath(png, out.parent)).as_posix()})", ""]
        if caption and caption not in shown:
            parts += [f"*{caption}*", ""]
            shown.add(caption)
    return parts


def claims_section(tables: Path, figures: Path, out: Path, captions: Path | None = None) -> list[str]:
    """The claims figures and a link to the full claims table (one row per claim x cell x arm, its notes), when
    `pit table claims` ran; else []."""
    md = tables / "claims.md"
    if not md.is_file():
        return []
    rel = Path(os.path.relpath(md, out.parent)).as_posix()
    parts = [
        "## The claims table",
        "",
        f"Every row (claim x cell x PIT arm, with the per-arm means, the paired differences, p-values and the "
        f"controls) and the verdict rules: [{rel}]({rel}) ([CSV]({rel.removesuffix('.md')}.csv); the numbers "
        f"each row rests on: [{rel.removesuffix('.md')}_seeds.csv]({rel.removesuffix('.md')}_seeds.csv)).",
        "",
    ]
    from pit.reporting.claims import GROUPS

    pngs = [figures / f"claims_{g}.png" for g in GROUPS] + sorted(figures.glob("study_*.png"))
    return parts + figure_blocks([p for p in pngs if p.is_file()], out, captions)


def decision_generations(config: dict, runs: Path | None) -> list[str]:
    """A profile's `decision`: the generations side by side (pit.reporting.real_teachers.generations_section)."""
    if not config.get("decision") or runs is None:
        return []
    from pit.reporting.real_teachers import generations_section

    return generations_section(runs.parent, config["decision"])


def build_report(
    config: dict, tables: Path, figures: Path, out: Path, runs: Path | None = None, captions: Path | None = None
) -> str:
    """REPORT.md's text (module docstring): from `config`, the pretraining run folders under `runs`, every table of
    `tables` (with the notes it carries), every figure of `figures` linked relative to `out` with its caption from
    `captions` (workflow/report/*.rst)."""
    try:
        profile = describe_profile(config, runs)
    except (KeyError, TypeError, AttributeError) as err:
        raise PitError(
            f"config has no {err} (or a value of another kind); expected the pipeline config (config/config.yaml, "
            "with profile, context_length, corpus, pretrain, posttrain)"
        ) from None
    if not tables.is_dir() or not any(tables.glob("*.md")):
        raise PitError(f"--tables {tables}: no tables there; expected the folder `pit table` writes (*.md)")
    parts = [
        f"# {REPORT_TITLE}: profile `{config['profile']}`",
        "",
        *summary_section(config, tables, runs),
        *provenance(config, runs.parent if runs is not None else None),
        *claims_summary(tables),
        *decision_generations(config, runs),
        *claims_section(tables, figures, out, captions),
        "## What was run",
        "",
        *profile,
        "",
        "Tables put our numbers beside the paper's (columns `paper_*`, from `pit/reporting/paper_values.yaml`); the "
        "notes under each say how to read it.",
        "",
    ]
    for name, heading in REPORT_TABLES.items():
        md, csv = tables / f"{name}.md", tables / f"{name}.csv"
        if md.is_file() and not (csv.is_file() and not csv.read_text().strip()):  # a table with no rows: left out
            parts += [f"## {heading}", "", md.read_text().strip(), ""]
    parts += ["## Figures", ""]
    others = sorted(p for p in figures.glob("*.png") if not p.name.startswith(("claims_", "study_")))  # above
    parts += figure_blocks(others, out, captions)
    return "\n".join(parts)


def report_html(markdown: str) -> str:
    """REPORT.md as one HTML page (markdown-it, tables on), written beside REPORT.md so that its figures resolve
    there. The figures stay links, not embedded: Snakemake's HTML report opens the page from a data: URL, which
    Chromium caps at 2 MB; there a figure shows its alt text, which names it and where the report has it."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(markdown)
    body = re.sub(r'<img src="([^"]+)" alt="([^"]*)"', r'<img src="\1" alt="[figure \2: category Figures]"', body)
    style = (
        "body{font:14px/1.45 sans-serif;max-width:1200px;margin:12px auto;padding:0 12px}img{max-width:100%}"
        "table{border-collapse:collapse;font-size:12px;display:block;overflow-x:auto}td,th{border:1px solid #ccc;"
        "padding:2px 6px;white-space:nowrap}em{color:#333}"
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{REPORT_TITLE}</title>'
        f"<style>{style}</style></head>\n<body>\n{body}</body></html>\n"
    )

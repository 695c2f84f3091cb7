"""results/REPORT.md, the page a person reads first (`pit report`).

It says what was run (profile, slots, interfaces, steps, tokens), then shows every table (ours
beside the paper's) and links every figure, with the notes needed to read them.
"""

from __future__ import annotations

import os
from pathlib import Path

from pit.errors import PitError
from pit.io import read_json

NOTES = {
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
        "At small scale every score above is 0, so a continuous measure sits beside it: `nll_<task>` (LoRA model) "
        "and `base_nll_<task>` (its base) = teacher-forced NLL of the set's reference solutions given the same "
        "prompts, in nats per reference token (pooled over the problems scored). Not a quantity of the paper. "
        "Sets in `standin_data` are offline stand-ins, not the real benchmarks; `problems_<task>` = problems "
        "scored in that set. One seed, no intervals.",
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
        "or start-up; in seconds in the CSV, formatted here), on the machine named above, which other jobs shared; "
        "paper_runtime_s is the paper's runtime in the same unit. One seed per arm, no intervals: differences "
        "between arms carry no stated uncertainty.",
        "Teacher mode: PIT with the paper's init (T = I, Z = polar factor of E0) replaces the teacher's head "
        "W_out = E0^T = H U^T by U^T, so it starts far above the teacher (first_loss). PIT-head (`t_init: power`, "
        "T = H / sigma^2 with sigma^2 moved into the final norm) keeps the teacher's head exactly and changes "
        "only its input embedding (docs/models.md). Any early rise of the TT loss in teacher mode is data order: "
        "the untied arm sees the same batches and rises the same way; it is not evidence about the interface.",
        "The paper does not give its budget, learning rate or hardware: compare shapes and orderings, not "
        "absolute values, unless the paper profile ran.",
    ],
}


# the tables REPORT.md shows, in order, with their headings
REPORT_TABLES = {
    "table1": "Table 1",
    "table2": "Table 2",
    "table3": "Table 3",
    "table4_scores": "Table 4 (scores)",
    "table4_side_effects": "Table 4 (side effects)",
    "stability": "Stability: the learning-rate sweep",
    "teacher_gap": "Teacher mode: the gap to TT over continued pretraining",
    "frontier": "Side effects against adaptation: the LoRA frontier",
}

# what the notes say of uncertainty with one seed per arm -> what they say in a profile with `seeds`
ONE_SEED = {
    "One seed per arm, no intervals: differences between arms carry no stated uncertainty.": "One row per seed; "
    "the claims table gives the paired intervals over seeds.",
    "One seed, no intervals.": "One row per seed; the claims table gives the paired intervals over seeds.",
}


def table_notes(name: str, seeded: bool) -> list[str]:
    """A table's notes in REPORT.md; a profile with `seeds` gets its rows per seed and intervals elsewhere."""
    notes = NOTES.get(name, [])
    if seeded:
        for one, many in ONE_SEED.items():
            notes = [n.replace(one, many) for n in notes]
    return notes


def slot_model(mode: str, entry: dict) -> tuple[str, str]:
    """(model name, how it got there) of one Table 1 slot."""
    if mode == "scratch":
        return entry["model"], "trained from scratch"
    if "stand_in" in entry:
        return entry["stand_in"], "a GPT-2 stand-in teacher pretrained by this pipeline"
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


def run_facts(runs: Path | None, mode: str, slot: str) -> str:
    """'V = 21,630, 1.2M parameters, 20,480 tokens, cpu' from the slot's first arm that ran (run.json, summary.json)."""
    if runs is None:
        return ""
    for arm in sorted([*(runs / mode / slot).glob("*/run.json"), *(runs / mode / slot).glob("*/seed*/run.json")]):
        params = read_json(arm)["params"]
        tokens = read_json(arm.with_name("summary.json"))["tokens"] if arm.with_name("summary.json").is_file() else 0
        return (
            f"V = {params['vocab_size']:,} (actual tokenizer), {params['parameters'] / 1e6:.1f}M parameters, "
            f"{tokens:,} training tokens per arm, device {params['device']} x {params['world_size']}"
        )
    return ""


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


def learned(runs: Path, mode: str, entropy: float | None) -> str:
    """The range of a mode's validation losses against the unigram entropy of their data: did the models learn?"""
    losses = [read_json(f)["val_loss"] for f in (runs / mode).glob("**/summary.json")]
    if not losses or entropy is None:
        return ""
    return (
        f"- {mode.capitalize()}-mode validation loss: {min(losses):.3f} to {max(losses):.3f} nats/token over "
        f"{len(losses)} runs, {entropy - max(losses):.2f} to {entropy - min(losses):.2f} below the unigram entropy."
    )


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
    arms = {  # a mode's extra arms sit right after the arm of their kind, the prefix of their name (common.smk)
        m: [
            a
            for i in p["interfaces"]
            for a in [i, *(x for x in p.get(f"{m}_arms", {}) if x.split("-")[0] == i and x != i)]
        ]
        for m in ("teacher", "scratch")
    }
    for mode, slots in (("teacher", p["teacher_slots"]), ("scratch", p["scratch_slots"])):
        for slot, entry in slots.items():
            name, how = slot_model(mode, entry)
            shape = ", ".join(x for x in (architecture(name), run_facts(runs, mode, slot)) if x)
            lines.append(
                f"- {mode} slot {slot}: `{name}` ({how}{'; ' + shape if shape else ''}); arms {', '.join(arms[mode])}."
            )
    if runs is not None:
        facts, entropy = data_facts(runs.parent / "data", list(dict.fromkeys(p["tokenizer"].values())))
        lines += facts
        domains = p.get("domains", {})
        lines += [
            x
            for m in ("teacher", "scratch")
            if (x := learned(runs, m, entropy.get((p["tokenizer"][m], domains.get(m)))))
        ]
    seeds = config.get("seeds")
    lines.append(
        f"- Seeds: {', '.join(map(str, seeds))} (each arm once per seed; a seed sets initialisation, data order and "
        "the LoRA's; arms with one seed see the same data)."
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
    steps = {m: {**p["train"], **p["mode_train"].get(m, {})}["max_steps"] for m in ("teacher", "scratch")}
    z = "trainable" if p["interface"]["trainable_z"] else "frozen"
    lines.append(
        f"- Steps: teacher {steps['teacher']}, scratch {steps['scratch']}; global batch "
        f"{p['train']['global_batch_tokens']} tokens; PIT: Z {z}, t_init `{p['interface']['t_init']}`."
    )
    post = config.get("posttrain")
    if post:
        lora = post["lora"]
        lines.append(
            f"- Post-training: LoRA r={lora['rank']}, alpha={lora['alpha']}, {lora['max_steps']} steps of "
            f"{lora['batch_size']} examples on {', '.join(post['tasks'])} ({post['data_source']} data) for arms "
            f"{', '.join(post.get('interfaces') or arms['teacher'])}; evaluation on "
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
    import pandas as pd

    from pit.reporting.claims import summary_markdown

    csv = tables / "claims.csv"
    if not csv.is_file():
        return []
    table = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    table["lora"] = table["lora"].fillna("")
    return ["## Summary: the paper's claims at this scale", "", summary_markdown(table).strip(), ""]


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


def claims_section(tables: Path, figures: Path, out: Path) -> list[str]:
    """The claims table (tables/claims.md) and links to the claims figures, when `pit table claims` ran; else []."""
    md = tables / "claims.md"
    if not md.is_file():
        return []
    parts = ["## The claims table", "", md.read_text().strip(), ""]
    for png in sorted([*figures.glob("claims_*.png"), *figures.glob("study_*.png")]):
        parts += [f"![{png.stem}]({Path(os.path.relpath(png, out.parent)).as_posix()})", ""]
    return parts


def build_report(config: dict, tables: Path, figures: Path, out: Path, runs: Path | None = None) -> str:
    """REPORT.md's text: what was run (from `config` and the pretraining run folders under `runs`), every table of
    `tables` with its notes, every figure of `figures` linked relative to `out`."""
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
        "# PIT reproduction report",
        "",
        "Tables put our numbers beside the paper's (columns `paper_*`, from `pit/reporting/paper_values.yaml`).",
        "",
        *claims_summary(tables),
        *provenance(config, runs.parent if runs is not None else None),
        *claims_section(tables, figures, out),
        "## What was run",
        "",
        *profile,
        "",
    ]
    if config.get("seeds"):
        parts += [
            "This profile tests the paper's claims at laptop scale: tiny models (above) on an offline corpus, each "
            "arm once per seed. Losses, perplexities and scores are not comparable with the paper's numbers; the "
            "claims table compares arms with paired 95% intervals over seeds, and its verdicts hold for this scale "
            "only.",
            "",
        ]
    elif config["profile"] != "paper":
        parts += [
            "This is not the paper profile: models are tiny stand-ins (above) trained for a few steps on a small "
            "corpus, so no loss, perplexity, runtime or score here is comparable with the paper's. Comparable "
            "with the paper: Table 3 (parameter counts of the paper's architectures, computed exactly) and PIT's "
            "structural zeros in Table 2 (they hold at any scale). Everything else shows that the machinery runs; "
            "with one seed per arm, no ordering between arms here is evidence for or against the paper.",
            "",
        ]
    for name, heading in REPORT_TABLES.items():
        md = tables / f"{name}.md"
        if md.is_file():
            parts += [f"## {heading}", "", md.read_text().strip(), ""]
            parts += [f"> {n}" for n in table_notes(name, bool(config.get("seeds")))] + [""]
    parts += ["## Figures", ""]
    for png in sorted(p for p in figures.glob("*.png") if not p.name.startswith(("claims_", "study_"))):  # above
        parts += [f"![{png.stem}]({Path(os.path.relpath(png, out.parent)).as_posix()})", ""]
    return "\n".join(parts)

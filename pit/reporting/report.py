"""results/REPORT.md, the page a person reads first (`pit report`).

It says what was run (profile, slots, interfaces, steps, tokens), then shows every table (ours
beside the paper's) and links every figure, with the notes needed to read them.
"""

from __future__ import annotations

from pathlib import Path

from pit.errors import PitError

NOTES = {
    "table2": [
        "`raw` compares the anchors of Eqs. 1-2 (B_in = E, B_out = pinv(W_out)); `polar` compares the "
        "orthonormal polar factors of E and W_out^T, as Section 5.5 words it. With exact transpose tying the "
        "polar factors coincide, so TT reads 0 in the polar variant; the paper's non-zero TT values match the raw "
        "variant's behaviour. PIT reads 0 in both because pinv(T Z^T) = Z T^-1.",
        "Principal angles are computed from the sine side in float64: an exactly consistent interface reads "
        "about 1e-7 rad or below. The paper's PIT angles (3-5e-4 rad) are the resolution of arccos in FP32 near 1 "
        "(arccos(1 - 6e-8) = 3.5e-4).",
    ],
    "table4": [
        "Scores are in %: pass@1 from executing the unit tests in a sandbox (MBPP, HumanEval) and numeric exact "
        "match of the final answer (GSM8K, SVAMP); the paper calls all four exact-match accuracy. Each LoRA is "
        "evaluated in-domain (its own task) and out-of-domain; `gain_<task>` is the in-domain score minus the "
        "base model's, in points.",
        "Side effects (not defined as a number in the paper) are measured on held-out pretraining text: "
        "`kl_<task>` = mean KL(p_before || p_after) of the next-token distributions (nats/token), "
        "`val_loss_change_<task>` = validation loss after minus before, `interface_change_<task>` = relative "
        "Frobenius change of E or W_out (0 when the interface is frozen). Sets in `standin_data` are offline "
        "stand-ins, not the real benchmarks; `problems` = problems scored per set.",
    ],
    "table1": [
        "Training loss = mean of the last `final_loss_window` steps; PPL = exp(loss); runtime = wall-clock time "
        "of the optimizer steps. The paper does not give its budget, learning rate or hardware: compare shapes "
        "and orderings, not absolute values, unless the paper profile ran.",
    ],
}


def describe_profile(config: dict) -> list[str]:
    """What was run: profile, corpus, slots and arms, steps and batch, the post-training setup (Markdown bullets)."""
    p = config["pretrain"]
    lines = [
        f"- Profile: `{config['profile']}`; context {config['context_length']} tokens; corpus "
        f"`{config['corpus']['name']}` ({config['corpus']['source']})."
    ]
    for mode, slots in (("teacher", p["teacher_slots"]), ("scratch", p["scratch_slots"])):
        for slot, entry in slots.items():
            what = entry.get("teacher") or (
                f"stand-in `{entry['stand_in']}` pretrained here" if "stand_in" in entry else f"`{entry['model']}`"
            )
            lines.append(f"- {mode} slot {slot}: {what}; arms {', '.join(p['interfaces'])}.")
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
            f"{lora['batch_size']} examples on {', '.join(post['tasks'])} ({post['data_source']} data); "
            f"evaluation on {post['evaluate']['limit'] or 'all'} problems per set."
        )
    return lines


def build_report(config: dict, tables: Path, figures: Path, out: Path) -> str:
    """REPORT.md's text: what was run, every table of `tables` with its notes, every figure of `figures`
    linked relative to `out`."""
    try:
        profile = describe_profile(config)
    except (KeyError, TypeError, AttributeError) as err:
        raise PitError(
            f"config has no {err} (or a value of another kind); expected the pipeline config (config/config.yaml, "
            "with profile, context_length, corpus, pretrain, posttrain)"
        ) from None
    parts = [
        "# PIT reproduction report",
        "",
        "Tables put our numbers beside the paper's (columns `paper_*`, from `pit/reporting/paper_values.yaml`).",
        "",
        "## What was run",
        "",
        *profile,
        "",
    ]
    if config["profile"] != "paper":
        parts += [
            "This is not the paper profile: models are tiny stand-ins trained for a few steps on a small corpus, "
            "so absolute numbers are not comparable with the paper's; the interface metrics (Table 2) are.",
            "",
        ]
    for name in ("table1", "table2", "table3", "table4"):
        md = tables / f"{name}.md"
        if md.is_file():
            parts += [f"## Table {name.removeprefix('table')}", "", md.read_text().strip(), ""]
            parts += [f"> {n}" for n in NOTES.get(name, [])] + [""]
    parts += ["## Figures", ""]
    for png in sorted(figures.glob("*.png")):
        parts += [f"![{png.stem}]({png.relative_to(out.parent).as_posix()})", ""]
    return "\n".join(parts)

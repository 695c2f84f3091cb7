"""The paper's figures from run folders (PNG, matplotlib); `pit figure`.

- `loss-curves --mode scratch` (Figure 3) / `--mode teacher` (Figure 4): training loss vs tokens,
  one panel per slot, one line per interface (PIT, TT, untied).
- `drift`: interface drift over training, Delta_TI and (when logged) the Table 2 raw metrics vs
  step for every run.
- `transition`: a Figure 2-style transition trace: for a few prompts, the last token's state at
  every layer decoded through the input anchors B_in (nearest row of E by cosine) and through the
  output anchors (the logit lens, argmax of f W_out), for several checkpoints side by side (the
  decode is pit/analysis/layerwise.py's, the one `pit diagnose` uses).
- `side-effects` (post-training): per LoRA run, the side effect (KL of next-token distributions on
  held-out pretraining text, and the validation-loss change) against the in-domain gain.
- `claims --out-dir DIR`: one PNG per group of the paper's claims (claims_<group>.png, pit/reporting/claims.py),
  one panel per metric x mode (x slot, x LoRA task): each seed's value per arm and the arm's mean with its 95%
  Student-t interval.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pit.errors import PitError  # noqa: E402
from pit.io import atomic_path, read_json, read_jsonl  # noqa: E402
from pit.reporting.tables import METHOD_NAME, find_runs, posttrain_runs, slot_key  # noqa: E402

COLORS = {"pit": "tab:blue", "pit-head": "tab:purple", "pit-z": "tab:cyan", "tt": "tab:orange", "untied": "tab:green"}


def runs_by_slot(root: Path, mode: str) -> dict[str, list[tuple[str, int | None, list[dict]]]]:
    """slot -> [(interface, seed, metrics.jsonl rows)] of every `mode` run under root, in table order."""
    slots: dict[str, list] = {}
    for run, _ in find_runs(root, "summary.json"):
        if run.mode == mode:
            rows = read_jsonl(run.path.parent / "metrics.jsonl")
            slots.setdefault(run.slot, []).append((run.interface, run.seed, rows))
    if not slots:
        raise PitError(f"no {mode}-mode runs under {str(root)!r}")
    return slots


def save(fig, out: Path) -> None:
    """Write the figure as PNG (atomically) and close it."""
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)


def loss_curves(root: Path, mode: str, out: Path, profile: str) -> None:
    """Figure 3 (scratch) / Figure 4 (teacher): training loss vs tokens seen."""
    slots = runs_by_slot(root, mode)
    fig, axes = plt.subplots(1, len(slots), figsize=(4.2 * len(slots), 3.4), squeeze=False)
    for ax, (slot, runs) in zip(axes[0], slots.items(), strict=True):  # slots in size order (runs_by_slot)
        labelled = set()
        for kind, _seed, rows in runs:  # seeds of one arm: one colour, one legend entry
            ok = [r for r in rows if math.isfinite(r["loss"])]
            ax.plot(
                [r["tokens"] for r in ok],
                [r["loss"] for r in ok],
                label=None if kind in labelled else METHOD_NAME.get(kind, kind),
                color=COLORS.get(kind),
                lw=1.4 if len(runs) <= 4 else 0.9,
                alpha=1.0 if len(runs) <= 4 else 0.7,
            )
            labelled.add(kind)
        ax.set_title(f"{mode} {slot}")
        ax.set_xlabel("tokens seen")
        ax.set_ylabel("training loss")
        ax.grid(alpha=0.3)
        ax.legend()
    number = 3 if mode == "scratch" else 4
    fig.suptitle(f"Figure {number}: {mode}-mode loss curves (profile: {profile})")
    save(fig, out)


def stand_in_teachers(root: Path, out: Path, profile: str) -> None:
    """The stand-in teachers' learning curves: training loss per step and the validation loss every `eval_every`
    steps and at the end (summary.json), one panel per slot: is the teacher trained until it flattens?"""
    folders = sorted((p.parent for p in Path(root).glob("*/summary.json")), key=lambda f: slot_key(f.name))
    if not folders:
        raise PitError(f"no stand-in teacher runs under {str(root)!r} (expected {root}/<slot>/summary.json)")
    fig, axes = plt.subplots(1, len(folders), figsize=(4.6 * len(folders), 3.6), squeeze=False)
    for ax, folder in zip(axes[0], folders, strict=True):
        rows, summary = read_jsonl(folder / "metrics.jsonl"), read_json(folder / "summary.json")
        ok = [r for r in rows if math.isfinite(r["loss"])]
        ax.plot([r["step"] for r in ok], [r["loss"] for r in ok], color="tab:gray", lw=0.6, alpha=0.7, label="train")
        val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r] + [(summary["steps"], summary["val_loss"])]
        ax.plot(*zip(*val, strict=True), "o-", color="tab:red", ms=3, label="validation")
        ax.set_title(f"stand-in teacher {folder.name}: val {summary['val_loss']:.3f}")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats/token)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"Stand-in teachers' learning curves (profile: {profile})")
    save(fig, out)


DRIFT_KEYS = (
    ("delta_ti", "Delta_TI = ||W_out E - I||_F"),
    ("raw_cosine", "cosine distance (raw)"),
    ("raw_procrustes", "Procrustes error (raw)"),
    ("raw_angle", "principal angle (raw, rad)"),
)


def drift(root: Path, out: Path, profile: str) -> None:
    """Interface drift: Delta_TI and the raw Table 2 metrics vs step, every run (log scale)."""
    runs = [
        (r.mode, r.slot, r.interface, r.seed, read_jsonl(r.path.parent / "metrics.jsonl"))
        for r, _ in find_runs(root, "summary.json")
    ]
    keys = [(k, t) for k, t in DRIFT_KEYS if any(k in r for *_, rows in runs for r in rows)]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.6 * len(keys), 3.6), squeeze=False)
    styles = {"teacher": "-", "scratch": "--"}
    for ax, (key, title) in zip(axes[0], keys, strict=True):
        for mode, slot, kind, seed, rows in runs:
            pts = [(r["step"], max(r[key], 1e-12)) for r in rows if key in r and math.isfinite(r[key])]
            if pts:
                ax.plot(
                    *zip(*pts, strict=True),
                    styles.get(mode, "-"),
                    color=COLORS.get(kind),
                    lw=1.0,
                    marker=".",
                    ms=3,
                    label=f"{mode} {slot} {METHOD_NAME.get(kind, kind)}" + ("" if seed is None else f" s{seed}"),
                )
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=6, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(f"Interface drift over training (profile: {profile}); PIT sits at round-off")
    save(fig, out)


def decode_trace(checkpoint: str, prompts: list[str]) -> list[list[tuple[str, str]]]:
    """Per prompt, per layer (embedding output first): the last token's state decoded through B_in
    and through B_out, as token text."""
    import torch
    from transformers import AutoTokenizer

    from pit.analysis.layerwise import decode_last_token
    from pit.models.checkpoint import load_model

    model, tok = load_model(checkpoint), AutoTokenizer.from_pretrained(checkpoint)
    trace = []
    with torch.no_grad():
        for prompt in prompts:
            per_layer, _ = decode_last_token(model, torch.tensor([tok(prompt)["input_ids"]]))
            trace.append(
                [(tok.decode([via_in[0].item()]), tok.decode([via_out[0].item()])) for via_in, via_out in per_layer]
            )
    return trace


def trace_panel(ax, traces: list[list[list[tuple[str, str]]]], p: int, labels: list[str], prompt: str) -> None:
    """Prompt p's grid: layers x (model, B_in | B_out), each cell the decoded token, green where the
    two decodings of that model agree at that layer."""
    n_models, n_layers = len(traces), len(traces[0][p])
    cols = [f"{lab}\nB_in" if j == 0 else f"{lab}\nB_out" for lab in labels for j in (0, 1)]
    agree = [
        [traces[c][p][layer][0] == traces[c][p][layer][1] for c in range(n_models) for _ in (0, 1)]
        for layer in range(n_layers)
    ]
    ax.imshow(agree, cmap="RdYlGn", vmin=-0.5, vmax=1.5, aspect="auto")
    for layer in range(n_layers):
        for c in range(n_models):
            for j in (0, 1):
                ax.text(2 * c + j, layer, repr(traces[c][p][layer][j])[1:-1][:10], ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(cols)), cols, fontsize=7)
    ax.set_yticks(range(n_layers), ["emb"] + [f"L{i}" for i in range(1, n_layers)], fontsize=7)
    ax.set_ylabel("layer")
    ax.set_title(repr(prompt)[:40], fontsize=8)


def transition(checkpoints: list[str], labels: list[str], prompts: list[str], out: Path, profile: str) -> None:
    """Figure 2-style trace: per prompt a grid of layers x (model, B_in | B_out) decoded tokens;
    a cell is green where the two decodings of that model agree at that layer."""
    traces = [decode_trace(ckpt, prompts) for ckpt in checkpoints]  # checkpoint -> prompt -> layer
    n_layers = len(traces[0][0])
    fig, axes = plt.subplots(
        1, len(prompts), figsize=(2.3 * 2 * len(checkpoints) * len(prompts) / 1.6, 0.42 * n_layers + 1.6), squeeze=False
    )
    for p, (ax, prompt) in enumerate(zip(axes[0], prompts, strict=True)):
        trace_panel(ax, traces, p, labels, prompt)
    cmap = plt.get_cmap("RdYlGn")
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(v)) for v in (0.75, 0.25)]  # values 1 and 0 on [-0.5, 1.5]
    fig.legend(
        handles,
        ["B_in and B_out decode the same token", "they differ"],
        loc="upper center",
        ncol=2,
        fontsize=8,
        bbox_to_anchor=(0.5, 0.0),
    )
    fig.suptitle(f"Transition trace of the last token (profile: {profile})", fontsize=10)
    save(fig, out)


TASK_MARKERS = ("o", "s", "^", "D")


def side_effects(root: Path, out: Path, profile: str) -> None:
    """Side effect vs in-domain gain: one point per (pretrained run, LoRA task); colour = method,
    marker = task. Left: KL(p_before || p_after); right: validation-loss change. The gain is the drop of the
    reference NLL (nats/token) where every run has it, else the score gain (points)."""
    runs = posttrain_runs(root)
    tasks = sorted({t for r in runs for t in r["lora"]})
    by_nll = all(lora.get("nll_gain") is not None for r in runs for lora in r["lora"].values())
    gain_key, gain_label = (
        ("nll_gain", "in-domain gain: drop of the reference NLL (nats/token)")
        if by_nll
        else ("gain", "in-domain gain over the base model (points)")
    )
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, label in (
        (axes[0], "kl", "KL(before || after), nats/token"),
        (axes[1], "val_loss_change", "validation-loss change (nats)"),
    ):
        for r in runs:
            for task, lora in r["lora"].items():
                ax.scatter(
                    lora[gain_key],
                    lora["side_effects"][key],
                    color=COLORS.get(r["interface"]),
                    marker=TASK_MARKERS[tasks.index(task) % len(TASK_MARKERS)],
                    s=28,
                    alpha=0.8,
                )
        ax.set_xlabel(gain_label)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_yscale("symlog", linthresh=1e-6)
    handles = [
        plt.Line2D([], [], color=c, marker="o", ls="", label=METHOD_NAME[k])
        for k, c in COLORS.items()
        if any(r["interface"] == k for r in runs)
    ]
    handles += [
        plt.Line2D([], [], color="gray", marker=TASK_MARKERS[i % len(TASK_MARKERS)], ls="", label=f"LoRA {t}")
        for i, t in enumerate(tasks)
    ]
    axes[1].legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(f"Side effect vs in-domain gain of every LoRA update (profile: {profile})")
    save(fig, out)


def claim_panel(ax, claim, mode: str, slot: str, task: str, runs: dict[str, dict]) -> None:
    """One claim panel: each seed's value per arm (jittered points), the arm's mean and 95% interval (bar), and
    each PIT arm's verdict against TT."""
    import textwrap

    from pit.reporting.claims import is_pit_arm, t_interval, usable, verdict
    from pit.reporting.tables import method_order

    arms = sorted(runs, key=method_order)
    for x, arm in enumerate(arms):
        vals = list(usable(runs[arm]).values())
        jitter = [x + 0.12 * (i - (len(vals) - 1) / 2) / max(len(vals) - 1, 1) for i in range(len(vals))]
        ax.scatter(jitter, vals, color=COLORS.get(arm, "tab:gray"), s=16, alpha=0.6, zorder=2)
        if vals:
            mean, half = t_interval(vals)
            ax.errorbar(x + 0.25, mean, yerr=0 if math.isnan(half) else half, fmt="o", color=COLORS.get(arm, "k"))
    ax.set_xticks(range(len(arms)), [METHOD_NAME.get(a, a) for a in arms])
    where = f"{mode} {slot}" + (f", LoRA {task}" if task else "")
    ax.set_title(f"{claim.metric} ({where})\npaper: {textwrap.shorten(claim.quote, 56, placeholder='...')}", fontsize=8)
    text = [f"{METHOD_NAME.get(a, a)}: {verdict(claim, a, runs)}" for a in arms if is_pit_arm(a)]
    ax.set_xlabel("; ".join(text), fontsize=7)  # the verdicts against TT
    ax.grid(alpha=0.3)


def claims(results: Path, out_dir: Path, profile: str) -> list[Path]:
    """claims_<group>.png for every group of claims (pit/reporting/claims.py GROUPS): one panel per claim x mode
    (x slot, x LoRA task) with a measured value; a group with none gets a PNG that says so."""
    from pit.reporting.claims import CLAIMS, GROUPS, measure, usable

    values, _ = measure(results)
    written = []
    for group in GROUPS:
        panels = [
            (c, key, runs)
            for c in CLAIMS
            if c.group == group
            for key, runs in values.items()
            if key[0] == c.id and any(usable(v) for v in runs.values())
        ]
        cols = min(4, max(len(panels), 1))
        rows = max(math.ceil(len(panels) / cols), 1)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
        for ax in axes.flat[len(panels) :]:
            ax.axis("off")
        for ax, (c, (_, mode, slot, task), runs) in zip(axes.flat, panels, strict=False):
            claim_panel(ax, c, mode, slot, task, runs)
        if not panels:
            axes[0][0].text(0.5, 0.5, f"nothing measured for the {group} claims", ha="center", va="center")
        fig.suptitle(f"Claims: {group.replace('_', ' ')} (points: seeds; bars: mean and 95% interval; {profile})")
        fig.tight_layout()
        save(fig, out_dir / f"claims_{group}.png")
        written.append(out_dir / f"claims_{group}.png")
    return written

"""The paper's figures from run folders (PNG, matplotlib); `pit figure`.

- `loss-curves --mode scratch` (Figure 3) / `--mode teacher` (Figure 4): training loss vs tokens,
  one panel per slot, one line per interface (PIT, TT, untied): the loss smoothed, its range over seeds as a band,
  the raw per-step loss faint behind (`smoothed_curves`, the one drawing of every training-loss curve).
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
- `parity --decision JSON` (a profile's `decision`, docs/real.md): the arm - reference validation-loss gap against
  training tokens, per seed and as the mean with its 95% t-interval, the parity thresholds dashed.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import EngFormatter, MaxNLocator  # noqa: E402

from pit.arms import arm_kind  # noqa: E402
from pit.errors import PitError  # noqa: E402
from pit.io import atomic_path, read_json, read_jsonl  # noqa: E402
from pit.reporting.tables import (  # noqa: E402
    METHOD_NAME,
    MODE_ORDER,
    TASK_ORDER,
    find_runs,
    method_order,
    posttrain_runs,
    run_paths,
    slot_key,
)
from pit.sidecars import read_run_record  # noqa: E402

COLORS = {
    "pit": "tab:blue",
    "pit-head": "tab:purple",
    "pit-z": "tab:cyan",
    "pit-alg1": "tab:brown",
    "pit-lr10": "tab:pink",
    "tt": "tab:orange",
    "tt-norewarm": "tab:olive",
    "untied": "tab:green",
}
OTHER_COLORS = ("tab:red", "tab:gray", "darkgoldenrod", "teal")  # arms of no entry above, by a stable hash of the name
# per arm a marker and a line style too, so that an arm drawn on top of an identical one (TT under untied in
# teacher mode) still shows: the lower line's markers and the upper line's dashes
ARM_STYLES = {
    "pit": ("o", "-"),
    "pit-head": ("s", "-"),
    "pit-z": ("v", "-"),
    "pit-alg1": ("D", "-."),
    "pit-lr10": ("P", ":"),
    "tt": ("o", "-"),
    "tt-norewarm": ("^", "--"),
    "untied": ("x", "--"),
}
SLOT_STYLES = ("-", "--", ":", "-.")  # drift: line style = slot, in size order
UNIGRAM_STYLE = {"color": "k", "ls": ":", "lw": 1.2}  # the unigram baseline in the loss curves


def arm_color(kind: str) -> str:
    """An arm's colour: COLORS, else one of OTHER_COLORS by a stable hash (the same in every figure)."""
    import zlib

    return COLORS.get(kind) or OTHER_COLORS[zlib.crc32(kind.encode()) % len(OTHER_COLORS)]


def arm_style(kind: str) -> dict:
    """Colour, marker and line style of an arm in the line plots."""
    marker, ls = ARM_STYLES.get(kind, ("d", "-"))
    return {"color": arm_color(kind), "marker": marker, "ls": ls}


def coincident_arms(curves: dict[str, list[tuple[float, float]]], tol: float = 1e-3) -> list[tuple[str, str]]:
    """Pairs of arms whose curves are the same points within `tol` (relative): the figure says so, since one
    line hides the other."""
    pairs = []
    kinds = list(curves)
    for i, a in enumerate(kinds):
        for b in kinds[i + 1 :]:
            ca, cb = curves[a], curves[b]
            if (
                len(ca) == len(cb)
                and ca
                and all(
                    xa == xb and abs(ya - yb) <= tol * max(abs(ya), abs(yb), 1e-12)
                    for (xa, ya), (xb, yb) in zip(ca, cb, strict=True)
                )
            ):
                pairs.append((a, b))
    return pairs


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


def slot_baselines(root: Path, mode: str) -> dict[str, float]:
    """slot -> the unigram entropy of its runs' validation split (pit.reporting.per_seed.unigram_baseline)."""
    from pit.reporting.per_seed import unigram_baseline

    out = {}
    for run in run_paths(root, "run.json"):
        if run.mode == mode and run.slot not in out:
            out[run.slot] = unigram_baseline(read_run_record(run.path))
    return out


def outlier_arms(curves: dict[str, list[float]]) -> list[str]:
    """Arms whose whole curve lies above every other arm's by more than the others' own spread (teacher-mode PIT
    with T = I starts near ln V): drawn on an upper axis of their own so that the others keep a readable scale."""
    high = []
    for kind, ys in curves.items():
        others = [y for k, v in curves.items() if k != kind for y in v]
        if ys and others and min(ys) - max(others) > max(others) - min(others):
            high.append(kind)
    return high


def arm_losses(runs: list[tuple[str, int | None, list[dict]]]) -> dict[str, list[float]]:
    """arm -> every finite training loss of its runs (all seeds)."""
    out: dict[str, list[float]] = {}
    for kind, _, rows in runs:
        out.setdefault(kind, []).extend(r["loss"] for r in rows)
    return out


def break_axis(top, low) -> None:
    """Draw `top` and `low` as one y axis broken between them (diagonal marks on the left and right edges)."""
    top.spines.bottom.set_visible(False)
    low.spines.top.set_visible(False)
    top.tick_params(axis="x", bottom=False, labelbottom=False)
    marks = {"marker": [(-1, -0.5), (1, 0.5)], "markersize": 10, "ls": "none", "color": "k", "mew": 1, "clip_on": False}
    top.plot([0, 1], [0, 0], transform=top.transAxes, **marks)
    low.plot([0, 1], [1, 1], transform=low.transAxes, **marks)


SMOOTH_FRACTION = 0.05  # the EMA's span, as a fraction of a curve's points (docs/workflow.md, "Figures")
SMOOTHING = f"lines: EMA over {SMOOTH_FRACTION:.0%} of the run, band: range over seeds, faint: raw per-step loss"


def smooth(ys: list[float], fraction: float = SMOOTH_FRACTION) -> list[float]:
    """The debiased exponential moving average of a curve (TensorBoard's): m_t = b m_(t-1) + (1 - b) y_t, shown as
    m_t / (1 - b^t), with b = 1 - 2 / (span + 1) and span = fraction x points (b = 0, the curve itself, for a
    curve of fewer than 1 / fraction points). No lag at the start, none from zero-padding."""
    beta = 1 - 2 / (max(fraction * len(ys), 1.0) + 1)
    out, m = [], 0.0
    for t, y in enumerate(ys, 1):
        m = beta * m + (1 - beta) * y
        out.append(m / (1 - beta**t))
    return out


def smoothed_curves(ax, curves: list[tuple[list[float], list[float]]], style: dict, raw: bool = True):
    """One arm's curves (its seeds: (x, y) each): every raw curve faint behind, each smoothed (`smooth`), then
    the mean of the smoothed seeds at each x as the arm's line and their range (min to max) as a band where two or
    more seeds have that x. Returns the line (for the legend)."""
    at: dict[float, list[float]] = {}
    for xs, ys in curves:
        if raw:
            ax.plot(xs, ys, color=style["color"], lw=0.6, alpha=0.2, zorder=1)
        for x, y in zip(xs, smooth(ys), strict=True):
            at.setdefault(x, []).append(y)
    xs = sorted(at)
    (line,) = ax.plot(
        xs, [sum(at[x]) / len(at[x]) for x in xs], **style, ms=4, markevery=max(len(xs) // 12, 1), fillstyle="none"
    )
    if any(len(v) > 1 for v in at.values()):
        low, high = [min(at[x]) for x in xs], [max(at[x]) for x in xs]
        ax.fill_between(xs, low, high, color=style["color"], alpha=0.2, lw=0, zorder=1)
    return line


def arm_curves(runs: list[tuple[str, int | None, list[dict]]], x: str, y: str) -> dict[str, list[tuple[list, list]]]:
    """arm -> its seeds' curves (x values, y values) from metrics.jsonl rows, in run order."""
    out: dict[str, list] = {}
    for kind, _, rows in runs:
        out.setdefault(kind, []).append(([r[x] for r in rows], [r[y] for r in rows]))
    return out


def loss_curves(root: Path, mode: str, out: Path, profile: str) -> None:
    """Figure 3 (scratch) / Figure 4 (teacher) as a PNG (`loss_curves_figure`)."""
    save(loss_curves_figure(root, mode, profile), out)


def loss_curves_figure(root: Path, mode: str, profile: str):
    """Figure 3 (scratch) / Figure 4 (teacher): training loss vs tokens seen, one panel per slot in size order (the
    title names the slots and says lower is better), each arm smoothed with its seed band and its raw loss faint
    behind (`smoothed_curves`), the unigram baseline of the slot's validation split as a dotted line, one legend for
    the figure (colour, marker and line style = arm). An arm far above all others (`outlier_arms`) goes on an upper
    axis of its own (the y axis is broken); a note names arms whose curves coincide (raw, first seed)."""
    slots = runs_by_slot(root, mode)
    order = sorted(slots, key=slot_key)
    baselines = slot_baselines(root, mode)
    finite = {
        s: [(k, seed, [r for r in rows if math.isfinite(r["loss"])]) for k, seed, rows in slots[s]] for s in order
    }
    high = {s: outlier_arms(arm_losses(finite[s])) for s in order}
    broken = any(high.values())
    fig, axes = plt.subplots(
        2 if broken else 1,
        len(order),
        figsize=(max(4.4 * len(order), 7.5), 4.8 if broken else 3.9),
        squeeze=False,
        sharex="col",
        layout="constrained",
        gridspec_kw={"height_ratios": [1, 2.6]} if broken else None,
    )
    handles, notes = {}, []
    for col, slot in enumerate(order):
        low, runs = axes[-1][col], finite[slot]
        curves = {}
        for kind, seeds in arm_curves(runs, "tokens", "loss").items():  # seeds of one arm: one line, one band
            ax = axes[0][col] if kind in high[slot] else low
            handles.setdefault(METHOD_NAME.get(kind, kind), smoothed_curves(ax, seeds, arm_style(kind)))
            curves[kind] = list(zip(*seeds[0], strict=True))  # the first seed's raw curve
        if math.isfinite(baselines.get(slot, math.nan)):
            handles["unigram baseline"] = low.axhline(baselines[slot], **UNIGRAM_STYLE)
        notes += [
            f"{slot}: {METHOD_NAME.get(a, a)} and {METHOD_NAME.get(b, b)} coincide" for a, b in coincident_arms(curves)
        ]
        if broken and high[slot]:
            break_axis(axes[0][col], low)
            axes[0][col].set_title(f"{mode} mode, slot {slot}")
            axes[0][col].grid(alpha=0.3)
        else:
            low.set_title(f"{mode} mode, slot {slot}")
            if broken:
                axes[0][col].axis("off")
        low.set_xlabel("tokens seen")
        low.xaxis.set_major_formatter(EngFormatter(sep=""))  # 200k, not 200000
        low.set_ylabel("training loss (nats/token)\nlower is better")
        low.grid(alpha=0.3)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=min(len(handles), 5), fontsize=9)
    number = 3 if mode == "scratch" else 4
    lines = [
        f"Figure {number}: {mode}-mode training loss, slot{'s' if len(order) > 1 else ''} {', '.join(order)} "
        f"(profile: {profile}); lower is better",
        f"{SMOOTHING}; dotted: unigram baseline (no context)",
    ]
    far = sorted({METHOD_NAME.get(k, k) for v in high.values() for k in v})
    if far:
        lines.append(f"{', '.join(far)}: far above the others, on the upper axis (the y axis is broken)")
    if notes:
        lines.append(f"{'; '.join(notes)} (one line hides the other)")
    fig.suptitle("\n".join(lines), fontsize=11)
    return fig


def stand_in_teachers(root: Path, out: Path, profile: str) -> None:
    """The stand-in teachers' learning curves: training loss per step and the validation loss every `eval_every`
    steps and at the end (summary.json), one panel per slot, with the unigram baseline of the validation split: is
    the teacher trained until it flattens, and below what ignoring context scores?"""
    from pit.reporting.per_seed import unigram_baseline

    folders = sorted((p.parent for p in Path(root).glob("*/summary.json")), key=lambda f: slot_key(f.name))
    if not folders:
        raise PitError(f"no stand-in teacher runs under {str(root)!r} (expected {root}/<slot>/summary.json)")
    fig, axes = plt.subplots(1, len(folders), figsize=(4.6 * len(folders), 3.6), squeeze=False, layout="constrained")
    for ax, folder in zip(axes[0], folders, strict=True):
        rows, summary = read_jsonl(folder / "metrics.jsonl"), read_json(folder / "summary.json")
        ok = [r for r in rows if math.isfinite(r["loss"])]
        train = ([r["step"] for r in ok], [r["loss"] for r in ok])
        smoothed_curves(ax, [train], {"color": "tab:gray", "marker": None, "ls": "-", "label": "train"})
        val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r] + [(summary["steps"], summary["val_loss"])]
        ax.plot(*zip(*val, strict=True), "o-", color="tab:red", ms=3, label="validation")
        base = unigram_baseline(read_run_record(folder / "run.json")) if (folder / "run.json").is_file() else math.nan
        if math.isfinite(base):
            ax.axhline(base, **UNIGRAM_STYLE, label=f"unigram baseline {base:.2f}")
        ax.set_title(f"stand-in teacher, slot {folder.name}: val {summary['val_loss']:.3f}")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats/token, lower is better)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(
        f"Stand-in teachers' learning curves (profile: {profile}); lower is better\n"
        f"train: EMA over {SMOOTH_FRACTION:.0%} of the run, raw loss faint; dotted: unigram baseline"
    )
    save(fig, out)


DRIFT_KEYS = (
    ("delta_ti", "Delta_TI = ||W_out E - I||_F"),
    ("raw_cosine", "cosine distance (raw)"),
    ("raw_procrustes", "Procrustes error (raw)"),
    ("raw_angle", "principal angle (raw, rad)"),
)


def pit_drift_words(summaries: list[dict], runs: list[tuple]) -> str:
    """'largest Delta_TI of a PIT run: 1.9e-05 (40 runs that did not diverge), 8.1e+22 (24 that diverged)': the
    largest finite Delta_TI logged by the runs of PIT arms (arm kind pit), over the runs that did not diverge and
    apart over those that did (summary.json's `diverged` or `diverged_at_step`); '' without PIT runs. The drift
    figure's title says this instead of asserting that PIT stays at round-off."""
    groups: dict[bool, list[float]] = {}
    for summary, (_, _, kind, _, rows) in zip(summaries, runs, strict=True):
        if arm_kind(kind) != "pit":
            continue
        values = [r["delta_ti"] for r in rows if r.get("delta_ti") is not None and math.isfinite(r["delta_ti"])]
        diverged = bool(summary.get("diverged") or summary.get("diverged_at_step") is not None)
        groups.setdefault(diverged, []).append(max(values, default=math.nan))
    words = []
    for diverged, which in ((False, "that did not diverge"), (True, "that diverged")):
        values = [v for v in groups.get(diverged, []) if math.isfinite(v)]
        if values:
            words.append(f"{max(values):.2g} ({len(values)} run{'s' * (len(values) != 1)} {which})")
    return f"largest Delta_TI of a PIT run: {', '.join(words)}" if words else ""


def drift(root: Path, out: Path, profile: str) -> None:
    """The interface drift figure as a PNG (`drift_figure`)."""
    save(drift_figure(root, profile), out)


def drift_figure(root: Path, profile: str):
    """Interface drift: Delta_TI and the raw Table 2 metrics vs step, every run (log scale). One row of panels
    per mode; colour = arm, line style = slot (size order), so each row needs a legend of a few entries. The title
    gives the largest Delta_TI of the PIT runs (`pit_drift_words`)."""
    found = find_runs(root, "summary.json")
    runs = [(r.mode, r.slot, r.interface, r.seed, read_jsonl(r.path.parent / "metrics.jsonl")) for r, _ in found]
    keys = [(k, t) for k, t in DRIFT_KEYS if any(k in r for *_, rows in runs for r in rows)]
    modes = sorted({m for m, *_ in runs}, key=lambda m: MODE_ORDER.get(m, 9))
    fig, axes = plt.subplots(
        len(modes), len(keys), figsize=(4.4 * len(keys) + 1.6, 3.5 * len(modes)), squeeze=False, layout="constrained"
    )
    for row, mode in zip(axes, modes, strict=True):
        mine = [r for r in runs if r[0] == mode]
        slots = sorted({r[1] for r in mine}, key=slot_key)
        for ax, (key, title) in zip(row, keys, strict=True):
            for _, slot, kind, _seed, rows in mine:
                pts = [(r["step"], max(r[key], 1e-12)) for r in rows if key in r and math.isfinite(r[key])]
                if pts:
                    ls = SLOT_STYLES[slots.index(slot) % len(SLOT_STYLES)]
                    ax.plot(*zip(*pts, strict=True), ls, color=arm_color(kind), lw=1.0, marker=".", ms=3)
            ax.set_yscale("log")
            ax.set_title(f"{mode}: {title}", fontsize=11)
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))  # steps: whole numbers
            ax.grid(alpha=0.3)
        arms = sorted({r[2] for r in mine}, key=method_order)
        colour = [plt.Line2D([], [], color=arm_color(k), label=METHOD_NAME.get(k, k)) for k in arms]
        style = [
            plt.Line2D([], [], color="k", ls=SLOT_STYLES[i % len(SLOT_STYLES)], label=slot)
            for i, slot in enumerate(slots)
        ]
        row[-1].legend(handles=colour + style, fontsize=10, loc="center left", bbox_to_anchor=(1.02, 0.5))
    pit = pit_drift_words([summary for _, summary in found], runs)
    fig.suptitle(
        f"Interface drift over training (profile: {profile}){'; ' + pit if pit else ''}; values at 1e-12 are exact "
        "zeros",
        fontsize=13,
    )
    return fig


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


def prompt_title(prompt: str, width: int = 70, lines: int = 3) -> str:
    """A prompt as a panel title, as typed (no escaping): leading spaces shown as an open box, line breaks as a
    return sign, wrapped at `width` characters, at most `lines` lines."""
    import textwrap

    shown = ["\u2423" * (len(line) - len(line.lstrip(" "))) + line.lstrip(" ") for line in prompt.split("\n")]
    out = textwrap.wrap("\u21b5 ".join(shown), width) or [""]
    return "prompt: " + "\n".join(out[:lines]) + (" ..." if len(out) > lines else "")


def trace_panel(ax, traces: list[list[list[tuple[str, str]]]], p: int, labels: list[str], prompt: str) -> None:
    """Prompt p's grid: layers x (model, B_in | B_out), each cell the decoded token, green where the
    two decodings of that model agree at that layer; white rules between cells, wide ones between models, so that
    no colour runs from one model into the next."""
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
                ax.text(2 * c + j, layer, repr(traces[c][p][layer][j])[1:-1][:12], ha="center", va="center", fontsize=9)
    for x in range(1, 2 * n_models):
        ax.axvline(x - 0.5, color="white", lw=10 if x % 2 == 0 else 1.5)
    for y in range(1, n_layers):
        ax.axhline(y - 0.5, color="white", lw=1.5)
    ax.set_xticks(range(len(cols)), cols, fontsize=9)
    ax.set_yticks(range(n_layers), ["emb"] + [f"L{i}" for i in range(1, n_layers)], fontsize=9)
    ax.tick_params(length=0)
    ax.set_ylabel("layer")
    ax.set_title(prompt_title(prompt), fontsize=10, loc="left")


def checkpoint_origin(checkpoint: str) -> str:
    """Which run a checkpoint folder is the final model of, in words ("scratch slot 303m (scratch-tiny)"): the
    mode and slot tags and the model of its run's run.json (beside the folder), else the folder's path."""
    record = Path(checkpoint).parent / "run.json"
    if record.is_file():
        run = read_run_record(record)
        tags, model = run.get("tags", {}), run.get("params", {}).get("train", {}).get("model")
        if tags.get("mode") and tags.get("slot"):
            return f"{tags['mode']} slot {tags['slot']}" + (f" ({Path(model).name})" if model else "")
    return str(checkpoint)


def transition(checkpoints: list[str], labels: list[str], prompts: list[str], out: Path, profile: str) -> None:
    """Figure 2-style trace: per prompt (one row each) a grid of layers x (model, B_in | B_out) decoded tokens;
    a cell is green where the two decodings of that model agree at that layer. The title names the slot (or
    slots) of the checkpoints (`checkpoint_origin`)."""
    traces = [decode_trace(ckpt, prompts) for ckpt in checkpoints]  # checkpoint -> prompt -> layer
    n_layers = len(traces[0][0])
    fig, axes = plt.subplots(
        len(prompts),
        1,
        figsize=(max(1.5 * 2 * len(checkpoints), 7.0), (0.4 * n_layers + 1.3) * len(prompts) + 0.6),
        squeeze=False,
        layout="constrained",
    )
    for p, (ax, prompt) in enumerate(zip(axes[:, 0], prompts, strict=True)):
        trace_panel(ax, traces, p, labels, prompt)
    cmap = plt.get_cmap("RdYlGn")
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(v)) for v in (0.75, 0.25)]  # values 1 and 0 on [-0.5, 1.5]
    fig.legend(
        handles,
        ["B_in and B_out decode the same token", "they differ"],
        loc="outside lower center",
        ncol=2,
        fontsize=10,
    )
    origins = list(dict.fromkeys(checkpoint_origin(c) for c in checkpoints))  # in order, each once
    fig.suptitle(f"Transition trace of the last token: {'; '.join(origins)} (profile: {profile})", fontsize=12)
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
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    gains = [lora[gain_key] for r in runs for lora in r["lora"].values()]
    for ax, key, label in (
        (axes[0], "kl", "KL(before || after), nats/token\n(lower: a smaller side effect)"),
        (axes[1], "val_loss_change", "validation-loss change (nats)\n(lower is better)"),
    ):
        for r in runs:
            for task, lora in r["lora"].items():
                ax.scatter(
                    lora[gain_key],
                    lora["side_effects"][key],
                    color=arm_color(r["interface"]),
                    marker=TASK_MARKERS[tasks.index(task) % len(TASK_MARKERS)],
                    s=28,
                    alpha=0.8,
                )
        ax.set_xlabel(f"{gain_label}; higher is better")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if all(g == 0 for g in gains):  # every point on x = 0: give the axis a range and say why
            ax.set_xlim(-1, 1)
            ax.text(0.03, 0.03, "all gains 0 at this scale", transform=ax.transAxes, ha="left", va="bottom", fontsize=8)
    axes[0].set_yscale("symlog", linthresh=1e-6)
    handles = [
        plt.Line2D([], [], color=arm_color(k), marker="o", ls="", label=METHOD_NAME.get(k, k))
        for k in sorted({r["interface"] for r in runs}, key=method_order)
    ]
    handles += [
        plt.Line2D([], [], color="gray", marker=TASK_MARKERS[i % len(TASK_MARKERS)], ls="", label=f"LoRA {t}")
        for i, t in enumerate(tasks)
    ]
    axes[1].legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(f"Side effect vs in-domain gain of every LoRA update (profile: {profile})")
    save(fig, out)


# the unit on a claim panel's y axis, by per-seed metric key, where the claim's `metric` does not say it
CLAIM_UNITS = {
    "max_delta_ti": "||W_out E - I||_F",
    "raw_cosine": "0 = same directions",
    "polar_cosine": "0 = same directions",
    "val_loss": "nats/token",
    "diverged": "1 = diverged",
    "spikes": "count per run",
    "lens_kl_ratio": "0 = like the last layer, 1 = uniform",
    "lens_ce_gap": "fraction of the last layer's gain",
    "kl_per_gain": "nats of KL per nat of gain",
    "val_change_per_gain": "nats per nat of gain",
    "kl_at_matched_gain": "nats/token",
    "indomain_nll_change": "nats/token",
    "transfer_nll_change": "nats/token",
}


# the direction that is better, by per-seed metric key, where a panel's reader could take it either way
CLAIM_BETTER = {
    "val_loss": "lower is better",
    "indomain_nll_change": "lower is better",
    "transfer_nll_change": "lower is better",
    "kl_at_matched_gain": "lower is better",
}


def claim_ylabel(claim) -> str:
    """The y-axis label of a claim panel: its metric and unit, and which direction is better (CLAIM_BETTER)."""
    unit = "" if "(" in claim.metric else CLAIM_UNITS.get(claim.key, "")  # a metric that names its unit keeps it
    facts = [f for f in (unit, CLAIM_BETTER.get(claim.key, "")) if f]
    return f"{claim.metric} ({'; '.join(facts)})" if facts else claim.metric


def claim_title(claim, mode: str) -> str:
    """A claim's title, with its mode where the title does not name it."""
    return claim.title if claim.title.lower().startswith(mode) else f"{claim.title} ({mode} mode)"


def claim_panel(ax, claim, mode: str, cells: list[tuple[str, str, dict, dict]]) -> set[str]:
    """One claim in one mode: per cell (slot, LoRA task) on the x axis, each arm at its own offset: one dot per seed,
    and where an arm has several seeds its mean with the 95% Student-t interval (bar); the verdicts of each PIT arm
    against TT, counted over the cells, under the axis. `cells`: (slot, task, arm -> seed -> value, arm -> verdict).
    Returns the arms drawn."""
    import textwrap
    from collections import Counter

    from pit.reporting.claims import finite
    from pit.reporting.stats import t_interval

    arms = sorted({a for *_, runs, _ in cells for a in runs}, key=method_order)
    width = 0.8 / max(len(arms), 1)
    values = []
    for x, (_, _, runs, _) in enumerate(cells):
        for i, arm in enumerate(arms):
            vals = list(finite(runs.get(arm, {})).values())
            values += vals
            at = x - 0.4 + width * (i + 0.5)
            if len(vals) == 1:
                ax.scatter([at], vals, color=arm_color(arm), s=36, zorder=3)
            elif vals:
                ax.scatter([at - width * 0.2] * len(vals), vals, color=arm_color(arm), s=12, alpha=0.5, zorder=2)
                mean, half = t_interval(vals)
                ax.errorbar(
                    at + width * 0.15, mean, yerr=half, fmt="o", ms=5, capsize=3, color=arm_color(arm), zorder=3
                )
    ticks = [slot + (f"\n{task}" if task else "") for slot, task, *_ in cells]  # slot, LoRA task
    ax.set_xticks(range(len(cells)), ticks, fontsize=9)
    ax.set_xlim(-0.6, len(cells) - 0.4)
    if values and min(values) > 0 and max(values) / min(values) > 1e3:
        ax.set_yscale("log")  # PIT at round-off beside TT: one decade per tick, not one flat line
    ax.set_title(textwrap.fill(claim_title(claim, mode), 56), fontsize=10)
    ax.set_ylabel(textwrap.fill(claim_ylabel(claim), 34), fontsize=9)
    verdicts: dict[str, Counter] = {}
    for *_, per_row in cells:
        for who, verdict in per_row.items():
            verdicts.setdefault(who, Counter())[verdict] += 1
    lines = [
        f"{who}: " + ", ".join(f"{k} ({n})" if len(cells) > 1 else k for k, n in c.items())
        for who, c in sorted(verdicts.items(), key=lambda kv: ("[primary]" not in kv[0], kv[0]))
    ]
    ax.set_xlabel("\n".join(textwrap.fill(line, 60) for line in lines), fontsize=9)
    ax.grid(alpha=0.3)
    return set(arms)


def panel_order(mode: str, slot: str, task: str | None) -> tuple:
    """Claim panels in reading order: mode, slot by size (not by name: 256m before 1.3b), LoRA task as the
    paper orders them."""
    return MODE_ORDER.get(mode, 9), slot_key(slot), TASK_ORDER.get(task or "", -1), task or ""


def row_label(row) -> tuple[str, str]:
    """(who, verdict) of a claims row for a panel's footer: `PIT vs TT-matched [primary]`, the verdict's kind and
    `fragile` where one seed fewer changes it."""
    from pit.reporting.claims import verdict_kind

    who = f"{METHOD_NAME.get(row['arm'], row['arm'])} vs {METHOD_NAME.get(row['ref'], row['ref'])}"
    fragile = " (fragile)" if str(row["fragile"]).startswith("yes") else ""
    return who + (" [primary]" if row["role"] == "primary" else ""), verdict_kind(row["verdict"]) + fragile


def panel_runs(claim, index, mode: str, part) -> dict:
    """arm -> seed -> value of one panel cell: each row's arm and reference, as the claims table tested them
    (a sweep group's per-seed measure for group rows)."""
    from pit.reporting.claims import Cell, cell_values

    runs = {}
    for r in part.itertuples(index=False):
        if r.kind == "fisher":
            by_arm = index.runs(mode, r.slot, "", claim.key)
            runs.update({a: by_arm.get(a, {}) for a in (r.arm, r.ref)})
        else:
            a, ref, _, _ = cell_values(claim, index, Cell(mode, r.slot, r.lora, r.arm, r.ref, r.role, r.kind))
            runs.setdefault(r.arm, a)
            runs.setdefault(r.ref, ref)
    return runs


def claim_panels(group: str, table, index) -> tuple[list, list[str]]:
    """The panels of a group: (claim, mode, cells) per claim and mode with a measured value, cells in size order;
    and the claims left out because every value of every arm is 0 (nothing to draw)."""
    from pit.reporting.claims import CLAIMS, finite

    panels, zero = [], []
    for c in [c for c in CLAIMS if c.group == group]:
        rows = table[(table["claim"] == c.id) & (table["kind"] != "slope")]
        for mode in sorted(set(rows["mode"]), key=lambda m: MODE_ORDER.get(m, 9)):
            cells = []
            for (slot, task), part in rows[rows["mode"] == mode].groupby(["slot", "lora"], sort=False):
                runs = panel_runs(c, index, mode, part)
                if any(finite(v) for v in runs.values()):
                    cells.append((slot, task, runs, dict(row_label(r) for _, r in part.iterrows())))
            cells.sort(key=lambda cell: panel_order(mode, cell[0], cell[1]))
            if cells and all(v == 0 for *_, runs, _ in cells for r in runs.values() for v in finite(r).values()):
                zero.append(claim_title(c, mode))
            elif cells:
                panels.append((c, mode, cells))
    return panels, zero


def claims_group_figure(group: str, panels: list, zero: list[str], out: Path, profile: str, seeded: bool) -> None:
    """One PNG of a group's claim panels (at most 3 a row), one legend of the arms, and a footnote naming the claims
    not drawn because every value is 0."""
    import textwrap

    modes = {mode for _, mode, _ in panels}
    cols = 2 if len(modes) == 2 and len(panels) > 2 else min(3, max(len(panels), 1))  # teacher | scratch side by side
    rows_n = max(math.ceil(len(panels) / cols), 1)
    size = (5.4 * cols, 4.6 * rows_n + 0.8) if panels else (9.0, 1.6)
    fig, axes = plt.subplots(rows_n, cols, figsize=size, squeeze=False, layout="constrained")
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    arms = set()
    for ax, panel in zip(axes.flat, panels, strict=False):
        arms |= claim_panel(ax, *panel)
    how = "dots: seeds; dot with bar: mean and 95% interval" if seeded else "one run per arm (one seed: no interval)"
    title = [f"Claims: {group.replace('_', ' ')} (profile: {profile}); {how}"]
    if zero:  # in the title, where nothing can overlap it
        title.append(
            textwrap.fill("Not drawn, every value 0 at this scale: " + "; ".join(zero) + ".", max(100, 50 * cols))
        )
    if not panels:
        title.append(f"Nothing else to draw for the {group.replace('_', ' ')} claims.")
    fig.suptitle("\n".join(title), fontsize=12)
    handles = [
        plt.Line2D([], [], color=arm_color(a), marker="o", ls="", label=METHOD_NAME.get(a, a))
        for a in sorted(arms, key=method_order)
    ]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=10)
    save(fig, out)


def claims(results: Path, out_dir: Path, profile: str, study: bool = False, design: dict | None = None) -> list[Path]:
    """claims_<group>.png for every group of claims (pit/reporting/claims.py GROUPS): one panel per claim x mode,
    the cells (slot, LoRA task) along its x axis, from the per-seed table, with the claims table's verdicts; claims
    whose every value is 0 are named under the figure instead of drawn; a group with nothing to draw gets a PNG that
    says so. With `study`, also study_frontier.png and study_teacher_gap.png."""
    from pit.reporting.claims import GROUPS, Design, Index, claims_from_seeds
    from pit.reporting.per_seed import per_seed_table

    seeds = per_seed_table(results)
    index, table = Index(seeds), claims_from_seeds(seeds, Design.from_dict(design))
    seeded = bool(len(table)) and table["n"].max() > 1
    written = []
    for group in GROUPS:
        panels, zero = claim_panels(group, table, index)
        claims_group_figure(group, panels, zero, out_dir / f"claims_{group}.png", profile, seeded)
        written.append(out_dir / f"claims_{group}.png")
    if study:
        from pit.reporting import study_tables

        written.append(frontier_figure(study_tables.frontier(seeds), out_dir / "study_frontier.png", profile))
        written.append(gap_figure(study_tables.teacher_gap(seeds), out_dir / "study_teacher_gap.png", profile))
    return written


def frontier_figure(df, out: Path, profile: str) -> Path:
    """KL on held-out text against in-domain gain, one line per arm through its LoRA learning rates (means over
    seeds), one panel per post-trained cell; the dotted line marks the cell's matched gain."""
    cells = [] if df.empty else list(df.groupby(["mode", "slot", "lora"], sort=False))
    cols = max(min(len(cells), 4), 1)
    fig, axes = plt.subplots(1, cols, figsize=(4.2 * cols, 3.6), squeeze=False, layout="constrained")
    for ax, ((mode, slot, lora), part) in zip(axes.flat, cells, strict=False):
        for arm, line in part.groupby("arm", sort=False):
            line = line.sort_values("lora_lr")  # the path the learning rate traces
            ax.plot(line["gain"], line["kl"], **{**arm_style(arm), "label": METHOD_NAME.get(arm, arm)})
        matched = part["matched_gain"].iloc[0]
        if math.isfinite(matched):
            ax.axvline(matched, color="gray", ls=":", lw=1)
        ax.set_title(f"{mode} {slot}, LoRA {lora}", fontsize=9)
        ax.set_xlabel("in-domain gain (nats/token)")
        ax.set_ylabel("KL on held-out text (nats/token)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if not cells:
        axes[0][0].text(0.5, 0.5, "no LoRA frontier in these results", ha="center", va="center")
    fig.suptitle(f"Side effect against adaptation over LoRA learning rates ({profile})")
    save(fig, out)
    return out


def gap_figure(df, out: Path, profile: str) -> Path:
    """Teacher mode: the validation-loss gap of each arm to its reference against the step, mean over seeds with its
    95% band; one panel per reference (the matched-start control first: PIT's training; then TT: end to end), the
    constant-rate tail's start dotted. Lower is better for the arm; 0 = as good as the reference. Several teacher
    slots (two real teachers): the arm's colour, one line style and marker fill per slot."""
    refs = [] if df.empty else sorted(set(df["ref"]), key=lambda r: (r == "tt", r))
    slots = [] if df.empty else list(dict.fromkeys(df["slot"]))
    by_slot = {s: {"ls": ("-", "--", "-.", ":")[i % 4], "mfc": "white" if i % 2 else None} for i, s in enumerate(slots)}
    fig, axes = plt.subplots(1, max(len(refs), 1), figsize=(6.0 * max(len(refs), 1), 4.2), squeeze=False,
                             layout="constrained")  # fmt: skip
    for ax, ref in zip(axes.flat, refs, strict=False):
        part_ref = df[df["ref"] == ref]
        for (slot, arm), part in part_ref.groupby(["slot", "arm"], sort=False):
            style = {**arm_style(arm), **(by_slot[slot] if len(slots) > 1 else {})}
            ax.plot(part["step"], part["gap"], **{**style, "label": f"{METHOD_NAME.get(arm, arm)} ({slot})"})
            ax.fill_between(part["step"], part["gap_ci_low"], part["gap_ci_high"], color=style["color"], alpha=0.15)
        tail = part_ref["tail_start"].dropna()
        if len(tail):
            ax.axvline(tail.iloc[0], color="gray", ls=":", lw=1, label="constant-rate tail")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlabel("continued-pretraining step")
        ax.set_ylabel(f"validation loss - {METHOD_NAME.get(ref, ref)}'s (nats/token)\n(below 0: better than it)")
        ax.set_yscale("symlog", linthresh=0.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        what = "PIT's training (same function at step 0)" if ref != "tt" else "end to end (TT keeps the teacher)"
        ax.set_title(f"gap to {METHOD_NAME.get(ref, ref)}: {what}", fontsize=9)
    if df.empty:
        axes[0][0].text(0.5, 0.5, "no teacher-mode learning curves", ha="center", va="center",
                        transform=axes[0][0].transAxes)  # fmt: skip
    fig.suptitle(f"Teacher mode: does the gap close? ({profile})")
    save(fig, out)
    return out


def parity(results: Path, d: dict, out: Path, profile: str) -> Path:
    """The decision (pit.reporting.decision): arm - ref of the validation loss against training tokens, one thin
    line per seed, the mean over seeds with its 95% t-interval, the parity thresholds dashed. Below 0: the arm is
    better; the curve's crossing of a threshold (for good) is the tokens-to-parity table's entry."""
    from pit.reporting.decision import gaps, trajectory
    from pit.reporting.per_seed import per_seed_table

    seeds = per_seed_table(results, ("pretrain",))
    by_seed, tokens = gaps(seeds, d)
    traj = trajectory(seeds, d)
    fig, ax = plt.subplots(figsize=(7.0, 4.4), layout="constrained")
    color = arm_color(d["arm"])
    for seed, g in by_seed.items():
        steps = sorted(g)
        ax.plot([s * tokens[seed] for s in steps], [g[s] for s in steps], color=color, alpha=0.35, lw=0.9)
    ax.plot(traj["tokens"], traj["gap"], color=color, lw=2, marker="o", ms=3,
            label=f"{METHOD_NAME.get(d['arm'], d['arm'])} - {METHOD_NAME.get(d['ref'], d['ref'])}, mean of "
            f"{len(by_seed)} seeds (thin: each seed)")  # fmt: skip
    ax.fill_between(traj["tokens"], traj["t_low"], traj["t_high"], color=color, alpha=0.2, label="95% t-interval")
    for threshold in d["thresholds"]:
        ax.axhline(threshold, color="gray", ls="--", lw=0.8)
        ax.text(ax.get_xlim()[1], threshold, f" {threshold:g}", va="center", fontsize=7, color="gray")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_yscale("symlog", linthresh=0.05)
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.set_xlabel("continued-pretraining tokens")
    ax.set_ylabel(f"validation loss - {METHOD_NAME.get(d['ref'], d['ref'])}'s (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"Tokens to parity: {d['slot']} ({profile}); dashed: the parity thresholds", fontsize=9)
    save(fig, out)
    return out

"""What people read: runtimes formatted in the .md/.tex/.html tables, the paper's columns beside ours and each table's
notes with it; the figures' reading aids (prompts as typed, panels in size order, coinciding curves named, zero gains
shown, claims collapsed per claim and mode, an outlying arm on its own axis); REPORT.md's order and captions."""

import json
import re
from pathlib import Path

import numpy as np
from PIL import Image

from pit.reporting.figures import coincident_arms, panel_order, prompt_title, side_effects
from pit.reporting.tables import format_duration, runtime_seconds


def test_runtimes_are_seconds_in_csv_and_read_as_durations():
    assert runtime_seconds("1h 24m") == 5040.0 and runtime_seconds("0m 09s") == 9.0 and runtime_seconds(None) is None
    shown = [format_duration(s) for s in (7.34, 9.0, 42.4, 90.0, 599.6, 5040.0, 13779.0, float("nan"), None)]
    assert shown == ["7.3s", "9s", "42s", "1m 30s", "10m 00s", "1h 24m", "3h 50m", "", ""]


def test_prompt_titles_are_unescaped_wrapped_and_short():
    title = prompt_title("def main(argv=None):\n    parser = argparse." + " word" * 40)
    assert title.startswith("prompt: def main(argv=None):\u21b5 \u2423\u2423\u2423\u2423parser = argparse.")
    assert "\\n" not in title and "'" not in title
    lines = title.split("\n")
    assert len(lines) == 3 and lines[-1].endswith(" ...") and all(len(line) <= 80 for line in lines)


def test_panels_sort_by_size_and_identical_curves_are_named():
    slots = sorted(["1.3b", "256m", "590m"], key=lambda s: panel_order("teacher", s, None))
    assert slots == ["256m", "590m", "1.3b"]
    assert panel_order("teacher", "1.3b", "mbpp") < panel_order("scratch", "303m", "mbpp")
    curve = [(1, 4.0), (2, 3.5)]
    curves = {"tt": curve, "untied": [(1, 4.0), (2, 3.5 + 1e-6)], "pit": [(1, 10.0), (2, 9.9)]}
    assert coincident_arms(curves) == [("tt", "untied")]


def test_side_effects_figure_shows_points_when_every_gain_is_zero(tmp_path):
    for kind, kl in (("pit", 1e-5), ("tt", 0.02)):
        run = tmp_path / "runs" / "teacher" / "256m" / kind / "mbpp"
        for sub in ("eval", "base"):
            (run / sub).mkdir(parents=True)
            result = {"task": "mbpp", "pass@1": 0.0, "n": 2, "passed": 0, "standin": False}  # no NLL: score gains
            (run / sub / "mbpp.json").write_text(json.dumps(result))
        fx = {"kl": kl, "val_loss_change": kl / 2, "embedding_change": 0.0, "head_change": 0.0}
        (run / "side_effects.json").write_text(json.dumps(fx))
    out = tmp_path / "side_effects.png"
    side_effects(tmp_path / "runs", out, "test")
    image = np.asarray(Image.open(out).convert("RGB")).astype(int)
    orange = (abs(image[..., 0] - 255) < 40) & (abs(image[..., 1] - 127) < 40) & (image[..., 2] < 60)
    assert orange.sum() > 20, "the TT points (orange) are not drawn"


def _seeds_table(values: dict):
    """A per-seed table (pit.reporting.per_seed's columns) of one seed: (mode, slot, arm, metric) -> value, with the
    lr, unigram entropy and ln V that every run carries."""
    import pandas as pd

    rows = []
    for (mode, slot, arm, metric), value in values.items():
        rows.append({"mode": mode, "slot": slot, "group": slot, "arm": arm, "seed": 0, "lora": "", "metric": metric,
                     "value": value})  # fmt: skip
    for mode, slot, arm in {k[:3] for k in values}:
        for metric, value in (("lr", 1e-3), ("unigram_entropy", 6.0), ("log_vocab", 10.0)):
            rows.append({"mode": mode, "slot": slot, "group": slot, "arm": arm, "seed": 0, "lora": "",
                         "metric": metric, "value": value})  # fmt: skip
    return pd.DataFrame(rows)


def test_claims_figure_draws_one_panel_per_claim_and_mode_and_names_all_zero_claims(tmp_path):
    """Panels collapse the slots of a claim and mode onto one x axis (size order), label the unit, and a claim whose
    every value is 0 is named instead of drawn; the figure is written."""
    from pit.reporting.claims import Index, claims_from_seeds
    from pit.reporting.figures import claim_panels, claim_ylabel, claims_group_figure

    values = {}
    for slot, base in (("1.3b", 4.0), ("256m", 5.0)):
        for arm, extra in (("tt", 0.0), ("pit", 5.0), ("untied", 0.1)):
            values[("teacher", slot, arm, "val_loss")] = base + extra
            values[("teacher", slot, arm, "early_rise_excess")] = 0.0
    seeds = _seeds_table(values)
    index, table = Index(seeds), claims_from_seeds(seeds)
    panels, zero = claim_panels("training", table, index)
    assert [(c.id, mode, [cell[0] for cell in cells]) for c, mode, cells in panels] == [
        ("teacher_val_loss", "teacher", ["256m", "1.3b"])
    ]
    assert claim_ylabel(panels[0][0]) == "val loss (nats/token; lower is better)"
    assert zero == ["Teacher mode: PIT more stable early (Fig. 4)"]
    out = tmp_path / "claims_training.png"
    claims_group_figure("training", *claim_panels("training", table, index), out, "test", seeded=False)
    assert Image.open(out).size[0] > 300


def test_loss_curves_are_smoothed_with_a_seed_band_and_name_their_slot_and_direction(tmp_path):
    """Every training-loss curve is drawn by one helper, `smoothed_curves`: each seed's raw per-step loss faint
    behind, the mean of the seeds' debiased EMAs (`smooth`) as the arm's line, their range as a band. Figures 3/4
    name their slots and say that lower is better; so do the NLL-change claim panels, and Figure 2 names the slot
    its checkpoints come from."""
    import math

    import matplotlib.pyplot as plt
    import pytest

    from pit.reporting.claims import CLAIMS
    from pit.reporting.figures import checkpoint_origin, claim_ylabel, loss_curves_figure, smooth, smoothed_curves

    assert smooth([4.0, 1.0], fraction=1.0) == pytest.approx([4.0, 1.75])  # span 2: b = 1/3, debiased from step 1
    assert smooth([3.0, 1.0, 2.0]) == [3.0, 1.0, 2.0]  # fewer than 1 / 5% points: nothing to average
    fig, ax = plt.subplots()
    line = smoothed_curves(ax, [([1, 2, 3], [4.0, 1.0, 1.0]), ([1, 2, 3], [2.0, 1.0, 1.0])], {"color": "k"})
    assert [a.get_alpha() for a in ax.lines] == [0.2, 0.2, None] and list(line.get_ydata()) == [3.0, 1.0, 1.0]
    band = ax.collections[0].get_paths()[0].vertices
    assert {(1.0, 2.0), (1.0, 4.0), (3.0, 1.0)} <= {tuple(v) for v in band}  # seeds' min and max at each x
    plt.close(fig)

    for arm, seed in [(a, s) for a in ("pit", "tt") for s in (0, 1)]:
        run = tmp_path / "runs" / "teacher" / "256m" / arm / f"seed{seed}"
        run.mkdir(parents=True)
        rows = [{"step": s, "tokens": 64 * (s + 1), "loss": 5 + math.sin(s) + seed} for s in range(40)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run / "summary.json").write_text("{}")
        (run / "run.json").write_text(json.dumps({"tags": {"mode": "teacher", "slot": "256m"}, "params": {}}))
    fig = loss_curves_figure(tmp_path / "runs", "teacher", "test")
    title, (ax,) = fig._suptitle.get_text(), fig.axes
    assert title.startswith("Figure 4: teacher-mode training loss, slot 256m (profile: test); lower is better\n")
    assert "band: range over seeds, faint: raw per-step loss" in title and ax.get_title() == "teacher mode, slot 256m"
    assert "lower is better" in ax.get_ylabel()
    losses = [[5 + math.sin(s) + seed for s in range(40)] for seed in (0, 1)]
    mean = [(a + b) / 2 for a, b in zip(smooth(losses[0]), smooth(losses[1]), strict=True)]
    assert len(ax.lines) == 6 and list(ax.lines[2].get_ydata()) == pytest.approx(mean)  # TT: 2 raw, then its line
    plt.close(fig)

    nll = [c for c in CLAIMS if c.key in ("indomain_nll_change", "transfer_nll_change")]
    assert nll and all(claim_ylabel(c).endswith("; lower is better)") for c in nll)
    final = tmp_path / "runs" / "teacher" / "256m" / "pit" / "seed0" / "final"
    assert checkpoint_origin(str(final)) == "teacher slot 256m"
    assert checkpoint_origin(str(tmp_path / "elsewhere" / "final")) == str(tmp_path / "elsewhere" / "final")


def test_an_arm_far_above_the_others_gets_its_own_axis():
    """Teacher-mode PIT with T = I (near ln V) lies above the others by more than their spread; scratch-mode PIT,
    whose curve starts where the others do, does not."""
    from pit.reporting.figures import outlier_arms

    teacher = {"tt": [4.9, 4.1, 4.6], "pit": [10.8, 10.6], "pit-head": [4.9, 4.0], "untied": [4.9, 4.2]}
    assert outlier_arms(teacher) == ["pit"]
    assert outlier_arms({"tt": [10.0, 6.5], "pit": [10.0, 9.7], "untied": [10.0, 6.6]}) == []


def test_tables_put_paper_columns_beside_ours_and_carry_their_notes(tmp_path):
    import pandas as pd

    from pit.reporting.tables import paper_beside, write_table

    df = pd.DataFrame({"mode": ["teacher"], "slot": ["256m"], "method": ["TT"], "train_loss": [4.5],
                       "runtime_s": [6.5], "raw_cosine": [0.7], "paper_train_loss": [2.3], "paper_runtime_s": [5040.0],
                       "paper_cosine": [0.1]})  # fmt: skip
    assert list(paper_beside(df).columns) == ["mode", "slot", "method", "train_loss", "paper_train_loss",
                                              "runtime_s", "paper_runtime_s", "raw_cosine", "paper_cosine"]  # fmt: skip
    write_table(df, tmp_path / "table1", "table1", "test")
    page = (tmp_path / "table1.html").read_text()
    assert page.index("first_loss = training loss of the first step") < page.index("<table>")  # notes first
    assert '<th class="paper">paper_train_loss</th>' in page
    assert "first_loss = training loss of the first step" in (tmp_path / "table1.md").read_text()
    assert json.loads((tmp_path / "table1.json").read_text())["notes"][0].startswith("first_loss = ")


def test_table4_counts_its_zero_scores_instead_of_saying_every_one_is_0(tmp_path):
    """The old note said 'every score above is 0' whatever the scores were (the committed study has six SVAMP
    scores of 5%). The note is computed from the table's own score columns: 'every' only when every one is 0."""
    import pandas as pd

    from pit.reporting.tables import write_table

    df = pd.DataFrame({"mode": ["teacher"] * 2, "slot": ["256m"] * 2, "method": ["TT", "PIT"], "seed": [0, 0],
                       "mbpp": [0.0, 0.0], "paper_mbpp": [1.0, 2.0], "problems_mbpp": [20, 20],
                       "svamp": [5.0, 0.0], "problems_svamp": [20, 20]})  # fmt: skip
    write_table(df, tmp_path / "table4_scores", "table4_scores", "test")
    md = (tmp_path / "table4_scores.md").read_text()
    assert "3 of 4 scores above are 0; not 0: svamp 1 of 2." in md and "every score above is 0" not in md.lower()
    write_table(df.assign(svamp=0.0), tmp_path / "zero", "table4_scores", "test")
    assert "Every score above is 0 (4 scores)." in (tmp_path / "zero.md").read_text()


def test_table1_notes_state_no_fact_of_a_particular_run():
    """Table 1's notes are the same for every run, so they describe how to read it and point to where a fact is
    measured: not 'the TT loss rises early, and the untied arm the same way' (the committed study's TT shows no rise
    above its noise in any seed) nor a starting loss."""
    from pit.reporting.tables import table_notes

    notes = " ".join(table_notes("table1", seeded=True))
    assert "rises the same way" not in notes and "starts far above" not in notes
    assert "the claims table's early-rise row (`early_rise_excess`, `untied_*`, `control_*`)" in notes


def drift_runs(root: Path) -> None:
    """Run folders whose PIT runs are not all at round-off: one finished PIT run at 2e-6, one at a high rate that
    finished at 4.5 without diverging, one diverged at 1e20; TT at 500."""
    for slot, arm, deltas, summary in (("303m", "pit", [1e-7, 2e-6], {}), ("303m-lr5e-2", "pit", [1e-3, 4.5], {}),
                                       ("303m-lr1", "pit", [1e3, 1e20, float("nan")], {"diverged": "stuck"}),
                                       ("303m", "tt", [100.0, 500.0], {})):  # fmt: skip
        run = root / "scratch" / slot / arm / "seed0"
        run.mkdir(parents=True)
        rows = [{"step": 50 * i, "delta_ti": d} for i, d in enumerate(deltas)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run / "summary.json").write_text(json.dumps(summary))


def test_the_drift_figure_says_how_far_pit_drifted_instead_of_round_off(tmp_path):
    """The old title and caption said 'PIT stays at round-off' of every run; in the committed study PIT's Delta_TI
    reached 4.5 at a rate where it did not diverge and 1e22 where it did. The title gives the largest Delta_TI of
    the PIT runs, apart for the diverged ones, and the caption points to it."""
    import matplotlib.pyplot as plt

    from pit.reporting.figures import drift_figure

    drift_runs(tmp_path)
    fig = drift_figure(tmp_path, "test")
    title = fig._suptitle.get_text()
    plt.close(fig)
    assert "round-off" not in title
    assert "largest Delta_TI of a PIT run: 4.5 (2 runs that did not diverge), 1e+20 (1 run that diverged)" in title
    caption = (Path(__file__).resolve().parents[1] / "workflow/report/drift.rst").read_text()
    assert "round-off" not in caption and "the title gives the largest Delta_TI of the PIT runs" in caption


def test_captions_leave_facts_of_the_run_to_the_computed_titles(tmp_path):
    """A caption is one text for every run: the loss curves' caption says when an arm gets its own axis (the title
    names it, `outlier_arms` decides), not that teacher-mode PIT always does (the committed study's Figure 4 has no
    broken axis); the teacher-gap caption names both references its figure draws."""
    import math

    import matplotlib.pyplot as plt

    from pit.reporting.figures import loss_curves_figure

    for arm, start in (("pit", 8.0), ("tt", 4.3)):  # PIT starts near ln V and comes down among the others
        run = tmp_path / "runs" / "teacher" / "256m" / arm / "seed0"
        run.mkdir(parents=True)
        rows = [{"step": s, "tokens": 64 * (s + 1), "loss": 4.0 + (start - 4.0) * math.exp(-s / 5)} for s in range(40)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run / "summary.json").write_text("{}")
        (run / "run.json").write_text(json.dumps({"tags": {"mode": "teacher", "slot": "256m"}, "params": {}}))
    fig = loss_curves_figure(tmp_path / "runs", "teacher", "test")
    assert "far above the others" not in fig._suptitle.get_text() and len(fig.axes) == 1  # no broken axis
    plt.close(fig)
    folder = Path(__file__).resolve().parents[1] / "workflow/report"
    curves = (folder / "loss_curves.rst").read_text()
    assert "teacher-mode PIT with the paper's init" not in curves and "the figure's title names it" in curves
    assert "to the matched-start control" in (folder / "teacher_gap.rst").read_text()


def test_table4_says_the_decoding_its_scores_were_made_with(tmp_path):
    """The note under Table 4 (scores) comes from the `protocol` of the score files it reads: the decoding, each
    set's stop strings and prompt template hash; files written before the protocol existed are counted."""
    from pit.reporting.tables import decoding_notes

    decoding = {"shots": 0, "greedy": True, "max_new_tokens": 32, "batch_size": 8}
    for sub, task, stop in (("eval", "mbpp", ["[DONE]", "\nassert"]), ("base", "humaneval", ["\ndef"])):
        folder = tmp_path / "teacher" / "256m" / "pit" / "mbpp" / sub
        folder.mkdir(parents=True, exist_ok=True)
        protocol = {"task": task, "decoding": {**decoding, "stop": stop}, "prompt": {"template_sha256": task * 4}}
        (folder / f"{task}.json").write_text(json.dumps({"task": task, "protocol": protocol}))
        (folder / f"{task}.lm_eval.json").write_text("{}")
    (tmp_path / "teacher" / "256m" / "pit" / "mbpp" / "base" / "mbpp.json").write_text("{}")  # an older file
    (note,) = decoding_notes(tmp_path)
    assert note.startswith("Decoding (the `protocol` of each score file, `<set>.json` and `<set>.lm_eval.json`): "
                           "0-shot, greedy, at most 32 new tokens (batch 8); one completion per problem (pass@1); it "
                           'stops at the first of the set\'s stop strings (mbpp: `"[DONE]"`, `"\\nassert"`; humaneval: '
                           '`"\\ndef"`).')  # fmt: skip
    assert "(sha256 mbpp mbppmbppmbpp, humaneval humanevalhum; docs/evaluation.md)" in note
    assert note.endswith("1 of 3 score files record no protocol (written before it existed).")


def test_report_opens_with_summary_and_provenance_and_captions_its_figures(tmp_path):
    """REPORT.md: summary, provenance, what was run, then the tables (with their notes) and the figures (with the
    HTML report's captions); REPORT.html embeds the figures. Models that end above the unigram entropy are said to
    be worse than a unigram model, in plain words."""
    import yaml

    from pit.reporting.report import build_report, describe_profile, learned, report_html
    from pit.reporting.tables import table3, write_table

    root = Path(__file__).resolve().parent.parent
    tables, figures = tmp_path / "tables", tmp_path / "figures"
    write_table(table3(), tables / "table3", "table3", "default")
    figures.mkdir()
    Image.new("RGB", (8, 8), "white").save(figures / "figure3_scratch_loss.png")
    (tables / "stability.md").write_text("**Stability.** Profile: `default`.\n")  # no sweep in this profile:
    (tables / "stability.csv").write_text("\n")  # a table with no rows, left out of the report
    config = json.loads(json.dumps(yaml.safe_load((root / "config/config.yaml").read_text()), sort_keys=True))
    text = build_report(config, tables, figures, tmp_path / "REPORT.md", None, root / "workflow/report")
    assert text.startswith("# PIT reproduction report: profile `default`\n\n## Summary\n")
    order = ["## Summary", "Comparable with the paper: only Table 3", "## Provenance", "## What was run", "## Table 3",
             "The XL row reads Eq. 17", "## Figures", "![figure3_scratch_loss](figures/figure3_scratch_loss.png)",
             "*Figures 3 and 4: training loss against tokens seen"]  # fmt: skip
    assert [text.index(x) for x in order] == sorted(text.index(x) for x in order) and "## Stability" not in text
    assert re.search(r"\n- Steps: teacher \d+, scratch \d+; global batch", text)
    real = yaml.safe_load((root / "config/real.yaml").read_text())  # no scratch slot: its steps are not listed
    assert any(re.match(r"- Steps: teacher 200; global batch", line) for line in describe_profile(real))
    slots = [line.split()[3] for line in text.splitlines() if line.startswith("- teacher slot")]
    assert slots == ["256m:", "590m:", "1.3b:"]  # size order, not the sorted keys of the config the pipeline passes
    page = report_html(text)
    assert "<h2>Summary</h2>" in page and '<img src="figures/figure3_scratch_loss.png" alt="[figure figure3' in page
    for slot, loss in (("303m", 6.5), ("613m", 7.0)):
        run = tmp_path / "pretrain/scratch" / slot / "tt"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({"val_loss": loss}))
    assert learned(tmp_path / "pretrain", "scratch", 6.3).startswith("- Every scratch-mode model ends worse than a")
    per_slot = learned(tmp_path / "pretrain", "scratch", {"303m": 6.3, "613m": 7.5})  # two tokenizers: each its own
    assert per_slot.startswith("- 1 of 2 scratch-mode models end worse than a unigram model (arms tt)")
    assert per_slot.endswith("against the unigram entropy of each slot's validation split (303m 6.300, 613m 7.500).")


def test_every_figure_of_every_profile_has_its_caption_file():
    """The HTML report (the workflow's `figure_output`) and REPORT.md (`pit report`) find a figure's caption by one
    rule, `caption_name`: every figure a profile draws has that file."""
    import yaml

    from pit.pipeline.profile import Profile
    from pit.reporting.captions import caption_name

    root = Path(__file__).resolve().parents[1]
    figures = set()
    for name in ("config.yaml", "study.yaml", "study-gpu.yaml", "paper.yaml"):
        figures |= set(Profile(yaml.safe_load((root / "config" / name).read_text())).figures)
    captions = {stem: caption_name(stem) for stem in figures}
    assert len(figures) == 14 and len(set(captions.values())) == 8, captions
    assert captions["claims_posttrain"] == "claims" and captions["figure3_scratch_loss"] == "loss_curves"
    assert caption_name("figure{number}_{mode}_loss") == "loss_curves"  # the pattern the workflow's rule names
    assert captions["study_frontier"] == "frontier" and captions["interface_drift"] == "drift"
    folder = root / "workflow" / "report"
    missing = [stem for stem, name in sorted(captions.items()) if not (folder / f"{name}.rst").is_file()]
    assert not missing, missing

"""A profile's `decision` (docs/real.md, pit/reporting/decision.py): the gap along training with exact tests, the
tokens to parity per seed with a distribution-free interval, the final models' scores as they are, the side-by-side
generations, and the workflow rules that make them (a dry run: which jobs, which files)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import job_counts, snakemake, write_config

from pit.commands import main
from pit.io import write_json, write_text
from pit.reporting.decision import final_scores, median_interval, parity, parity_step, trajectory
from pit.reporting.per_seed import per_seed_table

DECISION = {"slot": "s", "arm": "pit-head", "ref": "tt", "thresholds": [0.05, 0.1, 0.25], "tasks": ["humaneval"]}
STEPS = [0, 25, 50, 75, 100, 125, 150, 175, 200]
GAP = [3.35, 1.0, 0.5, 0.3, 0.2, 0.12, 0.08, 0.06]  # pit-head - TT at STEPS[:-1]; at 200: 0.04 + 0.01 x seed
SEEDS = 6


def write_curve(root: Path, arm: str, seed: int, losses: list[float]) -> None:
    """A teacher-mode run: its loss before training (summary's initial_val_loss), validation losses every 25 steps,
    512 training tokens per step."""
    where = root / "pretrain/teacher/s" / arm / f"seed{seed}"
    rows = [{"step": s, "loss": 3.0, "val_loss": v} for s, v in zip(STEPS[1:], losses[1:])]
    write_text(where / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    summary = {"steps": 200, "val_loss": losses[-1], "initial_val_loss": losses[0], "first_step_loss": losses[0]}
    write_json(where / "summary.json", {**summary, "final_train_loss": 3.0, "mode": "teacher"})
    write_json(where / "run.json", {"params": {"train": {"global_batch_tokens": 512, "decay_steps": 150}}})


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    for seed in range(SEEDS):
        write_curve(root, "tt", seed, [2.5] * 9)
        write_curve(root, "pit-head", seed, [2.5 + g for g in [*GAP, 0.04 + 0.01 * seed]])
        write_json(root / "posttrain/teacher/s/pit-head" / f"seed{seed}/final-eval/humaneval.json",
                   {"task": "humaneval", "pass@1": 2.5 * (seed % 2), "n": 40, "nll": 1.10 + 0.01 * seed})  # fmt: skip
        write_json(root / "posttrain/teacher/s/tt" / f"seed{seed}/final-eval/humaneval.json",
                   {"task": "humaneval", "pass@1": 0.0, "n": 40, "nll": 1.00 + 0.02 * seed})  # fmt: skip
    write_json(root / "teachers/s/eval/humaneval.json", {"task": "humaneval", "pass@1": 0.0, "n": 40, "nll": 1.04})
    return root


def test_parity_is_the_first_step_from_which_the_gap_stays_within_the_threshold():
    gap = {0: 3.0, 25: 0.04, 50: 0.3, 75: 0.09, 100: 0.05}
    assert parity_step(gap, 0.1) == 75  # within at 25, out again at 50: parity only from 75 on
    assert parity_step(gap, 0.05) == 100
    assert parity_step(gap, 5.0) == 0
    assert parity_step({**gap, 125: 0.2}, 0.1) == math.inf  # above at the end: not within the budget
    assert parity_step({0: -1.0, 25: float("nan")}, 0.1) == math.inf  # a NaN gap is not "within"


def test_median_interval_from_order_statistics():
    """k = 1 for n = 6: [min, max] covers the median with 1 - 2/64; n = 5 reaches no 95% interval; a seed beyond the
    budget (inf) censors above, and the interval says so."""
    median, low, high, coverage = median_interval([5.0, 1.0, 3.0, 2.0, 4.0, 6.0])
    assert (median, low, high) == (3.5, 1.0, 6.0) and coverage == pytest.approx(1 - 2 / 64)
    median, low, high, coverage = median_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert median == 3.0 and math.isnan(low) and coverage == pytest.approx(1 - 2 / 32)
    median, low, high, _ = median_interval([1.0, 2.0, 3.0, math.inf, math.inf, math.inf])
    assert median == math.inf and (low, high) == (1.0, math.inf)
    ks = [k for n in range(6, 12) for k in [median_interval(list(map(float, range(n))))[1]]]
    assert ks == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]  # k = 2 from n = 9 (coverage 1 - 2 x 10/512 = 0.961)


def test_trajectory_rows_are_exact_paired_tests_at_every_validation_step(results):
    seeds = per_seed_table(results, ("pretrain",))
    t = trajectory(seeds, DECISION)
    assert list(t["step"]) == STEPS and list(t["tokens"]) == [s * 512 for s in STEPS]
    assert (t["n"] == SEEDS).all()
    first, last = t.iloc[0], t.iloc[-1]
    assert first["gap"] == pytest.approx(3.35) and first["p"] == pytest.approx(2 / 64)  # every seed +3.35
    assert (first["exact_low"], first["exact_high"]) == pytest.approx((3.35, 3.35))
    assert first["p_holm"] == pytest.approx(9 * 2 / 64) and first["reading"] == "pit-head higher (pointwise only)"
    assert last["gap"] == pytest.approx(0.065)  # 0.04 + 0.01 x mean(0..5)
    assert last["exact_low"] == pytest.approx(0.04) and last["exact_high"] == pytest.approx(0.09)


def test_parity_table_per_seed_and_over_seeds(results):
    p = parity(per_seed_table(results, ("pretrain",)), DECISION).set_index("threshold")
    assert p.loc[0.25, "median_tokens"] == 100 * 512 and p.loc[0.25, "reached"] == SEEDS
    assert p.loc[0.1, "median_tokens"] == 150 * 512 and (p.loc[0.1, "low"], p.loc[0.1, "high"]) == (76800, 76800)
    # 0.05: seeds 0 and 1 end at 0.04 / 0.05 (within from step 200), seeds 2-5 end above it
    row = p.loc[0.05]
    assert [row[f"seed{s}"] for s in range(SEEDS)] == [102400, 102400] + [math.inf] * 4
    assert row["reached"] == 2 and row["median_tokens"] == math.inf and row["budget_tokens"] == 102400
    assert row["coverage"] == pytest.approx(1 - 2 / 64)


def test_final_scores_of_the_teacher_and_both_arms(results):
    f = final_scores(results, DECISION).set_index("row")
    assert f.loc["teacher", "n"] == 1 and f.loc["teacher", "nll"] == pytest.approx(1.04)
    assert f.loc["pit-head", "score"] == pytest.approx(1.25) and f.loc["tt", "score"] == 0.0
    assert (f["resolution_points"] == 2.5).all()
    diff = f.loc["pit-head - tt"]  # nll 1.10 + 0.01 s - (1.00 + 0.02 s): +0.1 - 0.01 s, positive for every seed
    assert diff["nll"] == pytest.approx(0.075) and diff["nll_p"] == pytest.approx(2 / 64)
    assert diff["nll_low"] == pytest.approx(0.05) and diff["nll_high"] == pytest.approx(0.1)
    assert f.loc["tt - teacher", "nll"] == pytest.approx(1.05 - 1.04)


def test_cli_tables_and_figure(results, tmp_path, capsys):
    decision = json.dumps(DECISION)
    for name in ("trajectory", "parity", "final_scores"):
        out = tmp_path / "tables" / name
        assert main(["table", name, "--runs", str(results), "--profile", "t", "--out", str(out), "--decision",
                     decision]) == 0  # fmt: skip
        assert out.with_suffix(".csv").read_text().count("\n") > 1 and "pit-head" in out.with_suffix(".md").read_text()
    png = tmp_path / "figures" / "parity.png"
    assert main(["figure", "parity", "--runs", str(results), "--profile", "t", "--decision", decision, "--out",
                 str(png)]) == 0  # fmt: skip
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = ["table", "parity", "--runs", str(results), "--profile", "t", "--out", str(out), "--decision", "{}"]
    assert main(bad) == 2 and "missing ['slot', 'arm', 'ref']" in capsys.readouterr().err


def test_report_lines_come_from_the_decision_tables(results, tmp_path):
    """REPORT.md's decision block and the README's lines say what the tables say."""
    from pit.reporting.real_teachers import decision_lines, generations_section

    tables = results / "tables"
    for name in ("trajectory", "parity", "final_scores"):
        main(["table", name, "--runs", str(results), "--profile", "t", "--out", str(tables / name), "--decision",
              json.dumps(DECISION)])  # fmt: skip
    text = "\n".join(decision_lines(tables, DECISION))
    assert "0 tokens +3.350 [3.350, 3.350]" in text and "102,400 tokens +0.065 [0.040, 0.090]" in text
    assert "within 0.25 nats: median 51,200 [51,200, 51,200] (96.9%), 6 of 6 seeds within the budget" in text
    assert "within 0.05 nats: median beyond the budget [102,400, beyond the budget] (96.9%), 2 of 6" in text
    assert "humaneval (40 problems, one = 2.5 points)" in text and "pit-head - tt: NLL +0.075 [0.050, 0.100]" in text
    for name, completion in (("teacher", "    pass"), ("tt", "    return 1")):
        rows = [{"prompt": "def f():\n", "completion": completion}]
        write_json(results / f"posttrain/generations/{name}.json", {"rows": rows})
    section = "\n".join(generations_section(results, DECISION))
    assert "- teacher:\n\n```python\ndef f():\n    pass\n```" in section and section.index("teacher") < section.index(
        "- tt:"
    )


def test_the_workflow_scores_the_finals_and_generates_without_lora(tmp_path):
    """A profile with `decision` and `posttrain.modes: []`: every seed of arm and ref is scored as it is
    (evaluate_final), the teacher once (evaluate_teacher needs a GGUF slot: a stand-in has none), three generations,
    the three decision tables and the parity figure; no LoRA and no Table 4."""

    def edit(c):
        c["seeds"] = [0, 1]
        c["posttrain"]["modes"] = []
        c["decision"] = {"slot": "256m", "arm": "pit-head", "ref": "tt", "prompts": ["def f():", "x ="]}

    config = write_config(tmp_path / "decision.yaml", edit)
    plan = snakemake(tmp_path / "work", "-n", "-p", "--configfile", str(config)).stdout
    counts = job_counts(plan)
    assert counts["evaluate_final"] == 4 and counts["generate"] == 3
    assert all(counts[r] == 1 for r in ("table_trajectory", "table_parity", "table_final_scores", "figure_parity"))
    assert not {"lora", "evaluate", "table4_scores", "table4_side_effects"} & set(counts)
    assert "pit evaluate humaneval --model results/pretrain/teacher/256m/tt/seed1/final" in plan
    assert "--out-dir results/posttrain/teacher/256m/tt/seed1/final-eval --label final" in plan  # decision.FINAL_EVAL
    assert "--out results/posttrain/generations/pit-head.json" in plan
    assert "pit generate results/pretrain/teacher/256m/pit-head/seed0/final" in plan
    bad = write_config(tmp_path / "bad.yaml", lambda c: c.update(decision={"slot": "256m", "arm": "nope", "ref": "tt"}))
    proc = snakemake(tmp_path / "work", "-n", "--configfile", str(bad), check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "decision.arm: 'nope': not an arm of teacher mode" in said


def test_generate_writes_its_rows_to_a_file(tmp_path, capsys):
    """`pit generate --out FILE`: the JSON the workflow's side-by-side section reads, written atomically; the output
    rule refuses the checkpoint folder itself."""
    from transformers import AutoTokenizer

    from pit.data.tokenizers import build_tokenizer
    from pit.models import build_model
    from pit.models.checkpoint import save_pretrained_atomic

    build_tokenizer("gpt2", {"kind": "gpt2", "source": "package"}, tmp_path / "tok")
    tok = AutoTokenizer.from_pretrained(tmp_path / "tok")
    save_pretrained_atomic(build_model("gpt2-tiny", vocab_size=len(tok), seed=0).eval(), tmp_path / "ckpt", tok)
    out = tmp_path / "gen" / "model.json"
    args = ["generate", str(tmp_path / "ckpt"), "--prompt", "def f():", "--prompt", "x =", "--max-new-tokens", "5"]
    assert main([*args, "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert [r["prompt"] for r in written["rows"]] == ["def f():", "x ="]
    assert written["decoding"]["max_new_tokens"] == 5 and written["checkpoint"] == str(tmp_path / "ckpt")
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    assert [r["completion"] for r in json.loads(capsys.readouterr().out)] == [r["completion"] for r in written["rows"]]
    assert main([*args, "--out", str(tmp_path / "ckpt" / "config.json")]) == 2
    assert "config.json" in capsys.readouterr().err and json.loads((tmp_path / "ckpt/config.json").read_text())

"""The claims table (pit/reporting/claims.py): synthetic run folders with known effects give known verdicts,
the intervals match a hand computation, and `pit table claims` / `pit figure claims` write their files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from scipy.stats import t

from pit.commands import main
from pit.io import write_json, write_text
from pit.reporting.claims import CLAIMS, GROUPS, claims_table, early_rise, t_interval
from pit.reporting.report import claims_section

SLOTS = {"teacher": "256m", "scratch": "303m"}
# per mode, arm - TT of the final train loss per seed 0, 1, 2: teacher PIT lower (the paper's side: supported),
# scratch PIT lower too (the paper says TT lower: contradicted)
LOSS_DIFF = {("teacher", "pit"): [-0.5, -0.6, -0.55], ("scratch", "pit"): [-0.4, -0.5, -0.45]}
VAL_DIFF = {("teacher", "pit"): [-0.5, -0.6, -0.55], ("scratch", "pit"): [0.3, -0.3, 0.02]}  # scratch: noisy zero
TT_LOSS = [3.0, 3.2, 3.1]


def loss_rows(mode: str, arm: str, seed: int, steps: int = 20) -> list[dict]:
    """Loss from 5.0 falling; TT (teacher mode) rises by 0.8 at step 2, PIT by 0.1; PIT also jumps by 3.0 at step
    10, outside the first 10% of steps, which the early-rise metric must not see."""
    rows = []
    for step in range(1, steps + 1):
        loss = 5.0 - 0.05 * step
        if step == 2 and mode == "teacher":
            loss = 5.0 + {"tt": 0.8 + 0.01 * seed, "pit": 0.1 + 0.01 * seed}.get(arm, 0.4)
        if step == 10 and arm == "pit":
            loss += 3.0
        delta = 1e-6 if arm == "pit" else 2.0 + 0.1 * seed + 0.01 * step
        rows.append({"step": step, "tokens": 128 * step, "loss": loss, "delta_ti": delta})
    return rows


def arm_value(table: dict, mode: str, arm: str, seed: int) -> float:
    if arm == "tt":
        return TT_LOSS[seed]
    return TT_LOSS[seed] + table.get((mode, arm), [0.1, 0.2, 0.15])[seed]  # untied: above TT


def write_run(root: Path, mode: str, arm: str, seed: int, tasks: dict[str, float]) -> None:
    """pretrain/, diagnostics/ and posttrain/ files of one run (seed folder layout); `tasks`: LoRA task -> NLL."""
    where = Path(mode, SLOTS[mode], arm, f"seed{seed}")
    final, val = arm_value(LOSS_DIFF, mode, arm, seed), arm_value(VAL_DIFF, mode, arm, seed) + 0.1
    rows = loss_rows(mode, arm, seed)
    write_json(
        root / "pretrain" / where / "summary.json",
        {"first_step_loss": 5.0, "final_train_loss": final, "val_loss": val, "steps": len(rows)},
    )
    write_text(root / "pretrain" / where / "metrics.jsonl", "".join(f"{json.dumps(r)}\n" for r in rows))
    cosine = 0.0 if arm == "pit" else 0.06 + 0.01 * seed
    write_json(
        root / "diagnostics" / where / "diagnostics.json",
        {"delta_ti": rows[-1]["delta_ti"], "raw": {"cosine_distance": cosine}},
    )
    for task, nll in tasks.items():
        folder = root / "posttrain" / where / task
        kl = (0.01 if arm == "pit" else 0.05) + 0.001 * seed
        write_json(
            folder / "side_effects.json",
            {"kl": kl, "val_loss_change": 10 * kl, "embedding_change": 0.0, "head_change": 0.0},
        )
        score = "pass@1" if task == "mbpp" else "accuracy"
        write_json(folder / "eval" / f"{task}.json", {"task": task, score: 0.0, "n": 20, "nll": nll + 0.01 * seed})
        write_json(folder / "base" / f"{task}.json", {"task": task, score: 0.0, "n": 20, "nll": 2.0})


def nll_of(mode: str, arm: str) -> float:
    """LoRA NLL: PIT 0.3 below TT in both modes (teacher: the paper's side; scratch: the other side)."""
    return {"pit": 1.2, "tt": 1.5}.get(arm, 1.6)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    for mode in ("teacher", "scratch"):
        for arm in ("tt", "pit", "untied"):
            for seed in (0, 1, 2):
                write_run(root, mode, arm, seed, {"mbpp": nll_of(mode, arm), "gsm8k": nll_of(mode, arm)})
    return root


@pytest.fixture(scope="module")
def table(results) -> pd.DataFrame:
    return claims_table(results)


def row(df: pd.DataFrame, claim: str, mode: str, lora: str = "") -> pd.Series:
    hit = df[(df["claim"] == claim) & (df["mode"] == mode) & (df["lora"] == lora) & (df["arm"] == "pit")]
    assert len(hit) == 1, (claim, mode, lora, df[["claim", "mode", "lora", "arm"]])
    return hit.iloc[0]


def test_known_effects_give_known_verdicts(table):
    assert row(table, "teacher_final_train_loss", "teacher")["verdict"] == "supported"
    assert row(table, "teacher_val_loss", "teacher")["verdict"] == "supported"
    assert row(table, "scratch_final_train_loss", "scratch")["verdict"] == "contradicted"
    assert row(table, "scratch_val_loss", "scratch")["verdict"] == "inconclusive"
    assert row(table, "teacher_early_rise", "teacher")["verdict"] == "supported"
    for mode in ("teacher", "scratch"):
        assert row(table, "interface_max_delta_ti", mode)["verdict"] == "supported"
        assert row(table, "interface_raw_cosine", mode)["verdict"] == "supported"
        assert row(table, "lens_mean_kl", mode)["verdict"].startswith("not measured: lens KL")  # field absent
        for task in ("mbpp", "gsm8k"):
            assert row(table, "side_effect_kl", mode, task)["verdict"] == "supported"
            assert row(table, "side_effect_val_loss", mode, task)["verdict"] == "supported"
            assert row(table, f"{mode}_posttrain_score", mode, task)["verdict"] == (
                "not testable: every seed of both arms reads 0"
            )
        assert row(table, "teacher_posttrain_nll", "teacher", "mbpp")["verdict"] == "supported"
        assert row(table, "scratch_posttrain_nll", "scratch", "gsm8k")["verdict"] == "contradicted"
    assert set(table["claim"]) == {c.id for c in CLAIMS}
    assert (table["n"][~table["verdict"].str.startswith("not ")] == 3).all()


def test_interval_equals_a_hand_computation(table):
    r = row(table, "teacher_final_train_loss", "teacher")
    diffs = LOSS_DIFF[("teacher", "pit")]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    half = t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert r["diff"] == pytest.approx(mean, abs=1e-12)
    assert r["diff_ci_low"] == pytest.approx(mean - half, abs=1e-12)
    assert r["diff_ci_high"] == pytest.approx(mean + half, abs=1e-12)
    assert half == pytest.approx(4.302652729911275 * 0.05 / math.sqrt(3), abs=1e-9)  # sd of (-.5, -.6, -.55)
    pit = [a + d for a, d in zip(TT_LOSS, diffs, strict=True)]
    assert (r["arm_mean"], r["arm_ci"]) == pytest.approx(t_interval(pit))
    assert r["tt_mean"] == pytest.approx(3.1) and r["tt_ci"] == pytest.approx(t.ppf(0.975, 2) * 0.1 / math.sqrt(3))
    assert r["untied_diff"] == pytest.approx(0.15) and r["untied_ci"] == pytest.approx(t_interval([0.1, 0.2, 0.15])[1])
    assert row(table, "teacher_early_rise", "teacher")["arm_mean"] == pytest.approx(0.16)  # 5.1 + 0.01 seed - 4.95


def test_early_rise_window_and_one_seed_and_missing_arms(tmp_path):
    rows = [{"step": s, "loss": v} for s, v in enumerate([2.0, 2.5, 1.0, 9.0, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1], 1)]
    assert early_rise(rows) == pytest.approx(0.5)  # T = 11 -> window ceil(1.1) = 2 steps
    write_run(tmp_path, "teacher", "tt", 0, {})
    write_run(tmp_path, "teacher", "pit", 0, {})
    write_run(tmp_path, "scratch", "pit", 0, {})  # no TT in scratch mode
    df = claims_table(tmp_path)
    one = row(df, "teacher_final_train_loss", "teacher")
    assert one["verdict"] == "n = 1, no interval" and one["n"] == 1 and math.isnan(one["diff_ci_low"])
    assert one["diff"] == pytest.approx(-0.5)
    assert row(df, "scratch_val_loss", "scratch")["verdict"] == "not testable: no TT runs"
    assert row(df, "side_effect_kl", "teacher")["verdict"] == "not measured: no posttrain runs of pit"


def test_cli_writes_the_table_the_figures_and_the_report_section(results, tmp_path, capsys):
    out = tmp_path / "tables" / "claims"
    assert main(["table", "claims", "--runs", str(results), "--profile", "study", "--out", str(out)]) == 0
    md = out.with_suffix(".md").read_text()
    assert "paired Student-t" in md and "| verdict" in md.splitlines()[2] and "supported" in md
    assert "paired Student-t" in out.with_suffix(".tex").read_text()
    csv = pd.read_csv(out.with_suffix(".csv"), comment="#")
    assert {"claim", "paper", "diff_ci_low", "diff_ci_high", "untied_diff", "verdict"} <= set(csv.columns)
    figs = tmp_path / "figures"
    assert main(["figure", "claims", "--runs", str(results), "--profile", "study", "--out-dir", str(figs)]) == 0
    assert sorted(p.name for p in figs.iterdir()) == sorted(f"claims_{g}.png" for g in GROUPS)
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in figs.iterdir())
    section = claims_section(tmp_path / "tables", figs, tmp_path / "REPORT.md")
    assert section[0].startswith("## The paper's claims") and "![claims_interface](figures/claims_interface.png)" in (
        section
    )
    assert claims_section(tmp_path / "none", figs, tmp_path / "REPORT.md") == []
    assert main(["figure", "claims", "--runs", str(results), "--profile", "study", "--out", "x.png"]) == 2

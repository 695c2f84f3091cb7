"""The claims table (pit/reporting/claims.py, per_seed.py, stats.py): the exact statistics against brute force and
hand computations, one test per rule of the declared design (primary rows, per-claim Holm, power, fragility,
diverged runs, the sweep, controls, resolution), sentences generated from the numbers, the curve metrics on curves
with known shape, the per-seed table read from run folders, and an independent recomputation
(scripts/check_claims.py) of the CLI's claims.csv."""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import fisher_exact

from pit.analysis.curves import early_rise, max_rise, spikes
from pit.commands import main
from pit.io import write_json, write_text
from pit.reporting.claims import GROUPS, Design, claims_from_seeds, reading_markdown, summary, summary_markdown
from pit.reporting.per_seed import COLUMNS, kl_at_gain, per_seed_table
from pit.reporting.report import claims_section, claims_summary
from pit.reporting.stats import fisher_p, holm, min_detectable, sign_flip, t_interval

ROOT = Path(__file__).resolve().parents[1]
LOG_V, ENTROPY = math.log(4096), 6.4
MATCHED = Design.from_dict({"matched_control": "tt-matched"})


def seeds_table(values: dict, context: dict | None = None, slot: str = "303m", groups: dict | None = None):
    """A per-seed table: values[(mode, lora, metric)][arm] = per-seed list (or values[(mode, slot, lora, metric)]);
    every arm of every (mode, slot) also gets a healthy pretraining context (val loss 4, first loss 8, the entropy,
    ln V, not diverged), overridden by context[(mode, arm)] or context[(mode, slot, arm)]; groups: slot -> sweep
    group."""
    rows, groups = [], groups or {}
    norm = {(k if len(k) == 4 else (k[0], slot, *k[1:])): v for k, v in values.items()}
    ctx = {"val_loss": 4.0, "first_loss": 8.0, "unigram_entropy": ENTROPY, "log_vocab": LOG_V, "lr": 3e-3,
           "diverged": 0.0}  # fmt: skip
    places = {(m, s, arm): max(len(v) for v in by.values()) for (m, s, _, _), by in norm.items() for arm in by}
    for (mode, s, arm), n in places.items():
        extra = {**(context or {}).get((mode, arm), {}), **(context or {}).get((mode, s, arm), {})}
        for metric, value in {**ctx, **extra}.items():
            if (mode, s, "", metric) not in norm:
                rows += [(mode, s, groups.get(s, s), "", arm, k, metric, value) for k in range(n)]
    for (mode, s, lora, metric), by_arm in norm.items():
        for arm, vals in by_arm.items():
            rows += [(mode, s, groups.get(s, s), lora, arm, k, metric, v) for k, v in enumerate(vals)]
    return pd.DataFrame(rows, columns=COLUMNS)


def the_row(table, claim: str, arm: str = "pit", lora: str = "", ref: str = "tt", slot: str | None = None,
            kind: str | None = None):  # fmt: skip
    hit = table[(table["claim"] == claim) & (table["arm"] == arm) & (table["lora"] == lora) & (table["ref"] == ref)]
    hit = hit if slot is None else hit[hit["slot"] == slot]
    hit = hit[hit["kind"] != "slope"] if kind is None else hit[hit["kind"] == kind]
    assert len(hit) == 1, table[["claim", "arm", "ref", "slot", "lora", "verdict"]]
    return hit.iloc[0]


def spread(mean: float, n: int, sd: float = 0.05) -> list[float]:
    """n values around `mean` with a fixed, seed-free spread (all on one side of 0 when |mean| > 3 sd)."""
    return list(mean + sd * np.linspace(-1, 1, n))


# ---- statistics -----------------------------------------------------------------------------------------------
def test_sign_flip_p_and_interval_against_brute_force_and_each_other():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 9))
        d = list(np.round(rng.normal(rng.normal(0, 1), 1, n), 1))  # with ties and exact zeros
        x, signs = np.array(d), np.array(list(itertools.product([1, -1], repeat=n)))
        upper, lower = np.mean(signs @ x >= x.sum() - 1e-9), np.mean(signs @ x <= x.sum() + 1e-9)
        for alpha in (0.05, 0.0125):
            r = sign_flip(d, alpha)
            assert r.p == pytest.approx(min(1.0, 2 * min(upper, lower)), abs=1e-12)
            assert (r.low > 0 or r.high < 0) == (r.p <= alpha)  # the interval inverts the test
    assert sign_flip([1.0] * 6).p == pytest.approx(2 / 64) and sign_flip([1.0] * 5).p == pytest.approx(2 / 32)
    assert sign_flip([1.0] * 5).low == -math.inf  # n = 5 cannot reach 0.05: the interval is the whole line
    covered = [sign_flip(list(rng.standard_t(3, 8) + 0.7)) for _ in range(2000)]
    assert np.mean([r.low <= 0.7 <= r.high for r in covered]) >= 0.94  # coverage >= 95% (1 - 12/256 exactly)


def test_holm_fisher_and_minimal_detectable_effect_by_hand():
    p = [0.01, 0.04, 0.03, 0.005, math.nan]
    assert holm(p)[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02]) and math.isnan(holm(p)[4])
    assert fisher_p(7, 7, 0, 7) == pytest.approx(2 / math.comb(14, 7))
    assert fisher_p(2, 7, 1, 7) == pytest.approx(fisher_exact([[2, 5], [1, 6]]).pvalue)
    assert min_detectable(5, 0.1, 0.05) == math.inf  # 2 / 32 > 0.05: no effect is detectable
    from scipy.stats import t

    assert min_detectable(8, 0.1, 0.025) == pytest.approx((t.ppf(1 - 0.0125, 7) + t.ppf(0.8, 7)) * 0.1 / math.sqrt(8))
    mean, half = t_interval([0.3, 0.5, 0.4])
    assert mean == pytest.approx(0.4) and half == pytest.approx(t.ppf(0.975, 2) * 0.1 / math.sqrt(3))


# ---- the declared design ------------------------------------------------------------------------------------------
def test_the_primary_row_decides_and_variants_stay_secondary():
    """A variant that wins clearly (pit-head) never sets the claim's verdict: the paper's arm (pit) against the
    matched control does, with Holm over the claim's primary rows only."""
    values = {
        ("teacher", "", "val_loss"): {
            "pit": spread(4.2, 8),
            "tt-matched": spread(4.2, 8, 0.06),
            "tt": spread(4.0, 8),
            "pit-head": spread(3.5, 8),
        }
    }
    table = claims_from_seeds(seeds_table(values), MATCHED)
    prim = table[(table["claim"] == "teacher_val_loss") & (table["role"] == "primary")]
    assert len(prim) == 1 and (prim.iloc[0]["arm"], prim.iloc[0]["ref"]) == ("pit", "tt-matched")
    assert prim.iloc[0]["verdict"] == "inconclusive" and prim.iloc[0]["family"] == 1
    head = the_row(table, "teacher_val_loss", arm="pit-head")
    assert head["role"] == "secondary" and head["verdict"] == "supported"
    end_to_end = the_row(table, "teacher_val_loss")
    assert end_to_end["role"] == "secondary" and end_to_end["verdict"] == "contradicted"
    s = summary(table).set_index("claim")
    assert s.loc["teacher_val_loss", "verdict"] == "inconclusive"
    # without a matched control in the design, the primary reference is TT
    plain = claims_from_seeds(seeds_table(values))
    assert the_row(plain, "teacher_val_loss")["role"] == "primary"


def test_teacher_rows_decide_against_the_matched_control_and_it_makes_pit_tt_not_specific():
    """In teacher mode every claim's primary row is PIT against the matched-start control; PIT - TT is secondary and
    reads `not specific to PIT` where the matched control (a non-PIT arm from the same start, with every seed of the
    row) shows the same reduction and PIT does not go beyond it. A control with fewer seeds than the row is
    descriptive: it never sets the verdict."""
    wobble = [0.01 * (-1) ** k for k in range(10)]
    pit = spread(0.2, 10)
    values = {("teacher", "", "lens_kl_ratio"): {"pit": pit, "tt": spread(1.6, 10),
                                                 "tt-matched": [v + w for v, w in zip(pit, wobble)]},
              ("scratch", "", "lens_kl_ratio"): {"pit": spread(0.2, 10), "tt": spread(1.6, 10),
                                                 "untied": spread(0.2, 3)}}  # fmt: skip
    context = {("scratch", "untied"): {"polar_cosine": 0.9}}
    table = claims_from_seeds(seeds_table(values, context), MATCHED)
    primary = the_row(table, "lens_kl_ratio", ref="tt-matched")
    assert primary["role"] == "primary" and primary["verdict"] == "inconclusive" and primary["p"] == 1.0
    end_to_end = the_row(table[table["mode"] == "teacher"], "lens_kl_ratio")
    assert end_to_end["role"] == "secondary" and end_to_end["matched_n"] == 10 and end_to_end["matched_decides"]
    assert end_to_end["verdict"].startswith("not specific to PIT: tt-matched - tt = -1.4")
    assert end_to_end["about"] == "training + conversion"
    scratch = the_row(table[table["mode"] == "scratch"], "lens_kl_ratio")
    assert scratch["verdict"] == "supported" and scratch["untied_n"] == 3 and not scratch["untied_decides"]
    assert "the untied control is descriptive" in scratch["note"] and scratch["about"].startswith("training from")
    # the same control with every seed decides
    values[("scratch", "", "lens_kl_ratio")]["untied"] = spread(0.2, 10)
    table = claims_from_seeds(seeds_table(values, context), MATCHED)
    assert the_row(table[table["mode"] == "scratch"], "lens_kl_ratio")["verdict"].startswith("not specific to PIT")


def test_a_loss_gap_that_still_closes_is_decided_at_this_budget_only():
    """The teacher loss row is decided, and its gap's slope over the constant-rate tail is significant and closing:
    the verdict says `not settled at this budget` and keeps its kind."""
    curves, closing = {}, {}
    for step in (0, 10, 20, 30, 40):
        closing[("teacher", "", f"val_loss@{step}")] = {
            "pit": [4.5 - 0.004 * step + 0.001 * k for k in range(10)],
            "tt-matched": [4.0 + 0.001 * k for k in range(10)],
        }
    curves.update(closing)
    curves[("teacher", "", "val_loss")] = {"pit": [4.34 + 0.001 * k for k in range(10)],
                                           "tt-matched": [4.0 + 0.001 * k for k in range(10)]}  # fmt: skip
    curves[("teacher", "", "tail_start")] = {"pit": [10.0] * 10, "tt-matched": [10.0] * 10}
    table = claims_from_seeds(seeds_table(curves), MATCHED)
    row = the_row(table, "teacher_val_loss", ref="tt-matched")
    assert row["verdict"].startswith("contradicted, not settled at this budget: the gap moves -0.4 nats per 100")
    assert "not settled at this budget" in summary_markdown(table)


def test_a_group_row_counts_only_seeds_that_ran_every_rate():
    """A seed that ran the base slot but no rate of the sweep is not a seed of the sweep's group rows."""
    groups = {"303m-lr1e-1": "303m"}
    values = {("scratch", "303m", "", "diverged"): {"pit": [0.0] * 9, "tt": [0.0] * 9},
              ("scratch", "303m-lr1e-1", "", "diverged"): {"pit": [1.0] * 8, "tt": [0.0] * 8}}  # fmt: skip
    context = {("scratch", "303m", "arm"): {}}
    table = claims_from_seeds(seeds_table(values, context, groups=groups))
    row = the_row(table, "stability_divergence", slot="303m", kind="group")
    assert row["n"] == 8 and row["dropped"] == 1 and "1 seeds without every rate" in row["note"]


def test_degenerate_is_relative_to_what_the_interface_can_express():
    """A frozen-Z PIT above the unigram entropy but below the best context-free model its span can express learns
    context: not degenerate; at or above that bound it is."""
    values = {("scratch", "", "lens_kl_ratio"): {"pit": spread(0.2, 10), "tt": spread(1.6, 10)}}
    above_unigram = {("scratch", "pit"): {"val_loss": ENTROPY + 0.4, "span_entropy": ENTROPY + 1.2},
                     ("scratch", "tt"): {"span_entropy": ENTROPY + 0.01}}  # fmt: skip
    row = the_row(claims_from_seeds(seeds_table(values, above_unigram)), "lens_kl_ratio")
    assert row["verdict"] == "supported"
    above_unigram[("scratch", "pit")]["val_loss"] = ENTROPY + 1.3
    row = the_row(claims_from_seeds(seeds_table(values, above_unigram)), "lens_kl_ratio")
    assert row["verdict"].startswith(f"degenerate: pit: validation loss {ENTROPY + 1.3:.3f} >= its context-free bound")


@pytest.mark.parametrize(("n", "verdict", "fragile"), [(5, "inconclusive", "-"), (6, "supported", "yes"),
                                                       (8, "supported", "no")])  # fmt: skip
def test_power_and_fragility_follow_the_seed_count(n, verdict, fragile):
    """Every seed on the paper's side: with 5 seeds the exact test cannot reach 0.05 (mde infinite), with 6 it
    does but one seed fewer does not (fragile), with 8 any 7 still decide."""
    values = {("scratch", "", "val_loss"): {"pit": spread(5.0, n), "tt": spread(4.0, n)}}
    r = the_row(claims_from_seeds(seeds_table(values)), "scratch_val_loss")
    assert r["verdict"] == verdict and r["p"] == pytest.approx(2 / 2**n)
    assert str(r["fragile"]).startswith(fragile)
    assert (r["mde"] == math.inf) == (n == 5)
    assert math.isnan(r["mde"]) or n == 5  # the mde is reported for inconclusive primary rows only


def test_holm_runs_per_claim_family_not_over_the_table():
    """Two primary rows (teacher, scratch) of the lens claim share one family (m = 2); other claims' rows and the
    claim's own secondary rows do not enter it."""
    lens = {"pit": spread(0.3, 8), "tt": spread(0.7, 8), "pit-x": spread(0.7, 8, 0.2)}
    table = claims_from_seeds(seeds_table({("teacher", "", "lens_kl_ratio"): lens,
                                           ("scratch", "", "lens_kl_ratio"): lens}))  # fmt: skip
    rows = table[(table["claim"] == "lens_kl_ratio") & (table["role"] == "primary")]
    assert list(rows["family"]) == [2, 2] and list(rows["p_holm"]) == pytest.approx([2 * 2 / 256] * 2)
    assert (rows["verdict"] == "supported").all()
    assert (table[table["claim"] == "lens_kl_ratio"]["role"] == "secondary").sum() == 2


# ---- diverged runs, the sweep -------------------------------------------------------------------------------------
def test_diverged_runs_are_dropped_from_loss_rows_and_counted():
    pit = spread(5.0, 8)
    pit[2] = math.nan  # a diverged run: NaN in the per-seed table, never a number
    r = the_row(claims_from_seeds(seeds_table({("scratch", "", "val_loss"): {"pit": pit, "tt": spread(4.0, 8)}})),
                "scratch_val_loss")  # fmt: skip
    assert r["n"] == 7 and r["dropped"] == 1 and r["verdict"] == "supported"
    # a claim with the degenerate rule: an arm with no finite loss at any seed is degenerate, not tested as a number
    lens = {("scratch", "", "lens_kl_ratio"): {"pit": spread(0.3, 8), "tt": spread(0.7, 8)}}
    table = claims_from_seeds(seeds_table(lens, {("scratch", "pit"): {"val_loss": math.nan}}))
    assert the_row(table, "lens_kl_ratio")["verdict"].startswith("degenerate: pit: no finite validation loss")


def sweep_seeds(n: int = 7) -> pd.DataFrame:
    """A sweep group 303m (lr 3e-3) + 303m-hi (lr 0.3): PIT diverges at the high rate on every seed, TT never; TT
    spikes more where both are defined (the base rate)."""
    nan = [math.nan] * n
    values = {
        ("scratch", "303m", "", "diverged"): {"pit": [0.0] * n, "tt": [0.0] * n},
        ("scratch", "303m-hi", "", "diverged"): {"pit": [1.0] * n, "tt": [0.0] * n},
        ("scratch", "303m", "", "spikes"): {"pit": [0.0] * n, "tt": [2.0, 3.0, 1.0, 2.0, 4.0, 2.0, 3.0][:n]},
        ("scratch", "303m-hi", "", "spikes"): {"pit": nan, "tt": [9.0] * n},
        ("scratch", "303m", "", "val_loss"): {"pit": spread(5.0, n), "tt": spread(4.0, n)},
        ("scratch", "303m-hi", "", "val_loss"): {"pit": nan, "tt": spread(4.6, n)},
        ("scratch", "303m-hi", "", "lr"): {"pit": [0.3] * n, "tt": [0.3] * n},
    }
    return seeds_table(values, groups={"303m-hi": "303m"})


def test_the_sweep_counts_divergences_and_compares_only_defined_runs():
    table = claims_from_seeds(sweep_seeds())
    div = the_row(table, "stability_divergence", slot="303m", kind="group")
    assert div["kind"] == "group" and div["role"] == "primary" and div["diff"] == 1.0  # one rate more per seed
    assert div["verdict"] == "contradicted" and div["fragile"] == "no"
    rate = the_row(table, "stability_divergence", slot="303m-hi")
    assert rate["kind"] == "fisher" and rate["role"] == "secondary"
    assert rate["p"] == pytest.approx(2 / math.comb(14, 7)) and "7 of 7 pit and 0 of 7 tt" in rate["note"]
    spikes_row = the_row(
        table, "stability_spikes", slot="303m", kind="group"
    )  # only the base rate, where both are defined
    assert spikes_row["diff"] == pytest.approx(-17 / 7) and "7 (seed, rate) pairs left out" in spikes_row["note"]
    sens = the_row(
        table, "stability_lr_sensitivity", slot="303m", kind="group"
    )  # one common finite rate: no range, no row value
    assert sens["verdict"].startswith("not measured") or sens["n"] == 0


def test_spike_rows_count_only_runs_that_trained_their_whole_length():
    """A run that diverged after warmup has a spike count in the per-seed table (its spikes before it diverged), but
    its outcome is the divergence row's: the spike rows leave it out, group and per-rate rows alike (issue 67)."""
    n = 8
    values = {
        ("scratch", "303m", "", "diverged"): {"pit": [0.0] * n, "tt": [0.0] * n},
        ("scratch", "303m-hi", "", "diverged"): {"pit": [1.0] * 6 + [0.0] * 2, "tt": [0.0] * n},
        ("scratch", "303m", "", "spikes"): {"pit": [1.0] * n, "tt": [1.0] * n},
        ("scratch", "303m-hi", "", "spikes"): {"pit": [3.0] * 6 + [0.0] * 2, "tt": [0.0] * n},
        ("scratch", "303m-hi", "", "lr"): {"pit": [0.3] * n, "tt": [0.3] * n},
    }
    table = claims_from_seeds(seeds_table(values, groups={"303m-hi": "303m"}))
    group = the_row(table, "stability_spikes", slot="303m", kind="group")
    assert group["diff"] == 0.0 and "6 (seed, rate) pairs left out" in group["note"]  # counted, it was +18 / 8
    rate = the_row(table, "stability_spikes", slot="303m-hi")
    assert rate["n"] == 2 and rate["dropped"] == 6


def test_a_degenerate_row_is_not_in_its_claims_holm_family():
    """Two primary rows of the lens claim: the scratch arm learned nothing (degenerate), so the teacher row is tested
    alone (family 1, p_holm = p) and the degenerate row keeps its verdict with its p reported."""
    lens = {"pit": spread(0.3, 8), "tt": spread(0.7, 8)}
    values = {("teacher", "", "lens_kl_ratio"): lens, ("scratch", "", "lens_kl_ratio"): lens}
    table = claims_from_seeds(seeds_table(values, {("scratch", "pit"): {"val_loss": 9.0}}))
    rows = table[(table["claim"] == "lens_kl_ratio") & (table["role"] == "primary")].set_index("mode")
    assert rows.loc["teacher", "family"] == 1 and rows.loc["teacher", "p_holm"] == pytest.approx(2 / 256)
    assert rows.loc["scratch", "verdict"].startswith("degenerate") and math.isnan(rows.loc["scratch", "p_holm"])
    assert rows.loc["scratch", "p"] == pytest.approx(2 / 256)


@pytest.mark.parametrize(("n", "two_drops"), [(8, "yes: without seeds 0 and 1 it is inconclusive"), (9, "no")])
def test_two_seed_drops_beside_fragile(n, two_drops):
    """Every seed on one side, two primary rows in the family (Holm: the smaller p must reach alpha / 2): with 8
    seeds any 7 still decide (p = 2/128, x 2 = 0.031), 6 do not (2/64 x 2 = 0.063): fragile no, but not robust to two
    drops; 9 seeds leave 7 after any two drops (issue 67: n >= 10 primary seeds for families of more rows)."""
    lens = {"pit": spread(0.3, n), "tt": spread(0.7, n)}
    table = claims_from_seeds(seeds_table({("teacher", "", "lens_kl_ratio"): lens,
                                           ("scratch", "", "lens_kl_ratio"): lens}))  # fmt: skip
    rows = table[(table["claim"] == "lens_kl_ratio") & (table["role"] == "primary")]
    assert (rows["verdict"] == "supported").all() and (rows["fragile"] == "no").all()
    assert (rows["two_drops"] == two_drops).all()


def test_the_independent_recomputation_applies_the_same_rules(tmp_path):
    """scripts/check_claims.py, written from docs/study.md, agrees with the table on the three rules of issue 67: spike
    rows without diverged runs, degenerate rows outside the family, the two-seed drops."""
    n = 8
    lens = {"pit": spread(0.3, n), "tt": spread(0.7, n)}
    values = {
        ("scratch", "303m", "", "diverged"): {"pit": [0.0] * n, "tt": [0.0] * n},
        ("scratch", "303m-hi", "", "diverged"): {"pit": [1.0] * 6 + [0.0] * 2, "tt": [0.0] * n},
        ("scratch", "303m", "", "spikes"): {"pit": [1.0] * n, "tt": [0.0] * n},
        ("scratch", "303m-hi", "", "spikes"): {"pit": [3.0] * 6 + [1.0] * 2, "tt": [0.0] * n},
        ("scratch", "303m-hi", "", "lr"): {"pit": [0.3] * n, "tt": [0.3] * n},
        ("teacher", "303m", "", "lens_kl_ratio"): lens,
        ("scratch", "303m", "", "lens_kl_ratio"): lens,
    }
    seeds = seeds_table(values, {("scratch", "303m", "pit"): {"val_loss": 9.0}}, groups={"303m-hi": "303m"})
    seeds.to_csv(tmp_path / "claims_seeds.csv", index=False)
    claims_from_seeds(seeds).to_csv(tmp_path / "claims.csv", index=False)
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_claims.py"), str(tmp_path / "claims.csv")],
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0 and "0 mismatches" in check.stdout, check.stdout[-3000:]


def test_per_seed_metrics_of_a_run_that_diverged_inside_warmup():
    from pit.reporting.per_seed import pretrain_metrics

    rows = [{"step": s + 1, "loss": 8.0 if s < 5 else math.nan} for s in range(30)]
    summary = {"val_loss": math.nan, "first_step_loss": 8.0, "steps": 300, "diverged": "stopped", "diverged_at_step": 6}
    m = pretrain_metrics(summary, rows, {"params": {"train": {"warmup_steps": 20}, "vocab_size": 4096}})
    assert m["diverged"] == 1.0 and m["diverged_at"] == 6.0 and math.isnan(m["spikes"]) and math.isnan(m["val_loss"])
    assert math.isnan(m["early_rise_excess"]) and not any(k.startswith("val_loss@") for k in m)


def test_a_teacher_run_that_ends_above_its_first_loss_regressed_and_keeps_its_loss():
    """A continued teacher can get worse (forgetting at a re-warmed rate): a number, not a divergence. In scratch
    mode the same curve learned nothing, and counts as diverged."""
    from pit.reporting.per_seed import pretrain_metrics

    rows = [{"step": s + 1, "loss": 2.5 + 0.05 * s} for s in range(30)] + [{"step": 10, "val_loss": 3.9}]
    run = {"params": {"train": {"warmup_steps": 3}, "vocab_size": 262144}}
    teacher = pretrain_metrics({"mode": "teacher", "val_loss": 3.4, "first_step_loss": 2.5, "steps": 30}, rows, run)
    assert teacher["diverged"] == 0.0 and teacher["val_loss"] == 3.4 and teacher["val_loss@10"] == 3.9
    assert teacher["max_rise"] > 0 and math.isfinite(teacher["early_rise_excess"])
    scratch = pretrain_metrics({"mode": "scratch", "val_loss": 3.4, "first_step_loss": 2.5, "steps": 30}, rows, run)
    assert scratch["diverged"] == 1.0 and math.isnan(scratch["val_loss"]) and "val_loss@10" not in scratch


# ---- controls and resolution --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("untied", "polar", "expect"),
    [
        (spread(0.3, 8), 0.14, "supported"),  # stays tied: no valid control, said in the note
        (spread(0.3, 8), 0.99, "not specific to PIT"),  # untied, same effect, PIT no better
        (spread(0.5, 8), 0.99, "supported"),  # untied, some effect, PIT beyond it
    ],
)
def test_not_specific_to_pit_needs_a_valid_control(untied, polar, expect):
    lens = {("teacher", "", "lens_kl_ratio"): {"pit": spread(0.3, 8), "tt": spread(0.7, 8), "untied": untied},
            ("teacher", "", "polar_cosine"): {"pit": [0.0] * 8, "tt": [0.0] * 8, "untied": [polar] * 8}}  # fmt: skip
    r = the_row(claims_from_seeds(seeds_table(lens)), "lens_kl_ratio")
    assert r["verdict"].startswith(expect), r["verdict"]
    assert r["untied_valid"] == (polar >= 0.5)
    if polar < 0.5:
        assert "no valid untied control" in r["note"]


def test_scores_coarser_than_the_paper_effect_are_not_testable():
    values = {("teacher", "mbpp", "indomain_score"): {"pit": [5.0, 0.0] * 4, "tt": [0.0, 10.0] * 4},
              ("teacher", "mbpp", "indomain_problems"): {"pit": [20.0] * 8, "tt": [20.0] * 8}}  # fmt: skip
    r = the_row(claims_from_seeds(seeds_table(values)), "teacher_posttrain_score", lora="mbpp")
    assert r["verdict"].startswith("not testable at this resolution: 20 problems, one problem = 5 points")


def test_structural_rows_and_the_early_rise_premise():
    table = claims_from_seeds(seeds_table({
        ("scratch", "", "max_delta_ti"): {"pit": [1e-6] * 3, "tt": [2e3, 2.1e3, 2.2e3]},
        ("scratch", "", "polar_cosine"): {"pit": [5e-17] * 3, "tt": [6e-17] * 3},
        ("teacher", "", "early_rise_excess"): {"pit": [0.1, 0.0, 0.0], "tt": [0.0] * 3},
    }))  # fmt: skip
    r = the_row(table, "interface_max_delta_ti")
    assert r["verdict"] == "holds by construction" and r["evidence"] == "construction" and math.isnan(r["p_holm"])
    assert the_row(table, "interface_polar_cosine")["verdict"].startswith("not testable: PIT and exact TT both")
    assert the_row(table, "teacher_early_rise")["verdict"].startswith("not testable: TT shows no early rise")


# ---- sentences from the numbers -----------------------------------------------------------------------------------
def test_every_generated_sentence_carries_the_tables_numbers():
    values = {
        ("scratch", "", "val_loss"): {"pit": spread(5.0, 8), "tt": spread(4.0, 8)},
        ("teacher", "", "val_loss"): {"pit": [4.1, 3.9, 4.3, 3.8, 4.2, 4.0, 4.4, 3.9],
                                      "tt-matched": [4.0, 4.2, 4.1, 3.7, 4.3, 3.9, 4.0, 4.1], "tt": spread(4.0, 8)},
    }  # fmt: skip
    table = claims_from_seeds(seeds_table(values), MATCHED)
    text = summary_markdown(table) + reading_markdown(table)
    assert "cannot tell apart" not in text and "do not resolve" not in text
    for r in table[table["role"] == "primary"].itertuples():
        if r.verdict in ("supported", "contradicted", "inconclusive"):
            ci = f"exact 95% [{r.diff_ci_low:.3g}, {r.diff_ci_high:.3g}]"
            line = f"{r.arm} - {r.ref} ({r.mode} {r.slot}) = {r.diff:.3g}, {ci}"
            assert line in text and f"exact p = {r.p:.2g}" in text
    inconclusive = the_row(table, "teacher_val_loss", ref="tt-matched")
    assert inconclusive["verdict"] == "inconclusive" and inconclusive["diff_ci_low"] < 0 < inconclusive["diff_ci_high"]
    assert f"detects with 80% power: {inconclusive['mde']:.3g}" in text
    assert re.search(r"\*\*Supported\*\* \(1 claim\)", reading_markdown(table))


def test_matched_gain_interpolation():
    assert kl_at_gain([(0.2, 0.1), (0.6, 0.5)], 0.4) == pytest.approx(0.3)
    assert kl_at_gain([(0.2, 0.1)], 0.1) == pytest.approx(0.05)  # through (0, 0)
    assert math.isnan(kl_at_gain([(0.2, 0.1)], 0.3))


# ---- curve metrics ------------------------------------------------------------------------------------------------
def test_smoothed_early_rise_is_zero_on_flat_noisy_curves_and_sees_a_real_bump():
    rng = np.random.default_rng(0)
    excess = [early_rise(4.0 + rng.normal(0, 0.2, 1000))["early_rise_excess"] for _ in range(40)]
    assert np.mean(excess) < 0.01 and np.median(excess) == 0.0  # ~0: batch noise alone makes no rise
    bump = 4.0 + rng.normal(0, 0.2, 1000)
    bump[20:60] += 1.0  # a rise of one nat for 40 steps inside the first 10%
    m = early_rise(bump)
    assert m["early_rise"] > 0.8 and m["early_rise_excess"] > 0.5 and m["loss_noise"] == pytest.approx(0.2, rel=0.2)


def test_spikes_and_max_rise_count_real_excursions_only():
    rng = np.random.default_rng(1)
    flat = 4.0 + rng.normal(0, 0.2, 400)
    assert spikes(flat, warmup=20) == 0
    spiky = flat.copy()
    spiky[[100, 101, 250]] += 3.0  # two episodes
    spiky[300] = math.nan  # a non-finite step is a skipped step, not a spike
    assert spikes(spiky, warmup=20) == 2
    ramp = np.concatenate([np.linspace(6, 4, 200), np.linspace(4, 5, 100), np.full(100, 5.0)])
    assert max_rise(ramp, warmup=20) == pytest.approx(1.0, abs=0.03)


# ---- from run folders, through the CLI, recomputed independently ----------------------------------------------------
SEEDS = 8


def write_run(root: Path, mode: str, arm: str, seed: int, shift: float) -> None:
    """A run's pretrain/, diagnostics/ and posttrain/ files with effects of known sign (`shift` = arm - TT, plus
    0.01 x seed for PIT, so that the paired differences vary by seed)."""
    where = Path(mode, "303m", arm, f"seed{seed}")
    shift += 0.01 * seed if arm == "pit" else 0.0
    rng = np.random.default_rng([seed, len(arm)])
    losses = 8.0 * np.exp(-np.arange(60) / 15) + 3.5 + shift + rng.normal(0, 0.1, 60)
    rows = [{"step": s + 1, "loss": float(v), "delta_ti": 1e-6 if arm.startswith("pit") else 9.0} for s, v in
            enumerate(losses)]  # fmt: skip
    final = 4.0 + shift + 0.01 * seed
    for step in (30, 40, 50):  # PIT's validation loss falls 0.01 a step to its final value, TT's is flat
        rows[step - 1]["val_loss"] = final + 0.01 * (60 - step) * (arm == "pit")
    summary = {"first_step_loss": float(losses[0]), "final_train_loss": 3.5 + shift, "steps": 60}
    write_json(root / "pretrain" / where / "summary.json", {**summary, "val_loss": final})
    train = {"lr": 3e-3, "warmup_steps": 5, "decay_steps": 30, "tags": {}}
    write_json(root / "pretrain" / where / "run.json", {"params": {"vocab_size": 4096, "train": train}})
    write_text(root / "pretrain" / where / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    cosine = 0.0 if arm.startswith("pit") else 0.5
    lens = {"kl_ratio": 0.3 + shift + 0.01 * seed, "ce_gap": 0.4 + shift, "mean_kl_bits": 1.0, "mean_ce_bits": 9.0}
    polar = 0.99 if arm == "untied" else 0.0
    write_json(root / "diagnostics" / where / "diagnostics.json",
               {"raw": {"cosine_distance": cosine}, "polar": {"cosine_distance": polar}, "lens": lens})  # fmt: skip
    for task, ood in (("mbpp", "humaneval"), ("gsm8k", "svamp")):
        folder = root / "posttrain" / where / task
        kl = 0.2 + shift + 0.01 * seed
        write_json(folder / "side_effects.json", {"kl": kl, "val_loss_change": kl / 2})
        for sub, nll in (("eval", 2.0), ("base", 2.5)):
            for name in (task, ood):
                key = "pass@1" if name in ("mbpp", "humaneval") else "accuracy"
                write_json(folder / sub / f"{name}.json", {"task": name, key: 0.0, "n": 5, "nll": nll + 0.01 * seed})
        rates = ((1e-3, 0.2), (1e-2, 0.9))
        points = [{"lr": lr, "gain": g, "kl": g * kl / 0.5, "val_loss_change": 0.0} for lr, g in rates]
        write_json(folder / "frontier.json", {"lora_lr": 3e-3, "points": points})


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    shifts = {"tt": 0.0, "pit": -0.2, "untied": 0.05, "tt-matched": 0.0}
    for mode in ("teacher", "scratch"):
        for arm, shift in shifts.items():
            for seed in range(SEEDS):
                if mode == "teacher" or arm != "tt-matched":
                    write_run(root, mode, arm, seed, shift)
    return root


def test_per_seed_table_from_run_folders(results):
    seeds = per_seed_table(results)
    assert list(seeds.columns) == COLUMNS
    get = seeds.set_index(["mode", "lora", "arm", "seed", "metric"])["value"]
    assert get[("teacher", "", "pit", 1, "val_loss")] == pytest.approx(3.82)  # 4.0 - 0.2 + 0.01 (pit) + 0.01 (seed)
    assert get[("teacher", "", "pit", 0, "val_loss@30")] == pytest.approx(4.1)  # 3.8 + 0.3
    assert get[("teacher", "", "pit", 0, "tail_start")] == 30.0
    assert get[("scratch", "mbpp", "tt", 0, "gain")] == pytest.approx(0.5)
    assert get[("scratch", "mbpp", "tt", 0, "kl_per_gain")] == pytest.approx(0.4)
    assert get[("scratch", "mbpp", "tt", 0, "indomain_problems")] == 5.0
    assert get[("scratch", "mbpp", "pit", 0, "matched_gain")] == pytest.approx(0.9)
    assert get[("scratch", "mbpp", "tt", 0, "kl_at_matched_gain")] == pytest.approx(0.9 * 0.2 / 0.5)
    assert math.isnan(get[("teacher", "", "tt", 0, "unigram_entropy")])  # no validation file recorded


def test_cli_tables_figures_report_and_an_independent_recomputation(results, tmp_path):
    out = tmp_path / "tables" / "claims"
    design = json.dumps({"matched_control": "tt-matched"})
    args = ["table", "claims", "--runs", str(results), "--profile", "study", "--out", str(out), "--design", design]
    assert main(args) == 0
    seeds = pd.read_csv(f"{out}_seeds.csv")
    table = pd.read_csv(out.with_suffix(".csv"), keep_default_na=False, na_values=[""]).fillna({"lora": ""})
    assert list(seeds.columns) == COLUMNS and {"p", "p_holm", "family", "mde", "fragile", "role"} <= set(table.columns)
    assert the_row(table, "teacher_val_loss", ref="tt-matched")["verdict"] == "supported"
    slope = table[(table["claim"] == "teacher_val_loss") & (table["kind"] == "slope")].iloc[0]
    assert slope["diff"] == pytest.approx(-1.0) and slope["role"] == "secondary"  # the gap falls 0.01 per step
    pooled = the_row(table[table["mode"] == "teacher"], "side_effect_kl_matched", lora="mean", ref="tt-matched")
    assert pooled["role"] == "primary" and pooled["about"] == "training (same start)"
    end_to_end = the_row(table[table["mode"] == "teacher"], "side_effect_kl_matched", lora="mean")
    assert end_to_end["role"] == "secondary" and end_to_end["matched"] == "tt-matched"
    assert end_to_end["matched_decides"] and end_to_end["arm_matched_diff"] == pytest.approx(pooled["diff"])
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_claims.py"), f"{out}.csv"],
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0 and f"{len(table)} rows checked" in check.stdout and "0 mismatches" in check.stdout
    broken = pd.read_csv(out.with_suffix(".csv"), keep_default_na=False, na_values=[""])
    broken.loc[0, "diff"] = 99.0
    broken.loc[len(broken) - 1, "fragile"] = "yes: forged"
    broken.to_csv(tmp_path / "tables" / "forged.csv", index=False)
    (tmp_path / "tables" / "forged_seeds.csv").write_text(Path(f"{out}_seeds.csv").read_text())
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_claims.py"), str(tmp_path / "tables" /
                          "forged.csv")], capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 1 and "2 mismatches" in bad.stdout, bad.stdout[-2000:]
    for name in ("stability", "teacher_gap", "frontier"):
        assert main(["table", name, "--runs", str(results), "--profile", "study", "--out", str(tmp_path / name)]) == 0
    gap = pd.read_csv(tmp_path / "teacher_gap.csv")
    pit_tt = gap[(gap["arm"] == "pit") & (gap["ref"] == "tt") & (gap["step"] == 30)]
    # at step 30: PIT's final value (-0.2 + 0.01 seed from TT's) + 0.3, averaged over seeds 0-7
    assert pit_tt["gap"].iloc[0] == pytest.approx(0.1 + 0.01 * 3.5) and set(gap["ref"]) == {"tt", "tt-matched"}
    assert (gap["gap"] - (gap["arm_val_loss"] - gap["ref_val_loss"])).abs().max() < 1e-9
    figs = tmp_path / "figures"
    args = ["figure", "claims", "--runs", str(results), "--profile", "study", "--out-dir", str(figs), "--study",
            "--design", design]  # fmt: skip
    assert main(args) == 0
    expected = [f"claims_{g}.png" for g in GROUPS] + ["study_frontier.png", "study_teacher_gap.png"]
    assert sorted(p.name for p in figs.iterdir()) == sorted(expected)
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in figs.iterdir())
    summary_lines = claims_summary(tmp_path / "tables")
    assert summary_lines[0] == "## The paper's claims at this scale" and "**Training**" in summary_lines[2]
    assert (
        "Teacher mode: PIT reaches a lower loss (Fig. 4) (Figure 4 caption; Section 5.4): **supported**"
        in (summary_lines[2])
    )
    section = claims_section(tmp_path / "tables", figs, tmp_path / "REPORT.md")
    assert section[0] == "## The claims table" and "![claims_interface](figures/claims_interface.png)" in section
    assert claims_section(tmp_path / "none", figs, tmp_path / "REPORT.md") == []
    # the summary opens with one compact table, a line per primary row, before the prose per claim
    text = summary_markdown(table)
    head, prose = text.split("\n\n", 1)
    assert head.startswith("| claim | primary row | effect [exact 95%] | n | row verdict | claim verdict |")
    primary = table[(table["role"] == "primary") & (table["claim"].isin(head_claims := set(table["claim"])))]
    assert len(head.splitlines()) - 2 <= len(primary) and prose.startswith("**Interface**") and head_claims
    row = the_row(table, "teacher_val_loss", ref="tt-matched")
    effect = f"{row['diff']:.3g} [{row['diff_ci_low']:.3g}, {row['diff_ci_high']:.3g}]"
    assert f"| {effect} | {int(row['n'])} | supported | supported" in head


def block(text: str, name: str) -> str:
    """The text between `<!-- name:start -->` and `<!-- name:end -->`."""
    return text.split(f"<!-- {name}:start -->", 1)[1].split(f"<!-- {name}:end -->", 1)[0].strip()


def test_the_committed_study_recomputes_decides_by_design_and_says_what_its_table_says():
    """docs/results/study: every claims row recomputes from the committed per-seed table (scripts/check_claims.py);
    every tested primary row is the paper's arm with enough paired seeds for its exact test; the summary and the
    reading in docs/study.md and REPORT.md are the ones the table generates; the run took at most 150 minutes on 2
    cores."""
    from pit.reporting.claims import read_claims
    from pit.reporting.study_tables import context_free_markdown

    study = ROOT / "docs" / "results" / "study"
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_claims.py"), str(study / "tables" /
                            "claims.csv")], capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0 and "0 mismatches" in check.stdout, check.stdout[-2000:]
    table = read_claims(study / "tables")
    tested = table[(table["role"] == "primary") & table["family"].fillna(0).gt(0) & table["p"].notna()]
    assert len(tested) and (tested["arm"] == "pit").all() and (tested["n"] >= 10).all()  # issue 67: n >= 10
    teacher = table[(table["role"] == "primary") & (table["mode"] == "teacher")]
    assert (teacher["ref"] == "tt-matched").all() and not (table["ref"] == "untied").any()  # the matched control
    assert not table["verdict"].str.contains("cannot tell apart|do not resolve").any()
    doc = (ROOT / "docs" / "study.md").read_text()
    seeds = pd.read_csv(study / "tables" / "claims_seeds.csv")
    assert block(doc, "bounds") == context_free_markdown(seeds).strip()  # the context-free bound per arm
    summary_text = summary_markdown(table).strip()
    assert block(doc, "summary").endswith(summary_text) and block(doc, "reading") == reading_markdown(table).strip()
    assert summary_text in (study / "REPORT.md").read_text()
    readme = (study / "README.md").read_text()
    minutes = float(re.search(r"Wall time: ([0-9.]+) minutes", readme).group(1))
    assert minutes <= 150 and "2 cores" in readme


def test_the_committed_real_run_recomputes_and_its_blocks_say_what_its_tables_say():
    """docs/results/real: every claims row recomputes from its per-seed table; the declared design held (pit-head
    against TT, >= 6 paired seeds, >= 100,000 training tokens per run, the primary row decided or with its mde,
    tokens to parity per seed with an interval, HumanEval for the teacher and both arms with its resolution); the
    README's and docs/real.md's real blocks are the lines its tables generate; the run took at most 150 minutes on
    2 cores."""
    import yaml

    from pit.reporting.claims import read_claims
    from pit.reporting.real_teachers import decision_summary

    real = ROOT / "docs" / "results" / "real"
    config = yaml.safe_load((ROOT / "config" / "real.yaml").read_text())
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_claims.py"), str(real / "tables" /
                            "claims.csv"), "--primary-arm", config["claims"]["primary"]["teacher"]],
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0 and "0 mismatches" in check.stdout, check.stdout[-2000:]
    d = config["decision"]
    claims = read_claims(real / "tables")
    (primary,) = claims[(claims["claim"] == "teacher_val_loss") & (claims["role"] == "primary")].itertuples()
    assert (primary.arm, primary.ref, primary.slot) == (d["arm"], d["ref"], d["slot"]) and primary.n >= 6
    assert primary.verdict in ("supported", "contradicted") or math.isfinite(primary.mde)
    parity = pd.read_csv(real / "tables" / "parity.csv")
    assert (parity["n"] >= 6).all() and (parity["budget_tokens"] >= 100_000).all()
    assert list(parity["threshold"]) == d["thresholds"] and parity.filter(like="seed").shape[1] == parity["n"].iloc[0]
    scores = pd.read_csv(real / "tables" / "final_scores.csv")
    assert {"teacher", d["arm"], d["ref"]} <= set(scores["row"]) and (scores["resolution_points"] > 0).all()
    lines = decision_summary(config, real / "tables")
    for doc in (ROOT / "README.md", ROOT / "docs" / "real.md"):
        assert block(doc.read_text(), "real").splitlines() == lines, doc
    readme = (real / "README.md").read_text()
    minutes = float(re.search(r"Wall time: ([0-9.]+) minutes", readme).group(1))
    assert minutes <= 150 and "2 cores" in readme


def test_the_real_teacher_findings_and_readme_lines_come_from_the_runs(results, tmp_path):
    """A profile with a real (GGUF) teacher slot: REPORT.md's block and the README's lines carry the teacher's release,
    its own scores, each arm's starting cost, the gap trajectories and the consistency metrics, from the files."""
    import shutil

    from pit.reporting.real_teachers import real_summary, real_teacher_findings

    root = tmp_path / "project"
    shutil.copytree(results, root / "results")
    write_json(root / "resources/teachers/303m/provenance.json", {
        "gguf_file": "tiny.gguf", "package": "llm-tiny", "version": "1.0", "quantization": "MOSTLY_Q4_1",
        "gguf_sha256": "ab" * 32, "dequantised_dtype": "float32"})  # fmt: skip
    write_json(root / "results/teachers/303m/eval/humaneval.json", {"task": "humaneval", "pass@1": 12.5, "n": 8})
    config = {"pretrain": {"teacher_slots": {"303m": {"gguf": "tiny"}}}}
    text = "\n".join(real_teacher_findings(config, root / "results"))
    assert "tiny.gguf from `llm-tiny==1.0` (MOSTLY_Q4_1, sha256 abababababab..." in text
    assert "its own scores: humaneval 12.5% of 8" in text
    # first-step losses: every arm's synthetic curve starts at 8 + 3.5 + shift + noise; the costs are arm - TT
    assert "starting cost (first-step loss minus TT's" in text and "PIT -0." in text
    # PIT's validation loss falls 0.01 a step to its final value (write_run): +0.135 at step 30, -0.165 at the end
    assert "PIT - TT-matched: +0.14 [0.11, 0.16] at step 30, -0.17 [-0.19, -0.14] at step 60 (n = 8, 95% t-" in text
    assert "PIT Delta_TI 1e-06, raw cosine 0" in text
    lines = real_summary(config, root / "results")
    assert (
        len(lines) == 2
        and lines[0].startswith("- 303m: PIT (T = I) starts -0.")
        and "After 60 steps (8 paired seeds, profile default)" in lines[1]
    )
    # an arm with fewer seeds (pit-head on seed 0 only) is compared with TT on its own seed, not TT's mean
    from pit.reporting.real_teachers import _cost

    assert _cost({"tt": {0: 1.0, 1: 3.0}, "pit-head": {0: 2.0}}, "pit-head") == 1.0
    assert real_teacher_findings({"pretrain": {"teacher_slots": {"303m": {"stand_in": "x"}}}}, root / "results") == []


def test_teacher_gap_rows_compare_an_arm_with_fewer_seeds_on_its_own_seeds():
    """untied ran seed 0 only, TT seeds 0 and 1: the row's TT loss is TT's seed 0, so gap = arm - ref in every row."""
    from pit.reporting.study_tables import teacher_gap

    runs = {("tt", 0): 3.0, ("tt", 1): 4.0, ("untied", 0): 3.25}
    cell = {"mode": "teacher", "slot": "s", "group": "s", "lora": "", "metric": "val_loss@10"}
    seeds = pd.DataFrame([cell | {"arm": arm, "seed": seed, "value": value} for (arm, seed), value in runs.items()])
    (row,) = teacher_gap(seeds).to_dict("records")
    assert (row["arm"], row["n"], row["ref_val_loss"], row["arm_val_loss"]) == ("untied", 1, 3.0, 3.25)
    assert row["gap"] == pytest.approx(0.25)

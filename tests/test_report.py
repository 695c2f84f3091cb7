"""REPORT.md's sentences about the runs are computed from the runs the tables are built from (issue 67, item 6): the
unigram finding counts only runs that have a validation loss, a slot's tokens and parameters come from every run of
it (not the first one found, which may have diverged), and a slot's arms and seeds are the ones that ran there."""

import json
import math
from pathlib import Path

import numpy as np
import yaml

from pit.reporting.report import describe_profile, learned, run_facts, unigram_findings

ROOT = Path(__file__).resolve().parents[1]


def write_run(root: Path, mode: str, slot: str, arm: str, seed: int, summary: dict, params: dict | None = None):
    """One pretraining run folder as `pit train` leaves it: summary.json, and run.json with its params."""
    folder = root / mode / slot / arm / f"seed{seed}"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    base = {"vocab_size": 4096, "parameters": 1_300_000, "device": "cpu", "world_size": 1}
    (folder / "run.json").write_text(json.dumps({"params": {**base, **(params or {})}}))


def test_the_unigram_finding_counts_only_runs_with_a_validation_loss(tmp_path):
    """Two diverged runs (no validation loss: NaN or null in summary.json) among five: the old line said '3 of 5 ...
    over 5 runs', counting them as worse than a unigram model; the counts and the range are over the 3 runs that
    have a loss, and the diverged ones are counted apart."""
    runs = tmp_path / "pretrain"
    write_run(runs, "scratch", "303m-lr1", "tt", 0, {"val_loss": 5.2})
    write_run(runs, "scratch", "303m-lr1", "tt", 1, {"val_loss": 5.4})
    write_run(runs, "scratch", "303m-lr1", "pit-lrt", 0, {"val_loss": 7.0})
    write_run(runs, "scratch", "303m-lr1", "pit", 0, {"val_loss": math.nan, "diverged": "non-finite weights"})
    write_run(runs, "scratch", "303m-lr1", "pit", 1, {"val_loss": None, "diverged_at_step": 6})
    assert learned(runs, "scratch", 6.3) == (
        "- 1 of 3 scratch-mode models with a validation loss end worse than a unigram model (arms pit-lrt); "
        "validation loss 5.200 to 7.000 nats/token over 3 runs, against the unigram entropy 6.300 of its validation "
        "split; 2 more runs diverged, with no validation loss."
    )
    assert learned(runs, "scratch", 8.0).startswith(
        "- Every scratch-mode model with a validation loss beats a unigram model: validation loss 5.200 to 7.000 "
        "nats/token over 3 runs, 1.00 to 2.80 below"
    )  # not "every model": two have no loss
    assert learned(runs, "scratch", 5.0).startswith("- Every scratch-mode model with a validation loss ends worse")
    assert learned(runs, "scratch", 8.0).endswith("; 2 more runs diverged, with no validation loss.")


def test_a_mode_whose_every_run_diverged_has_no_loss_range(tmp_path):
    runs = tmp_path / "pretrain"
    for seed in (0, 1):
        write_run(runs, "scratch", "303m", "pit", seed, {"val_loss": None, "diverged": "stopped"})
    assert learned(runs, "scratch", 6.3) == (
        "- No scratch-mode run has a finite validation loss (2 runs, every one diverged)."
    )


def test_every_model_ends_worse_in_both_modes_only_over_the_runs_with_a_loss(tmp_path):
    """The merged line of both modes keeps each mode's count of diverged runs."""
    config = {"pretrain": {"tokenizer": {"teacher": "bpe4k", "scratch": "bpe4k"}, "teacher_slots": {"256m": {}},
                           "scratch_slots": {"303m": {}}, "domains": {}}}  # fmt: skip
    runs = tmp_path / "results" / "pretrain"
    write_run(runs, "teacher", "256m", "tt", 0, {"val_loss": 9.0})
    write_run(runs, "scratch", "303m", "tt", 0, {"val_loss": 9.5})
    write_run(runs, "scratch", "303m", "pit", 0, {"val_loss": None, "diverged": "stopped"})
    folder = tmp_path / "results" / "data" / "bpe4k"  # unigram entropy ln 2: every loss above is worse
    folder.mkdir(parents=True)
    np.array([0, 1], dtype=np.uint16).tofile(folder / "val.bin")
    meta = {"corpus": "t", "documents": 1, "dtype": "uint16", "eos_id": 0, "split": "val", "tokens": 2}
    (folder / "val.json").write_text(json.dumps({**meta, "vocab_size": 4096}))
    (folder / "train.json").write_text(json.dumps({"tokens": 10}))
    (line,) = unigram_findings(config, runs)
    assert line.startswith("- Every model of this profile ends worse than a unigram model")
    assert "teacher mode validation loss 9.000 to 9.000 nats/token over 1 runs" in line
    assert "scratch mode validation loss 9.500 to 9.500 nats/token over 1 runs" in line
    assert line.endswith("; 1 more run diverged, with no validation loss.")


def sweep_profile() -> dict:
    """The pipeline config (config/config.yaml) with a scratch slot and a learning-rate sweep of it laid over:
    8 seeds, secondary arms at 3, sweep slots of their own arms at 7 seeds (pit-lrt at its own 3), as
    config/study.yaml declares them; no teacher slot."""
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    p = config["pretrain"]
    config["seeds"] = list(range(8))
    p.update(interfaces=["pit", "tt", "untied"], teacher_slots={}, teacher_arms={})
    p["scratch_arms"] = {"pit-z": {"trainable_z": True, "seeds": [0, 1, 2]}, "untied": {"seeds": [0, 1, 2]},
                         "pit-lrt": {"train": {"transform_lr_scale": 0.1}, "seeds": [0, 1, 2]}}  # fmt: skip
    sweep = {"model": "scratch-tiny-l", "sweep_of": "303m", "arms": ["pit", "tt", "pit-lrt"], "seeds": list(range(7))}
    p["scratch_slots"] = {"303m": {"model": "scratch-tiny-l"}, **{f"303m-lr{x}": sweep for x in ("1", "3e-1", "5e-2")}}
    return config


def test_a_slots_tokens_and_parameters_come_from_every_run_not_the_first(tmp_path):
    """The first run found (pit, seed 0) diverged after 25 steps: the old line gave its 25,600 tokens as the slot's
    'per arm'. The slot's line gives the longest run's tokens, how many stopped earlier, and the parameter range of
    its arms (an untied head is larger)."""
    runs = tmp_path / "pretrain"
    write_run(runs, "scratch", "303m-lr1", "pit", 0, {"tokens": 25_600, "diverged_at_step": 6, "diverged": "stuck"})
    write_run(runs, "scratch", "303m-lr1", "tt", 0, {"tokens": 307_200})
    write_run(runs, "scratch", "303m-lr1", "untied", 0, {"tokens": 307_200}, {"parameters": 1_830_000})
    assert run_facts(runs, "scratch", "303m-lr1") == (
        "V = 4,096 (actual tokenizer), 1.3M to 1.8M parameters (by arm), 307,200 training tokens per run (1 of 3 "
        "runs stopped earlier: diverged), device cpu x 1"
    )
    write_run(runs, "scratch", "303m", "tt", 0, {"tokens": 307_200})
    assert run_facts(runs, "scratch", "303m") == (
        "V = 4,096 (actual tokenizer), 1.3M parameters, 307,200 training tokens per run, device cpu x 1"
    )


def test_a_slots_arms_and_seeds_are_those_that_ran_there(tmp_path):
    """Sweep slots that run pit and tt at seeds 0-6 and pit-lrt at 0-2, not every scratch arm at every seed of the
    profile: the old lines said 'arms pit, pit-lrt, pit-z, tt, untied' and 'each arm once per seed' of 0-7. From the
    run folders; a slot without runs says so."""
    runs = tmp_path / "results" / "pretrain"
    for arm, seeds in (("pit", range(7)), ("tt", range(7)), ("pit-lrt", range(3))):
        for seed in seeds:
            write_run(runs, "scratch", "303m-lr1", arm, seed, {"tokens": 307_200})
    write_run(runs, "scratch", "303m-lr3e-1", "tt", 0, {"tokens": 307_200})  # the rest of this slot did not run
    lines = describe_profile(sweep_profile(), runs)
    line = {ln.split(":")[0]: ln for ln in lines}
    assert line["- scratch slot 303m-lr1"].endswith("; arms tt, pit (seeds 0-6); pit-lrt (seeds 0-2).")
    assert line["- scratch slot 303m-lr3e-1"].endswith("; arms tt (seeds 0).")  # what ran, not what was planned
    assert line["- scratch slot 303m-lr5e-2"].endswith("; arms none run yet.")
    assert line["- scratch slot 303m"].endswith("; arms none run yet.")
    seeds = next(ln for ln in lines if ln.startswith("- Seeds:"))
    assert "each arm once per seed" not in seeds and "each slot above lists the seeds its arms ran" in seeds

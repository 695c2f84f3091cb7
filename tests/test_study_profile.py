"""The study profile (config/study.yaml, docs/study.md): every arm x mode x seed is one pretraining job, and the
seed is a wildcard of pretraining, LoRA, evaluation and diagnostics (dry runs: nothing is trained here)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import yaml
from helpers import ROOT, job_counts, snakemake

from pit.data.reader import TokenFile, unigram_entropy
from pit.reporting.report import learned, table_notes

STUDY_CONFIG = ROOT / "config/study.yaml"


@pytest.fixture(scope="module")
def study():
    return yaml.safe_load(STUDY_CONFIG.read_text())


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> str:
    workdir = tmp_path_factory.mktemp("study")
    proc = snakemake(workdir, "-n", "-p", "--configfile", str(STUDY_CONFIG), "--cores", "1")
    assert not (workdir / "results").exists()
    return proc.stdout


def arms(config: dict) -> dict[str, list[str]]:
    p = config["pretrain"]
    return {
        m: [a for i in p["interfaces"] for a in ([i, *p.get(f"{m}_arms", {})] if i == "pit" else [i])]
        for m in ("teacher", "scratch")
    }


def test_study_runs_every_arm_and_mode_once_per_seed(study, dry_run):
    seeds, per_mode = study["seeds"], arms(study)
    assert len(seeds) >= 3 and {"pit", "pit-head", "tt", "untied"} <= set(per_mode["teacher"])
    assert {"pit", "pit-z", "tt", "untied"} <= set(per_mode["scratch"])
    counts = job_counts(dry_run)
    runs = sum(len(per_mode[m]) * len(study["pretrain"][f"{m}_slots"]) for m in per_mode) * len(seeds)
    assert counts["pretrain"] == counts["diagnose"] == runs == 24
    assert counts["lora"] == counts["evaluate"] == runs * len(study["posttrain"]["tasks"])
    assert counts["pretrain_stand_in_teacher"] == 1  # the teacher is shared by every seed
    for mode, slot_key in (("teacher", "teacher_slots"), ("scratch", "scratch_slots")):
        for slot in study["pretrain"][slot_key]:
            for arm in per_mode[mode]:
                for seed in seeds:
                    assert f"results/pretrain/{mode}/{slot}/{arm}/seed{seed}/summary.json" in dry_run
                    assert f"results/diagnostics/{mode}/{slot}/{arm}/seed{seed}/diagnostics.json" in dry_run
                    assert f"results/posttrain/{mode}/{slot}/{arm}/seed{seed}/mbpp/side_effects.json" in dry_run


def test_a_seed_sets_the_runs_seed_and_name(dry_run):
    """Every pretraining and LoRA job of seed k trains with seed k (init, data order, LoRA init) under a name
    ending in -s<k>; arms of one seed share it, so their data order is the same."""
    specs = [m for m in re.findall(r"--spec '(\{.*?\})'", dry_run) if '"run_name"' in m]
    seeded = [yaml.safe_load(s) for s in specs]
    trained = [s for s in seeded if s["run_name"].startswith(("teacher-", "scratch-", "lora-"))]
    assert len(trained) == 24 + 48
    for spec in trained:
        assert spec["run_name"].endswith(f"-s{spec['seed']}") and spec["tags"]["seed"] == str(spec["seed"])
    interfaces = {s["run_name"]: s["interface"] for s in trained if not s["run_name"].startswith("lora-")}
    assert interfaces["scratch-303m-pit-z-s1"] == {**interfaces["scratch-303m-pit-s1"], "trainable_z": True}
    assert (
        interfaces["teacher-256m-pit-head-s2"]["t_init"] == "power"
        and interfaces["scratch-303m-pit-s0"]["kind"] == "pit"
    )


def test_profiles_without_seeds_keep_their_paths(tmp_path):
    proc = snakemake(tmp_path, "-n", "--cores", "1")
    assert "results/pretrain/scratch/303m/pit/summary.json" in proc.stdout
    assert "/seed" not in proc.stdout


def test_unigram_entropy_and_the_report_line(tmp_path):
    """The no-context baseline the study's models must beat: H = -sum p ln p of the token frequencies, and the
    report's line saying how far below it a mode's validation losses end."""
    tokens = np.array([0, 1, 1, 2, 2, 2, 2, 3], dtype=np.uint16)
    tokens.tofile(tmp_path / "val.bin")
    meta = {"corpus": "t", "documents": 1, "dtype": "uint16", "eos_id": 0, "split": "val", "tokens": 8}
    (tmp_path / "val.json").write_text(json.dumps({**meta, "vocab_size": 8}))
    p = np.array([1, 2, 4, 1]) / 8
    assert unigram_entropy(TokenFile(tmp_path / "val.bin")) == pytest.approx(-(p * np.log(p)).sum(), abs=1e-12)
    for seed, loss in ((0, 4.0), (1, 4.5)):
        run = tmp_path / "pretrain/scratch/303m/pit" / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({"val_loss": loss}))
    line = learned(tmp_path / "pretrain", "scratch", 6.0)
    assert "4.000 to 4.500 nats/token over 2 runs, 1.50 to 2.00 below the unigram entropy" in line


def test_seeded_reports_do_not_say_one_seed():
    for name in ("table1", "table4_scores", "table4_side_effects"):
        assert any("One seed" in n for n in table_notes(name, seeded=False))
        seeded = table_notes(name, seeded=True)
        assert not any("One seed" in n for n in seeded) and any("intervals over seeds" in n for n in seeded)

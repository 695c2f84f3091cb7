"""The pretraining stage through Snakemake on a reduced default profile (one teacher slot with a
stand-in teacher, one scratch slot, PIT and TT), in a temporary directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from test_workflow_data import ROOT, job_counts, snakemake

pytestmark = pytest.mark.slow


def reduced(config: dict) -> dict:
    config["context_length"] = 32
    config["corpus"]["max_documents"] = 60
    config["tokenizers"]["bpe32k"]["vocab_size"] = 2000
    p = config["pretrain"]
    p["interfaces"] = ["pit", "tt"]
    p["teacher_slots"] = {"256m": {"stand_in": "gpt2-tiny"}}
    p["scratch_slots"] = {"303m": {"model": "scratch-tiny"}}
    p["train"].update(global_batch_tokens=128, micro_batch_size=4, max_steps=3, warmup_steps=1, checkpoint_every=2,
                      eval_batches=1, final_loss_window=2)
    p["mode_train"] = {"teacher": {"lr": 1.0e-3}, "scratch": {}}
    p["stand_in_teacher"] = {"max_steps": 4}
    return config


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("pretrain")
    config = workdir / "profile.yaml"
    config.write_text(yaml.safe_dump(reduced(yaml.safe_load((ROOT / "config.yaml").read_text()))))
    snakemake(workdir, "--cores", "all", "--configfile", str(config), "pretrain_all")
    return workdir, config


def test_every_arm_has_a_run_folder_and_pit_stays_consistent(pipeline):
    workdir, _ = pipeline
    for mode, slot in (("teacher", "256m"), ("scratch", "303m")):
        for kind in ("pit", "tt"):
            run = workdir / f"results/pretrain/{mode}/{slot}/{kind}"
            summary = json.loads((run / "summary.json").read_text())
            rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            assert len(rows) == 3 and summary["steps"] == 3
            if kind == "pit":
                assert max(r["delta_ti"] for r in rows) < 1e-4
            else:
                assert min(r["delta_ti"] for r in rows) > 0
            assert (run / "final" / "model.safetensors").is_file()
            spec = json.loads((run / "run.json").read_text())
            assert spec["run_name"] == f"{mode}-{slot}-{kind}"
    teacher_run = json.loads((workdir / "results/pretrain/teacher/256m/pit/run.json").read_text())
    assert teacher_run["params"]["train"]["model"] == "results/teachers/256m/final"
    assert (workdir / "results/teachers/256m/final/config.json").is_file()


def test_runs_are_in_the_project_mlflow_store(pipeline):
    import mlflow

    workdir, _ = pipeline
    client = mlflow.MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("pit-default")
    names = sorted(r.info.run_name for r in client.search_runs([exp.experiment_id]))
    assert names == ["scratch-303m-pit", "scratch-303m-tt", "stand-in-teacher-256m", "teacher-256m-pit",
                     "teacher-256m-tt"]


def test_second_run_has_nothing_to_do(pipeline):
    workdir, config = pipeline
    proc = snakemake(workdir, "--cores", "all", "--configfile", str(config), "pretrain_all")
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_paper_profile_dry_run_has_twelve_gpu_pretraining_jobs(tmp_path):
    proc = snakemake(tmp_path, "-n", "-p", "pretrain_all", "--configfile", str(ROOT / "config/paper.yaml"))
    counts = job_counts(proc.stdout)
    assert counts["pretrain"] == 12 and "pretrain_stand_in_teacher" not in counts
    assert proc.stdout.count("gpus=1") >= 12
    assert "cerebras/Cerebras-GPT-256M" in proc.stdout and "scratch-1.17b" in proc.stdout

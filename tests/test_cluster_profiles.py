"""Snakemake profiles (docs/reproducibility.md): the paper profile's whole DAG under the SLURM profile
(dry runs: no cluster needed), resources from the config, torchrun for multi-GPU training jobs."""

from __future__ import annotations

import re

import pytest
import yaml
from helpers import PAPER_CONFIG, ROOT, job_counts, snakemake, write_config

pytestmark = pytest.mark.xdist_group("cluster_profiles")  # its module fixtures are built once, on one worker

SLURM = str(ROOT / "workflow/profiles/slurm")
LOCAL = str(ROOT / "workflow/profiles/local")


def job_resources(dry_run: str, rule: str) -> list[dict[str, str]]:
    """The `resources:` of every job of `rule` in a dry run's output."""
    blocks = re.findall(rf"^(?:local)?rule {rule}:\n((?:    .*\n)+)", dry_run, re.M)
    out = []
    for block in blocks:
        line = re.search(r"^    resources: (.*)$", block, re.M)[1]
        out.append(dict(item.split("=", 1) for item in line.split(", ")))
    return out


@pytest.fixture(scope="module")
def paper_on_slurm(tmp_path_factory) -> str:
    workdir = tmp_path_factory.mktemp("paper-slurm")
    proc = snakemake(workdir, "-n", "-p", "--configfile", str(PAPER_CONFIG), "--profile", SLURM)
    assert not (workdir / "results").exists()
    return proc.stdout


def test_paper_dag_under_slurm_has_every_stage(paper_on_slurm):
    counts = job_counts(paper_on_slurm)
    # 3 teacher slots x (PIT, PIT-head, TT) + 3 scratch slots x (PIT, TT)
    assert counts["pretrain"] == 15 and "pretrain_stand_in_teacher" not in counts
    assert counts["diagnose"] == 15
    for rule in ("table1", "table2", "table3", "table4_scores", "table4_side_effects", "report_md", "mlflow_summary"):
        assert counts[rule] == 1, rule
    paper = yaml.safe_load(PAPER_CONFIG.read_text())
    res = paper["pretrain"]["resources"]
    jobs = job_resources(paper_on_slurm, "pretrain")
    assert len(jobs) == 15  # 3 teacher slots x (pit, pit-head, tt) + 3 scratch slots x (pit, tt)
    for r in jobs:  # gpu: what snakemake-executor-plugin-slurm turns into --gpus
        assert r["gpus"] == r["gpu"] == str(res["gpus"]) == "1"
        assert r["mem_mb"] == str(res["mem_mb"]) and int(r["runtime"]) >= 10  # runtime: planned x margin (test_plan)
    assert "cerebras/Cerebras-GPT-256M" in paper_on_slurm and "scratch-1.17b" in paper_on_slurm


def test_paper_dag_under_slurm_has_the_lora_jobs_on_gpus(paper_on_slurm):
    counts = job_counts(paper_on_slurm)
    assert counts["lora"] == 30  # 15 pretrained runs x {mbpp, gsm8k}: the paper profile post-trains every arm
    assert counts["evaluate"] >= 30  # every LoRA model is evaluated (and the base models)
    for r in job_resources(paper_on_slurm, "lora"):
        assert r["gpus"] == r["gpu"] == "1", r


def test_resources_come_from_the_config_and_multi_gpu_jobs_use_torchrun(tmp_path):
    def edit(config):
        config["pretrain"]["resources"].update(gpus=2, partition="gpu-a100", mem_mb=32000)

    config = write_config(tmp_path / "config.yaml", edit)
    proc = snakemake(tmp_path, "-n", "-p", "pretrain_all", "--configfile", str(config), "--profile", SLURM)
    jobs = job_resources(proc.stdout, "pretrain")
    assert jobs and all(r["gpu"] == "2" and r["slurm_partition"] == "gpu-a100" and r["mem_mb"] == "32000" for r in jobs)
    counts = job_counts(proc.stdout)
    training_jobs = counts["pretrain"] + counts["pretrain_stand_in_teacher"]
    assert proc.stdout.count("torchrun --standalone --nproc_per_node 2 -m pit train --spec") == training_jobs
    # one GPU or none: plain `pit train`, and no partition unless the config names one
    proc = snakemake(tmp_path, "-n", "-p", "pretrain_all", "--profile", LOCAL)
    assert "torchrun" not in proc.stdout and "pit train --spec" in proc.stdout
    assert all("slurm_partition" not in r and r["gpu"] == "0" for r in job_resources(proc.stdout, "pretrain"))

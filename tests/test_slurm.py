"""A real scheduler: a single-node SLURM cluster on this machine (tests/slurm_cluster.py) runs a reduced default DAG
through `--profile workflow/profiles/slurm`. Jobs go through sbatch (their ids are in `sacct`), training jobs get
the resources of the config, the outputs equal a local run's, a training job killed with scancel is rerun by
`--rerun-incomplete` (resuming from its checkpoint) without redoing finished jobs, and a two-process torchrun
training job submitted with sbatch matches the single-process run. The data stage is built once, locally, and the
SLURM project starts from a copy of it (modification times and Snakemake's records kept): its jobs through SLURM
took ~48 s of the suite's time, mostly each job's start-up and the status polls, and they are ordinary shell jobs
the training jobs already cover.

    python3 -m pytest -q -n 0 tests/test_slurm.py      # alone (needs setup.sh --test-system-packages as root)
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import DEFAULT_CONFIG, Project, make_project, mtimes, wait_for
from slurm_cluster import SlurmCluster, missing_programs
from test_train import free_port, rows, spec

from pit.training.args import PretrainArgs
from pit.training.pretrain import train

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]  # one worker starts the one cluster
SLURM = "workflow/profiles/slurm"
TARGET = "results/tables/table1.md"
DATA = ["results/data/bpe32k/train.bin", "results/data/bpe32k/val.bin"]
RUNS = ["results/pretrain/scratch/303m/pit", "results/pretrain/scratch/303m/tt"]
WALL_CLOCK = {"time_s", "tokens_per_s"}  # metrics.jsonl fields that measure the machine, not the run


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = missing_programs()
    assert not missing, (
        f"SLURM test cluster: {missing} not installed; run scripts/setup.sh --test-system-packages as root"
    )
    with SlurmCluster(tmp_path_factory.mktemp("slurm")) as c:
        yield c


def scratch_only(project) -> None:
    """The reduced default profile, scratch mode only, with runs long enough to be cancelled mid-way."""
    path = project.root / DEFAULT_CONFIG
    config = yaml.safe_load(path.read_text())
    config["pretrain"]["teacher_slots"] = {}
    config["pretrain"].pop("teacher_arms", None)
    config["pretrain"]["train"].update(max_steps=400, checkpoint_every=20, warmup_steps=5)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def metrics(root: Path, run: str) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK} for row in rows(root / run)]


def table(root: Path) -> list[dict]:
    with open(root / "results/tables/table1.csv") as f:
        body = [line for line in f if not line.startswith("#")]
    return [{k: v for k, v in r.items() if "runtime" not in k and "time" not in k} for r in csv.DictReader(body)]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The reduced scratch-only DAG run locally to Table 1; `project.data_built` is a copy of the project taken once
    its data stage had finished (the SLURM run's starting point)."""
    tmp = tmp_path_factory.mktemp("local")
    project = make_project(tmp / "project", tmp / "home")
    scratch_only(project)
    project.snakemake("--cores", "2", *DATA)
    project.data_built = tmp / "data-built"
    shutil.copytree(project.root, project.data_built, symlinks=True)  # copy2: modification times kept
    project.snakemake("--cores", "2", TARGET)
    return project


def test_reduced_dag_through_slurm_equals_local_and_survives_scancel(cluster, local_run, tmp_path):
    project = Project(tmp_path / "project", tmp_path / "home")  # the data built locally: SLURM runs training, Table 1
    shutil.copytree(local_run.data_built, project.root, symlinks=True)
    env = project.env | {key: cluster.env[key] for key in ("SLURM_CONF", "PATH")}
    argv = [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        SLURM,
        "--latency-wait",
        "5",
        "--slurm-init-seconds-before-status-checks",
        "1",
        # sacct says "CANCELLED by <uid>" for a scancel'ed job, which plugin 2.8.0 does not take for a failure (it
        # would wait forever); squeue says CANCELLED (the cluster keeps finished jobs for MinJobAge = 300 s)
        "--slurm-status-command",
        "squeue",
        "--seconds-between-status-checks",
        "2",
        "--retries",
        "0",
        "--jobs",
        "1",
    ]
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen([*argv, TARGET], cwd=project.root, env=env, stdout=log, stderr=subprocess.STDOUT)
    progress = [(run, project.root / run / "metrics.jsonl") for run in RUNS]

    def started():
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]  # it ended before the cancel
        return next((run for run, p in progress if p.is_file() and len(p.read_text().splitlines()) >= 30), None)

    victim = wait_for(started, 300, f"the first training steps (Snakemake's log: {tmp_path / 'first.log'})")
    job = next(j for j in cluster.sacct() if j["State"] == "RUNNING")  # --jobs 1: the training job of `victim`
    subprocess.run(["scancel", job["JobIDRaw"]], env=env, check=True)
    first.wait(timeout=600)
    assert first.returncode != 0, (tmp_path / "first.log").read_text()[-3000:]  # the cancelled job failed the run
    other = next(run for run in RUNS if run != victim)
    before = mtimes(project.root, [other, "results/data"])
    second = subprocess.run(
        [*argv, "--rerun-incomplete", TARGET], cwd=project.root, env=env, capture_output=True, text=True
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert mtimes(project.root, [other, "results/data"]) == before  # nothing finished was redone
    for run in RUNS:
        assert metrics(project.root, run) == metrics(local_run.root, run), run
    assert table(project.root) == table(local_run.root)
    jobs = cluster.sacct()
    states = {j["JobIDRaw"]: j["State"] for j in jobs}
    assert states[job["JobIDRaw"]].startswith("CANCELLED"), states
    # the cancelled job, then the other run, the rerun and Table 1: no data job went through SLURM
    assert sorted(s.split()[0] for s in states.values()) == ["CANCELLED"] + ["COMPLETED"] * 3, states
    config = yaml.safe_load((project.root / DEFAULT_CONFIG).read_text())["pretrain"]["resources"]
    minutes = int(config["runtime"])
    trained = [j for j in jobs if j["JobIDRaw"] == job["JobIDRaw"]]
    assert trained[0]["ReqMem"].rstrip("MnNc") == str(config["mem_mb"]), trained  # resources from the config
    assert trained[0]["Timelimit"] == f"00:{minutes:02d}:00", trained


def test_torchrun_through_sbatch_matches_single_process(cluster, tiny_data, tmp_path):
    s = spec(tiny_data, max_steps=5, global_batch_tokens=512, micro_batch_size=4, threads=1)
    train(PretrainArgs.from_dict(s), tmp_path / "single")
    (tmp_path / "spec.json").write_text(json.dumps(s))
    script = tmp_path / "ddp.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"exec {sys.executable} -m torch.distributed.run --nproc_per_node=2 --master_addr=127.0.0.1 "
        f"--master_port={free_port()} -m pit train --spec {tmp_path / 'spec.json'} --out {tmp_path / 'ddp'}\n"
    )
    submit = subprocess.run(
        ["sbatch", "--parsable", "--ntasks=1", "--cpus-per-task=2", "--mem=4000", f"--output={tmp_path}/ddp.log",
         str(script)],
        env=cluster.env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    job_id = submit.stdout.strip().split(";")[0]
    state = wait_for(
        lambda: next((j["State"] for j in cluster.sacct() if j["JobIDRaw"] == job_id and j["State"] not in
                      ("PENDING", "RUNNING")), None),
        600, f"job {job_id}",
    )  # fmt: skip
    assert state == "COMPLETED", (tmp_path / "ddp.log").read_text()[-3000:]
    a, b = rows(tmp_path / "single"), rows(tmp_path / "ddp")
    assert len(a) == len(b) == 5
    assert all(abs(x["loss"] - y["loss"]) <= 1e-5 for x, y in zip(a, b)), (a, b)
    assert json.loads((tmp_path / "ddp/run.json").read_text())["params"]["world_size"] == 2

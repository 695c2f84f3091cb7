"""Reproducibility infrastructure end to end (docs/reproducibility.md), on a reduced default profile in
a temporary project (a git repository holding a copy of the workflow, the code and the DVC files):

- fault tolerance: the pipeline is SIGKILLed (Snakemake and its jobs) once the first training job has
  finished, restarted with --rerun-incomplete, completes, and re-runs none of the finished jobs;
- DVC: `dvc commit` records the run, `dvc push` sends it to the default local remote and to a real S3
  server (moto on 127.0.0.1); fresh clones pull it back with identical hashes, and after
  `snakemake --touch` Snakemake has nothing to do and rebuilds one table alone;
- MLflow: a real `mlflow server` on the project's store gives back every run with params, metrics
  and artifacts; `pit runs` lists them;
- --keep-going: a failing arm does not stop an independent one, and its log says why.

The interrupted-and-resumed pipeline run is the one the end-to-end tests share (tests/helpers.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers import (
    DEFAULT_CONFIG,
    Project,
    files_under,
    job_counts,
    job_outputs,
    mlflow_store_ready,
    mtimes,
    run,
    snakemake_cmd,
    stop_group,
)
from tolerances import run_bound, within

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pipeline")]  # one worker builds the shared run


def dvc(project: Project, *args: str, cwd: Path | None = None, env: dict | None = None) -> str:
    proc = run([sys.executable, "-m", "dvc", *args], cwd or project.root, env={**project.env, **(env or {})})
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def project(pipeline_project) -> Project:
    return pipeline_project


def test_killed_pipeline_resumes_without_redoing_finished_jobs(project):
    killed = project.killed
    rules = [rule for rule, _ in killed["finished"]]
    assert any(r.startswith("pretrain") for r in rules) and len(rules) < project.total_jobs
    resumed_log = project.resumed.stdout + project.resumed.stderr
    resumed = job_outputs(resumed_log)
    assert 0 < sum(job_counts(resumed_log).values()) < project.total_jobs
    rerun_outputs = {p for _, outputs in resumed.values() for p in outputs}
    for rule, outputs in killed["finished"]:
        assert rerun_outputs.isdisjoint(outputs), f"finished {rule} job {outputs} ran again"
    assert mtimes(project.root, list(killed["mtimes"])) == killed["mtimes"], "a finished job's outputs changed"
    dry = run(snakemake_cmd("-n"), project.root, project.env)
    assert "Nothing to be done" in dry.stdout + dry.stderr
    # nothing half-written is left in the outputs
    assert not list((project.root / "results").rglob("*.tmp"))
    assert not list((project.root / "results").rglob("checkpoints"))


def test_no_mlflow_run_is_left_running_after_the_kill(project):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{project.root / 'mlflow.db'}")
    exp = client.get_experiment_by_name("pit-default")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    # every run of the pipeline finished, once: a training job that ran again (killed before Snakemake saw
    # it end, even after it logged FINISHED) continued the MLflow run of its first attempt (run.json)
    finished = sorted(r.info.run_name for r in runs if r.info.status == "FINISHED")
    assert finished == sorted(expected_run_names(project.root))
    for r in runs:  # a job killed between creating its run and recording it left one, closed when it restarted
        assert r.info.status in ("FINISHED", "KILLED"), (r.info.run_name, r.info.status)
        if r.info.status == "KILLED":
            assert r.data.tags["pit.superseded_by"] in {x.info.run_id for x in runs}


def expected_run_names(root: Path) -> set[str]:
    """Every MLflow run the pipeline logs: one per run folder (run.json), one per post-training
    evaluation (eval-<task>-<mode>-<slot>-<interface>) and the summary run."""
    names = {json.loads(p.read_text())["run_name"] for p in (root / "results").rglob("run.json")}
    post = root / "results/posttrain"
    evals = {
        "-".join(["eval", parts[3], *parts[:3]])
        for parts in (d.parent.relative_to(post).parts for d in post.glob("*/*/*/*/eval"))
    }
    return names | evals | {"summary-default"}


# --- DVC ---------------------------------------------------------------------------------------------


def dvc_outs(root: Path) -> list[str]:
    """Every `outs` path of dvc.yaml (after variables are resolved, i.e. from dvc.lock)."""
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    return sorted({o["path"] for stage in lock["stages"].values() for o in stage.get("outs", [])})


def tree_hashes(root: Path, paths: list[str]) -> dict[str, str]:
    return {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest() for f in files_under(root, paths)}


@pytest.fixture(scope="module")
def committed(project) -> dict[str, str]:
    """The run recorded with `dvc commit`, committed to git with dvc.lock and pushed to the default remote."""
    out = dvc(project, "commit", "--force", env=project.dvc_env)
    assert "dvc.lock" in out
    run(["git", "add", "dvc.lock"], project.root)
    run(["git", "commit", "-qm", "default run"], project.root, project.env)
    assert "Data and pipelines are up to date" in dvc(project, "status", env=project.dvc_env)
    dvc(project, "push", env=project.dvc_env)
    assert any(project.remote.rglob("*")), "nothing in the default remote"
    outs = dvc_outs(project.root)
    assert {"results/data", "results/pretrain", "results/tables", "results/REPORT.md"} <= set(outs)
    return tree_hashes(project.root, outs)


def clone(project: Project, name: str) -> Path:
    dst = project.root.parent / name
    run(["git", "clone", "-q", str(project.root), str(dst)], project.root.parent)
    assert not (dst / "results").exists() and not (dst / ".dvc/cache").exists()
    return dst


def test_every_stage_is_recorded_and_up_to_date(project, committed):
    lock = yaml.safe_load((project.root / "dvc.lock").read_text())
    stages = yaml.safe_load((project.root / "dvc.yaml").read_text())["stages"]
    assert set(lock["stages"]) == set(stages) >= {"data", "pretrain", "posttrain", "report"}
    out = dvc(project, "repro", env=project.dvc_env)  # nothing changed: no stage runs
    assert all(f"Stage '{s}' didn't change, skipping" in out for s in stages), out


def test_fresh_clone_pulls_the_run_and_snakemake_has_nothing_to_do(project, committed):
    repo = clone(project, "clone-local")
    dvc(project, "pull", cwd=repo, env=project.dvc_env)  # the default remote, no set-up
    assert tree_hashes(repo, dvc_outs(repo)) == committed
    assert "Data and pipelines are up to date" in dvc(project, "status", cwd=repo, env=project.dvc_env)

    # pulled files have new modification times: align them once, then nothing is scheduled
    run(snakemake_cmd("--touch", "--forceall", "--cores", "1"), repo, project.env)
    dry = run(snakemake_cmd("-n", "all"), repo, project.env)
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout
    assert "Data and pipelines are up to date" in dvc(project, "status", cwd=repo, env=project.dvc_env)

    # one table rebuilds from the pulled inputs alone
    table = repo / "results/tables/table1.md"
    table.unlink()
    assert job_counts(run(snakemake_cmd("-n", "results/tables/table1.md"), repo, project.env).stdout) == {"table1": 1}
    build = run(snakemake_cmd("results/tables/table1.md"), repo, project.env)
    assert "pretrain" not in job_counts(build.stdout + build.stderr)
    assert hashlib.sha256(table.read_bytes()).hexdigest() == committed["results/tables/table1.md"]


@pytest.fixture(scope="module")
def s3_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    yield f"http://127.0.0.1:{server._port}"
    server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_s3_round_trip_gives_identical_files(project, committed, s3_server):
    import boto3

    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_server,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    s3.create_bucket(Bucket="pit-dvc")

    def add_remote(repo: Path):  # the recipe of docs/reproducibility.md; credentials from the environment
        dvc(project, "remote", "add", "--local", "s3", "s3://pit-dvc/pit-repro", cwd=repo, env=project.dvc_env)
        dvc(project, "remote", "modify", "--local", "s3", "endpointurl", s3_server, cwd=repo, env=project.dvc_env)

    add_remote(project.root)
    dvc(project, "push", "-r", "s3", env=project.dvc_env | creds)
    assert s3.list_objects_v2(Bucket="pit-dvc")["KeyCount"] > 0

    repo = clone(project, "clone-s3")  # no cache, no outputs
    add_remote(repo)
    dvc(project, "pull", "-r", "s3", cwd=repo, env=project.dvc_env | creds)
    assert tree_hashes(repo, dvc_outs(repo)) == committed


# --- MLflow --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlflow_server(project):
    port = free_port()
    log = open(project.root.parent / "mlflow-server.log", "w")  # noqa: SIM115 (the server writes it until stopped)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            "sqlite:///mlflow.db",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        cwd=project.root,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        mlflow_store_ready(base, proc, log=project.root.parent / "mlflow-server.log")
        yield base
    finally:
        stop_group(proc, timeout=5)
        log.close()


def rest(base: str, route: str, body: dict | None = None, **query):
    url = f"{base}{route}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return json.loads(raw) if "json" in response.headers.get("Content-Type", "") else raw


def test_mlflow_server_gives_back_every_run_with_params_metrics_and_artifacts(project, mlflow_server):
    exp = rest(mlflow_server, "/api/2.0/mlflow/experiments/get-by-name", experiment_name="pit-default")["experiment"]
    runs = rest(
        mlflow_server,
        "/api/2.0/mlflow/runs/search",
        {"experiment_ids": [exp["experiment_id"]], "max_results": 1000, "filter": "attributes.status = 'FINISHED'"},
    )["runs"]
    by_name = {r["info"]["run_name"]: r for r in runs}  # one run of each name
    assert set(by_name) == expected_run_names(project.root)
    for r in runs:
        name = r["info"]["run_name"]
        assert r["data"].get("params") and r["data"].get("metrics"), name
        files = {
            f["path"]
            for f in rest(mlflow_server, "/api/2.0/mlflow/artifacts/list", run_id=r["info"]["run_id"]).get("files", [])
        }
        expected = (
            {"tables", "figures", "REPORT.md", "config.json"}
            if name.startswith("summary-")
            else {f"{name.split('-')[1]}.json"}
            if name.startswith("eval-")
            else {"summary.json", "run.json", "metrics.jsonl"}
        )
        assert expected <= files, (name, files)
    teacher = {p["key"]: p["value"] for p in by_name["teacher-256m-pit"]["data"]["params"]}
    assert teacher["train.model"] == "results/teachers/256m/final"
    summary = by_name["summary-default"]
    assert {t["key"]: t["value"] for t in summary["data"]["tags"]}["profile"] == "default"
    metrics = {m["key"]: m["value"] for m in summary["data"]["metrics"]}
    assert "table1/teacher-256m-PIT/train_loss" in metrics
    tables = {
        f["path"]
        for f in rest(mlflow_server, "/api/2.0/mlflow/artifacts/list", run_id=summary["info"]["run_id"], path="tables")[
            "files"
        ]
    }
    assert {"tables/table1.md", "tables/table2.csv"} <= tables
    report = rest(mlflow_server, "/get-artifact", path="REPORT.md", run_uuid=summary["info"]["run_id"])
    assert report == (project.root / "results/REPORT.md").read_bytes()


def test_runs_are_tagged_and_travel_with_the_results(project, tmp_path):
    """Every run says which stage made it and from which commit; evaluation runs name their arm and task; the
    report stage's results/mlflow/runs.jsonl (a DVC output) recreates the finished runs in a fresh store."""
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{project.root / 'mlflow.db'}")
    exp = client.get_experiment_by_name("pit-default")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    finished = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=1000)
    stages = {"teacher": "pretrain", "scratch": "pretrain", "stand": "pretrain", "lora": "lora", "eval": "evaluate"}
    for r in finished:
        name, tags = r.info.run_name, r.data.tags
        assert tags["stage"] == stages.get(name.split("-")[0], "summary"), name
        assert tags["profile"] == "default" and len(tags["mlflow.source.git.commit"]) >= 7, name
        assert "git_commit" not in r.data.params, name
        if name.startswith("eval-"):
            _, task, mode, slot, interface = re.sub(r"-s\d+$", "", name).split("-", 4)
            arm = {"task": task, "mode": mode, "slot": slot, "interface": interface}
            assert {k: tags[k] for k in arm} == arm, name
    shared = tmp_path / "pulled"
    shutil.copytree(project.root / "results" / "mlflow", shared / "results" / "mlflow")
    exported = [json.loads(line) for line in (shared / "results/mlflow/runs.jsonl").read_text().splitlines()]
    assert {r["run_name"] for r in exported if r["status"] == "FINISHED"} == expected_run_names(project.root)
    env = {k: v for k, v in project.env.items() if k != "MLFLOW_TRACKING_URI"}
    out = run(["pit", "mlflow", "sync", "results/mlflow"], shared, env).stdout
    assert f"imported {len(exported)} runs" in out
    fresh = mlflow.MlflowClient(f"sqlite:///{shared / 'mlflow.db'}")
    copies = fresh.search_runs([fresh.get_experiment_by_name("pit-default").experiment_id], max_results=1000)
    by_name = {r.info.run_name: r for r in copies if r.info.status == "FINISHED"}
    for r in finished:
        copy = by_name[r.info.run_name]
        assert copy.data.metrics == r.data.metrics and copy.data.params == r.data.params, r.info.run_name


def test_pit_runs_lists_the_store(project):
    from pit.errors import PitError
    from pit.tracking.run_table import format_runs, list_runs

    uri = f"sqlite:///{project.root / 'mlflow.db'}"
    rows = json.loads(run(["pit", "runs", "--uri", uri, "--format", "json"], project.root).stdout)
    finished = {r["run"]: r for r in rows if r["status"] == "FINISHED"}
    assert set(finished) == expected_run_names(project.root)
    pit_run = project.root / "results/pretrain/scratch/303m/pit"  # the float32 bound at its d, kappa(T)
    assert finished["scratch-303m-pit"]["final_loss"] > 0
    assert within(finished["scratch-303m-pit"]["delta_ti"], run_bound(pit_run), "pit runs delta_ti")
    table = run(["pit", "runs", "--uri", uri, "--experiment", "pit-default", "--wide"], project.root).stdout
    assert [c.strip() for c in table.splitlines()[0].split("|")[1:6]] == [
        "experiment",
        "run",
        "status",
        "start",
        "final_loss",
    ]
    assert "| teacher-256m-pit" in table
    assert format_runs(list_runs(uri), "csv").startswith("experiment,run,status,start,final_loss,val_loss,delta_ti")
    with pytest.raises(PitError, match="no experiment 'pit-nope'"):
        list_runs(uri, ["pit-nope"])


# --- --keep-going ----------------------------------------------------------------------------------------


def test_keep_going_finishes_the_independent_arm_and_logs_why_one_failed(project, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(project.root, work, symlinks=True)  # modification times kept: only the jobs below run
    config = yaml.safe_load((work / DEFAULT_CONFIG).read_text())
    config["pretrain"]["scratch_slots"]["broken"] = {"model": "no-such-model"}
    (work / "broken.yaml").write_text(yaml.safe_dump(config))
    good = work / "results/pretrain/scratch/303m/tt/summary.json"
    good.unlink()  # this arm runs again, next to the two broken ones
    targets = ["results/pretrain/scratch/303m/tt/summary.json", "results/pretrain/scratch/broken/pit/summary.json"]
    proc = run(snakemake_cmd(*targets, "--configfile", "broken.yaml"), work, project.env, check=False)
    assert proc.returncode != 0
    assert good.is_file(), "the independent arm did not finish"
    log = (work / "results/logs/pretrain/scratch_broken_pit.log").read_text()
    assert "pit train: error: unknown model name 'no-such-model'" in log.splitlines()[-1]
    assert "unknown model name 'no-such-model'" in proc.stdout + proc.stderr  # shown on the console too


# --- resume of a tied model (the stand-in teachers) ----------------------------------------------------


def test_tied_stand_in_teacher_resumes_from_its_checkpoint(tiny_data, tmp_path):
    """A tied GPT-2 saves lm_head.weight once (as transformer.wte.weight); resuming must accept that."""
    import torch
    from safetensors.torch import load_file

    from pit.training.args import PretrainArgs
    from pit.training.pretrain import train

    data = tiny_data["gpt2"]
    spec = dict(
        mode="scratch",
        model="gpt2-tiny",
        interface={"kind": "tt"},
        train_data=data["train"],
        val_data=data["val"],
        tokenizer=data["tokenizer"],
        seq_len=32,
        global_batch_tokens=128,
        micro_batch_size=4,
        max_steps=4,
        warmup_steps=1,
        checkpoint_every=2,
        eval_batches=1,
        final_loss_window=2,
        mlflow={"enabled": False},
    )
    train(PretrainArgs.from_dict(spec), tmp_path / "ref")
    assert train(PretrainArgs.from_dict({**spec, "stop_after_steps": 2}), tmp_path / "run") == {}
    assert (tmp_path / "run/checkpoints/step-000002").is_dir()
    train(PretrainArgs.from_dict(spec), tmp_path / "run")  # resumes at step 2
    ref = load_file(tmp_path / "ref/final/model.safetensors")
    resumed = load_file(tmp_path / "run/final/model.safetensors")
    assert ref.keys() == resumed.keys() and all(torch.equal(ref[k], resumed[k]) for k in ref)


# --- pit mlflow summary without a pipeline ---------------------------------------------------------------


def test_summary_with_mlflow_disabled_records_that_nothing_was_logged(tmp_path):
    from pit.errors import PitError
    from pit.tracking.summary import log_summary

    (tmp_path / "tables").mkdir()
    (tmp_path / "tables/table1.csv").write_text(
        "# Table 1\nmode,slot,method,train_loss,paper_train_loss\nteacher,256m,PIT,2.5,2.304\n"
    )
    (tmp_path / "figures").mkdir()
    (tmp_path / "REPORT.md").write_text("# report\n")
    config = {"profile": "default", "mlflow": {"tracking_uri": None, "experiment": "pit-default", "enabled": False}}
    args = (tmp_path / "tables", tmp_path / "figures", tmp_path / "REPORT.md", tmp_path / "out/summary.json")
    record = log_summary(config, *args)
    assert record["logged"] is False and record["run_id"] is None and record["run_name"] == "summary-default"
    assert json.loads((tmp_path / "out/summary.json").read_text()) == record
    with pytest.raises(PitError, match="figures .*does not exist"):
        log_summary(config, tmp_path / "tables", tmp_path / "nope", *args[2:])

    from pit.tracking.summary import table_metrics

    assert table_metrics(tmp_path / "tables/table1.csv") == {"table1/teacher-256m-PIT/train_loss": 2.5}

"""Sharing a run in one step each way (docs/reproducibility.md): `pit share push` in the project that ran the
pipeline, `pit share pull` in a second clone, with a local DVC remote (a folder). After the pull Snakemake has
nothing to do, `dvc status` is clean and `pit runs` lists the runs; `pit verify` on the pulled clone passes, and
fails on a planted change.

Built on the shared reduced pipeline run (fixture `pipeline_project`), copied first: the tests of
test_reproducibility.py record and push the same project their own way."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import files_under, run, snakemake_cmd

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pipeline")]  # one worker builds the shared run


def tool(env: dict, cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`python -m <args>` (pit, dvc) of this interpreter in `cwd`."""
    return run([sys.executable, "-m", *args], cwd, env, check)


def dvc_outs(root: Path) -> list[str]:
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    return sorted({o["path"] for stage in lock["stages"].values() for o in stage.get("outs", [])})


def hashes(root: Path) -> dict[str, str]:
    files = files_under(root, dvc_outs(root))
    return {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.fixture(scope="module")
def shared(pipeline_project, tmp_path_factory):
    """The pipeline's project (a copy, modification times kept) pushed with `pit share push --remote shared` to a
    folder, dvc.lock committed; a git clone of it that ran `pit share pull --remote shared`."""
    tmp = tmp_path_factory.mktemp("share")
    origin, clone, remote = tmp / "origin", tmp / "clone", tmp / "remote"
    shutil.copytree(pipeline_project.root, origin, symlinks=True)
    env = {k: v for k, v in pipeline_project.env.items() if k != "MLFLOW_TRACKING_URI"} | {"HOME": str(tmp / "home")}
    tool(env, origin, "dvc", "remote", "add", "--local", "shared", str(remote))
    push = tool(env, origin, "pit", "share", "push", "--remote", "shared")
    run(["git", "add", "dvc.lock"], origin, env)
    run(["git", "commit", "-qm", "results", "--allow-empty"], origin, env)
    run(["git", "clone", "-q", str(origin), str(clone)], tmp, env)
    assert not (clone / "results").exists() and not (clone / "mlflow.db").exists()
    tool(env, clone, "dvc", "remote", "add", "--local", "shared", str(remote))
    pull = tool(env, clone, "pit", "share", "pull", "--remote", "shared")
    return {
        "origin": origin, "clone": clone, "remote": remote, "env": env, "push": push.stdout, "pull": pull.stdout,
        "push_progress": push.stderr, "pull_progress": pull.stderr,
    }  # fmt: skip


def test_pull_gives_the_pushed_files_and_snakemake_and_dvc_have_nothing_to_do(shared):
    origin, clone, env = shared["origin"], shared["clone"], shared["env"]
    assert "pushed" in shared["push"] and any(p.is_file() for p in shared["remote"].rglob("*"))
    assert hashes(clone) == hashes(origin)
    assert {"results/data", "results/pretrain", "results/tables", "results/mlflow"} <= set(dvc_outs(clone))
    dry = run(snakemake_cmd("-n"), clone, env)
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-2000:]
    assert "Data and pipelines are up to date" in tool(env, clone, "dvc", "status").stdout
    for command, phases in (
        ("push", ["snakemake -n", "dvc commit --force", "dvc push"]),
        (
            "pull",
            [
                "dvc pull",
                "checking every pulled file",
                "dvc status",
                "snakemake --touch --forceall",
                "importing the MLflow runs",
            ],
        ),  # fmt: skip
    ):  # each phase a plain line on stderr (a pipe here) as it starts
        said = [x for x in shared[f"{command}_progress"].splitlines() if x.startswith(f"pit share {command}: [")]
        shown = [x.split("] ", 1)[1] for x in said]
        assert len(shown) == len(phases) and all(map(str.startswith, shown, phases)), shared[f"{command}_progress"]
        assert "%|" not in shared[f"{command}_progress"]  # no tqdm bar (its carriage returns read as line ends)


def test_pulled_clone_lists_the_runs_and_filters_by_stage(shared):
    import mlflow

    clone, env = shared["clone"], shared["env"]
    source = mlflow.MlflowClient(f"sqlite:///{shared['origin'] / 'mlflow.db'}")
    exp = source.get_experiment_by_name("pit-default")
    runs = source.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=1000)
    pretrained = {r.info.run_name for r in runs if r.data.tags["stage"] == "pretrain"}
    exported = (clone / "results/mlflow/runs.jsonl").read_text().splitlines()
    assert f"imported {len(exported)} MLflow runs (0 already in the store)" in shared["pull"]
    rows = json.loads(tool(env, clone, "pit", "runs", "--stage", "pretrain", "--format", "json").stdout)
    assert {r["run"] for r in rows if r["status"] == "FINISHED"} == pretrained
    assert {r["stage"] for r in rows} == {"pretrain"}
    arms = {r["run"]: (r["mode"], r["arm"]) for r in rows}
    assert arms["teacher-256m-pit-head"] == ("teacher", "pit-head")
    assert arms["stand-in-teacher-256m"] == ("stand-in", "tt")
    from pit.tracking.run_table import list_runs
    from pit.tracking.tags import stage_order

    every = list_runs(f"sqlite:///{clone / 'mlflow.db'}")  # `pit runs`: grouped by stage in the pipeline's order
    assert [r["stage"] for r in every] == sorted((r["stage"] for r in every), key=stage_order)
    assert {r["stage"] for r in every} == {"pretrain", "lora", "evaluate", "summary"}
    evaluation = list_runs(f"sqlite:///{clone / 'mlflow.db'}", filters={"stage": "evaluate"})
    assert {r["run"] for r in evaluation} == {r["run"] for r in every if r["run"].startswith("eval-")} != set()


def test_verify_passes_on_the_pulled_clone_and_fails_on_a_planted_change(shared, tmp_path):
    clone, env = shared["clone"], shared["env"]
    args = ("pit", "verify", "results/tables/table2.md", "--from", "table2", "--cores", "1")
    with open(tmp_path / "stderr.log", "wb") as log:  # stderr a file, as a redirect or a job's log
        ok = subprocess.run([sys.executable, "-m", *args], cwd=clone, env=env, stdout=subprocess.PIPE, stderr=log)
    assert ok.returncode == 0, (tmp_path / "stderr.log").read_text()[-3000:]
    assert ok.stdout.decode().splitlines()[-1].startswith("verified 2 files: 0 differences, 0 out of tolerance")
    said = (tmp_path / "stderr.log").read_bytes()
    jobs = [x for x in said.decode().splitlines() if x.startswith("pit verify: [")]  # a plain line per job
    assert jobs[0].startswith("pit verify: [0/1] snakemake plans 1 jobs") and b"\r" not in said, jobs
    assert re.fullmatch(
        r"pit verify: \[1/1\] table2 results/tables/table2\.\w+ \(\+\d+ more\) \(\d+:\d\d\)", jobs[-1]
    ), jobs
    table = clone / "results/tables/table2.csv"
    lines = table.read_text().splitlines()
    header, first, row = lines[0].split(","), lines[1].split(","), lines[2].split(",")
    recorded = float(row[header.index("delta_ti")])
    row[header.index("delta_ti")] = repr(recorded + 0.5)  # a planted change of one number
    first[header.index("delta_ti")] = "inf"  # a recorded non-finite value the rerun does not reproduce (issue 58)
    table.write_text("\n".join([lines[0], ",".join(first), ",".join(row), *lines[3:]]) + "\n")
    (clone / "results/tables/table2.json").unlink()  # a recorded file deleted from the checkout (issue 58)
    bad = tool(env, clone, *args, check=False)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    inf, line = [ln for ln in bad.stdout.splitlines() if "OUT OF TOLERANCE" in ln]
    assert line.startswith("results/tables/table2.csv row 2 (") and " delta_ti: recorded " in line, line
    assert "[rounding]" in line and inf.startswith("results/tables/table2.csv row 1 (") and "recorded inf" in inf, inf
    assert "[rounding: not finite]" in inf
    assert "results/tables/table2.json: MISSING from this checkout" in bad.stdout
    assert bad.stdout.splitlines()[-1].endswith("2 out of tolerance, 1 recorded files missing")
    assert not list((clone / ".snakemake").glob("verify-*")), "the scratch folder was left behind"

"""MLflow as a user meets it (docs/reproducibility.md, MLflow): runs shared through the results tree
(`pit mlflow export` -> results/mlflow/runs.jsonl -> `pit mlflow sync` into a fresh store), `pit runs`
over the imported store, and the MLflow UI served by `pit mlflow ui` opened in headless Chromium."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import stop_group

from pit.errors import PitError
from pit.evaluation import evaluate as ev
from pit.training.args import PretrainArgs
from pit.training.pretrain import train

pytestmark = pytest.mark.xdist_group("tracking")  # its module fixture `shared` is built once, on one worker

EXPERIMENT = "pit-share"


def pit_cli(*args, cwd=None):
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.run([sys.executable, "-m", "pit", *args], capture_output=True, text=True, cwd=cwd, env=env)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def shared(tiny_data, tmp_path_factory):
    """A project that trained one run and evaluated it (both tracked in its mlflow.db), exported the experiment to
    results/mlflow/runs.jsonl; and a clone that pulled only results/ (no mlflow.db)."""
    root = tmp_path_factory.mktemp("share")
    project, uri = root / "project", f"sqlite:///{root / 'project' / 'mlflow.db'}"
    settings = {"tracking_uri": uri, "experiment": EXPERIMENT}
    spec = dict(
        mode="scratch", model="scratch-tiny", interface={"kind": "pit"}, train_data=tiny_data["bpe2k"]["train"],
        val_data=tiny_data["bpe2k"]["val"], tokenizer=tiny_data["bpe2k"]["tokenizer"], seq_len=32,
        global_batch_tokens=256, micro_batch_size=4, max_steps=6, warmup_steps=2, eval_batches=2,
        final_loss_window=3, run_name="scratch-tiny-pit", tags={"slot": "tiny", "profile": "share"}, mlflow=settings,
    )  # fmt: skip
    train(PretrainArgs.from_dict(spec), project / "results" / "pretrain" / "run")
    eval_tags = {"mode": "scratch", "slot": "tiny", "interface": "pit", "task": "gsm8k", "profile": "share"}
    tracker = ev.start_tracker(
        "eval-gsm8k-scratch-tiny-pit", EXPERIMENT, uri, tasks=["gsm8k"], checkpoints=["m"], source="offline",
        limit=2, sampling=ev.Sampling(max_new_tokens=4), tags=eval_tags,
    )  # fmt: skip
    tracker.log_metrics(
        [{"step": 0, "lora/gsm8k/accuracy": 0.5, "lora/humaneval/pass_at_1": 0.25}],
        ("lora/gsm8k/accuracy", "lora/humaneval/pass_at_1"),
    )
    tracker.finish()
    out = project / "results" / "mlflow" / "runs.jsonl"
    proc = pit_cli("mlflow", "export", "--experiment", EXPERIMENT, "--tracking-uri", uri, "--out", str(out))
    assert proc.returncode == 0 and "2 runs" in proc.stdout, proc.stderr
    clone = root / "clone"
    shutil.copytree(project / "results", clone / "results")
    return {"project": project, "uri": uri, "clone": clone}


def test_export_imports_into_a_fresh_store_with_tags_params_and_metric_histories(shared):
    import mlflow

    clone = shared["clone"]
    assert not (clone / "mlflow.db").exists()
    proc = pit_cli("mlflow", "sync", "results/mlflow", cwd=clone)
    assert proc.returncode == 0 and "imported 2 runs (0 already in the store)" in proc.stdout, proc.stderr
    again = pit_cli("mlflow", "sync", "results/mlflow/runs.jsonl", cwd=clone)
    assert "imported 0 runs (2 already in the store)" in again.stdout, again.stderr
    source = mlflow.MlflowClient(shared["uri"])
    copy = mlflow.MlflowClient(f"sqlite:///{clone / 'mlflow.db'}")
    exp = copy.get_experiment_by_name(EXPERIMENT)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    original = {
        r.info.run_name: r for r in source.search_runs([source.get_experiment_by_name(EXPERIMENT).experiment_id])
    }
    imported = {r.info.run_name: r for r in copy.search_runs([exp.experiment_id])}
    assert set(imported) == set(original) == {"scratch-tiny-pit", "eval-gsm8k-scratch-tiny-pit"}
    for name, run in imported.items():
        before = original[name]
        assert run.info.status == before.info.status == "FINISHED"
        assert run.info.start_time == before.info.start_time and run.info.end_time == before.info.end_time
        expected = {**before.data.tags, "pit.imported_from": before.info.run_id}
        if "pit.pretrain_run" in expected:  # the evaluation names the imported copy of its pretraining run
            expected["pit.pretrain_run"] = imported["scratch-tiny-pit"].info.run_id
        assert run.data.tags == expected and "mlflow.parentRunId" not in expected
        assert run.data.params == before.data.params and run.data.metrics == before.data.metrics
        for key in before.data.metrics:
            old = [(m.step, m.value) for m in source.get_metric_history(before.info.run_id, key)]
            assert [(m.step, m.value) for m in copy.get_metric_history(run.info.run_id, key)] == old, key
    train_tags, eval_tags = imported["scratch-tiny-pit"].data.tags, imported["eval-gsm8k-scratch-tiny-pit"].data.tags
    assert train_tags["stage"] == "pretrain" and train_tags["mlflow.source.name"] == "pit train"
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", train_tags["mlflow.source.git.commit"])
    assert {k: eval_tags[k] for k in ("stage", "mode", "slot", "interface", "task", "profile")} == {
        "stage": "evaluate", "mode": "scratch", "slot": "tiny", "interface": "pit", "task": "gsm8k", "profile": "share"
    }  # fmt: skip
    assert len(copy.get_metric_history(imported["scratch-tiny-pit"].info.run_id, "loss")) == 6

    rows = json.loads(pit_cli("runs", "--format", "json", cwd=clone).stdout)
    by_name = {r["run"]: r for r in rows}
    assert by_name["eval-gsm8k-scratch-tiny-pit"]["lora/gsm8k/accuracy"] == 0.5
    assert by_name["eval-gsm8k-scratch-tiny-pit"]["lora/humaneval/pass_at_1"] == 0.25
    assert by_name["scratch-tiny-pit"]["final_loss"] == pytest.approx(
        original["scratch-tiny-pit"].data.metrics["final_train_loss"]
    )
    header = pit_cli("runs", "--format", "csv", cwd=clone).stdout.splitlines()[0].split(",")
    assert header[:8] == ["experiment", "run", "status", "start", "final_loss", "val_loss", "delta_ti", "runtime_s"]
    assert {"lora/gsm8k/accuracy", "lora/humaneval/pass_at_1"} <= set(header)


def test_bad_exports_and_tags_are_one_clear_error(shared, tmp_path):
    from pit.tracking.transfer import import_runs

    bad = tmp_path / "runs.jsonl"
    bad.write_text('{"run_name": "x"}\n')
    with pytest.raises(PitError, match=r"line 1: not an exported run \(missing experiment, run_id"):
        import_runs(bad, f"sqlite:///{tmp_path / 'x.db'}")
    bad.write_text("{oops\n")
    with pytest.raises(PitError, match="is not a run export"):
        import_runs(bad, f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(PitError, match="expected a string or number per tag"):
        ev.start_tracker(
            "e", "x", f"sqlite:///{tmp_path / 'x.db'}", tasks=[], checkpoints=[], source="offline", limit=None,
            sampling=ev.Sampling(max_new_tokens=1), tags={"task": ["gsm8k"]},
        )  # fmt: skip


def test_mlflow_ui_opens_the_training_runs_table_in_headless_chromium(shared, tmp_path):
    clone = shared["clone"]
    if not (clone / "mlflow.db").exists():
        assert pit_cli("mlflow", "sync", "results/mlflow", cwd=clone).returncode == 0
    chromium = shutil.which("chromium")
    assert chromium, "Chromium is required for this test (bash scripts/setup.sh --test-system-packages)"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    log = tmp_path / "ui.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "pit", "mlflow", "ui", "--port", str(port), "--experiment", EXPERIMENT],
            cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
        (url,) = re.findall(rf"^{EXPERIMENT}: (http://\S+)$", log.read_text(), flags=re.M)
        assert url.endswith("/runs?workflowType=machine_learning")
        (url,) = re.findall(rf"^{EXPERIMENT} \[stage evaluate\]: (http://\S+)$", log.read_text(), flags=re.M)
        assert url.endswith("/runs?workflowType=machine_learning&searchFilter=tags.stage%20%3D%20%27evaluate%27")
        flags = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000",
        ]  # fmt: skip
        dom = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=180)
        assert dom.returncode == 0, dom.stderr[-2000:]
    finally:
        stop_group(server)
    body = re.sub(r"<(script|style)\b.*?</\1>", "", dom.stdout, flags=re.S)
    text = " ".join(re.sub(r"<[^>]+>", " ", body).split())
    assert "Runs - Experiment" in text, text[:1500]  # the page title of the runs table, not the GenAI overview
    # one stage on its own (runs are not nested): the evaluation run is listed, its pretraining run is not
    others = text.replace("eval-gsm8k-scratch-tiny-pit", "")
    assert "eval-gsm8k-scratch-tiny-pit" in text and "scratch-tiny-pit" not in others, text[:3000]
    assert "1 matching runs" in text or "1 matching run" in text, text[-1500:]
    assert "Traces 0" not in text


# --- tags, the pretraining-run link, datasets, checkpoint, summary tables, pit runs order -----------------------


def test_runs_name_their_arm_and_pretraining_run_unnested_and_log_data_and_checkpoint(shared, tiny_data):
    import mlflow

    from pit.io import sha256_file

    client = mlflow.MlflowClient(shared["uri"])
    exp = client.get_experiment_by_name(EXPERIMENT)
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    train, evaluation = runs["scratch-tiny-pit"], runs["eval-gsm8k-scratch-tiny-pit"]
    assert {k: train.data.tags[k] for k in ("stage", "mode", "slot", "arm", "interface")} == {
        "stage": "pretrain", "mode": "scratch", "slot": "tiny", "arm": "pit", "interface": "pit"
    }  # fmt: skip
    assert evaluation.data.tags["arm"] == "pit"
    assert evaluation.data.tags["pit.pretrain_run"] == train.info.run_id  # a link, not MLflow's nesting:
    assert "mlflow.parentRunId" not in evaluation.data.tags  # a UI filter on one stage lists that stage's runs
    final = shared["project"] / "results" / "pretrain" / "run" / "final"
    assert train.data.tags["pit.checkpoint"] == str(final) and (final / "config.json").is_file()
    inputs = {d.dataset.name: d for d in train.inputs.dataset_inputs}
    data = tiny_data["bpe2k"]
    assert set(inputs) == {data["train"], data["val"]}
    for split, context in (("train", "training"), ("val", "validation")):
        found = inputs[data[split]]
        assert found.dataset.digest == sha256_file(data[split])[:36]
        assert {t.key: t.value for t in found.tags}["mlflow.data.context"] == context
        assert json.loads(found.dataset.source) == {"uri": data[split]}


def test_run_tags_tell_arms_and_stand_in_teachers_apart():
    from pit.tracking.tags import pretrain_run_filter, run_tags

    pretrain = {"stage": "pretrain", "mode": "teacher", "slot": "256m", "interface": "pit"}
    assert run_tags("teacher-256m-pit-head", pretrain)["arm"] == "pit-head"
    assert run_tags("teacher-256m-pit", pretrain)["arm"] == "pit"
    assert (
        run_tags("scratch-1.17b-tt-norewarm-s3", {**pretrain, "mode": "scratch", "slot": "1.17b", "seed": 3})["arm"]
        == "tt-norewarm"
    )
    lora = {"stage": "lora", "mode": "teacher", "slot": "256m", "interface": "pit", "task": "mbpp"}
    assert run_tags("lora-mbpp-teacher-256m-pit-head", lora)["arm"] == "pit-head"
    assert run_tags("my-run", {"stage": "pretrain", "interface": "tt", "arm": "tt-x"})["arm"] == "tt-x"  # given: wins
    stand_in = {"stage": "pretrain", "mode": "scratch", "slot": "256m", "interface": "tt", "role": "stand-in-teacher"}
    assert {k: run_tags("stand-in-teacher-256m", stand_in)[k] for k in ("mode", "arm")} == {
        "mode": "stand-in", "arm": "tt"
    }  # fmt: skip
    assert pretrain_run_filter(run_tags("eval-mbpp-teacher-256m-pit-head", {**lora, "stage": "evaluate"})) == (
        "tags.stage = 'pretrain' and tags.mode = 'teacher' and tags.slot = '256m' and tags.arm = 'pit-head'"
    )
    assert pretrain_run_filter(run_tags("teacher-256m-pit", pretrain)) is None


def test_summary_logs_the_claims_table_as_a_table_artifact_and_paper_tables_as_metrics(tmp_path):
    import mlflow

    from pit.tracking.summary import log_summary

    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "table1.csv").write_text("# Table 1\nmode,slot,method,train_loss\nteacher,256m,PIT,2.5\n")
    claim = '"""PIT reaches a lower loss than TT at every scale, with a long quote"" (Section 5.3)"'
    (tables / "claims.csv").write_text(f"claim,paper,n,diff,verdict\nloss,{claim},1,-0.25,n = 1\nangle,x,3,,holds\n")
    (tables / "stability.csv").write_text("\n")  # a table with no rows in this profile: left out
    (tmp_path / "figures").mkdir()
    (tmp_path / "REPORT.md").write_text("# report\n")
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    config = {"profile": "default", "mlflow": {"tracking_uri": uri, "experiment": "pit-default", "enabled": True}}
    record = log_summary(config, tables, tmp_path / "figures", tmp_path / "REPORT.md", tmp_path / "summary.json")
    client = mlflow.MlflowClient(uri)
    run = client.get_run(record["run_id"])
    assert run.data.metrics == {"table1/teacher-256m-PIT/train_loss": 2.5}
    table = json.loads(
        Path(client.download_artifacts(run.info.run_id, "table_artifacts/claims.json", tmp_path)).read_text()
    )
    assert table["columns"] == ["claim", "paper", "n", "diff", "verdict"]
    quote = '"PIT reaches a lower loss than TT at every scale, with a long quote" (Section 5.3)'
    assert table["data"][0] == ["loss", quote, 1, -0.25, "n = 1"]
    assert table["data"][1] == ["angle", "x", 3, None, "holds"]
    logged = json.loads(run.data.tags["mlflow.loggedArtifacts"])
    assert {"path": "table_artifacts/claims.json", "type": "table"} in logged
    assert not any("stability" in entry["path"] for entry in logged)


def test_pit_runs_filters_by_stage_and_arm_in_a_compact_table(shared):
    uri = shared["uri"]
    rows = json.loads(pit_cli("runs", "--uri", uri, "--stage", "pretrain", "--format", "json").stdout)
    assert [(r["run"], r["stage"], r["arm"]) for r in rows] == [("scratch-tiny-pit", "pretrain", "pit")]
    bad = pit_cli("runs", "--uri", uri, "--arm", "pit-head")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "pit runs: error: --arm 'pit-head': no listed run has it (values: pit)"
    from pit.tracking.run_table import format_runs, list_runs

    table = format_runs(
        list_runs(uri, filters={"mode": "scratch"})
    ).splitlines()  # what `pit runs --mode scratch` prints
    assert [c.strip() for c in table[0].split("|")[1:-1]] == [
        "run", "stage", "status", "final_loss", "val_loss", "delta_ti", "score", "id"
    ]  # fmt: skip
    assert len(table) == 4 and max(len(line) for line in table) < 120
    assert table[3].split("|")[7].strip() == "0.5"  # the evaluation run's in-domain score after LoRA
    evaluation = list_runs(uri, filters={"stage": "evaluate"})  # `pit runs --stage evaluate`
    assert [(r["run"], r["stage"]) for r in evaluation] == [("eval-gsm8k-scratch-tiny-pit", "evaluate")]


def test_runs_are_listed_by_stage_in_the_pipelines_order():
    """`pit runs` (pit.tracking.run_table.ordered): per experiment, the stages in the pipeline's order, each stage's
    runs by start time, whatever order the jobs started in (a LoRA job starts before another arm's pretraining)."""
    import pandas as pd

    from pit.tracking.run_table import ordered

    started = [("b", "eval-x", "evaluate"), ("a", "lora-x", "lora"), ("a", "scratch-x", "pretrain"),
               ("a", "summary-default", "summary"), ("a", "eval-x", "evaluate"), ("a", "teacher-y", "pretrain"),
               ("a", "old", None)]  # fmt: skip
    frame = pd.DataFrame(
        {"experiment_id": [e for e, _, _ in started], "tags.mlflow.runName": [n for _, n, _ in started],
         "tags.stage": [s for *_, s in started], "start_time": pd.to_datetime(range(len(started)), unit="s")}
    )  # fmt: skip
    rows = ordered(frame, ["a", "b"])
    assert list(zip(rows["experiment_id"], rows["tags.mlflow.runName"], strict=True)) == [
        ("a", "scratch-x"), ("a", "teacher-y"), ("a", "lora-x"), ("a", "eval-x"), ("a", "summary-default"),
        ("a", "old"), ("b", "eval-x"),
    ]  # fmt: skip
    assert list(rows.columns) == list(frame.columns)

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

import pytest
from helpers import stop_group

from pit.errors import PitError
from pit.evaluation import evaluate as ev
from pit.training.args import PretrainArgs
from pit.training.pretrain import train

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
        assert run.data.tags == {**before.data.tags, "pit.imported_from": before.info.run_id}
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
    assert chromium, "Chromium is required for this test (scripts/setup.sh installs Debian's chromium)"
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
    assert "scratch-tiny-pit" in text and "eval-gsm8k-scratch-tiny-pit" in text, text[:3000]
    assert "2 matching runs" in text, text[-1500:]
    assert "Traces 0" not in text

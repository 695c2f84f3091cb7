"""`pit train`: interface consistency during training, resume after SIGKILL, DDP, MLflow, bad input."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import mlflow_store_ready
from safetensors.torch import load_file
from tolerances import relative_bound, run_bound, within

from pit.errors import PitError
from pit.training.args import PretrainArgs
from pit.training.pretrain import train
from pit.training.run_folder import FinishedRun


def spec(data, tok="bpe2k", **kw):
    base = dict(
        mode="scratch",
        model="scratch-tiny",
        interface={"kind": "pit"},
        train_data=data[tok]["train"],
        val_data=data[tok]["val"],
        tokenizer=data[tok]["tokenizer"],
        seq_len=32,
        global_batch_tokens=256,
        micro_batch_size=4,
        max_steps=8,
        warmup_steps=2,
        lr=3e-3,
        min_lr=3e-4,
        eval_batches=2,
        final_loss_window=3,
        mlflow={"enabled": False},
    )
    base.update(kw)
    return base


def rows(run_dir):
    return [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def pit_cli(*args, env=None, **kw):
    return subprocess.run(
        [sys.executable, "-m", "pit", *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, **kw
    )


def kill_at_step_8_then_resume(s: dict, run_dir: Path) -> None:
    """`pit train` in a subprocess, SIGKILLed once its step-8 checkpoint exists, then the same command again."""
    cmd = [sys.executable, "-m", "pit", "train", "--spec", json.dumps(s), "--out", str(run_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not (run_dir / "checkpoints" / "step-000008").exists():
        assert proc.poll() is None and time.time() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "summary.json").exists()
    rc = pit_cli("train", "--spec", json.dumps(s), "--out", str(run_dir))
    assert rc.returncode == 0, rc.stderr[-2000:]


@pytest.mark.parametrize("kind", ["pit", "tt", "untied"])
def test_run_folder_metrics_and_interface(kind, tiny_data, tmp_path):
    summary = train(PretrainArgs.from_dict(spec(tiny_data, interface={"kind": kind}, eval_every=4)), tmp_path)
    metrics = rows(tmp_path)
    assert [r["step"] for r in metrics] == list(range(1, 9))
    assert [r["step"] for r in metrics if "val_loss" in r] == [4]  # the learning curve; step 8's is the summary's
    assert 0 < metrics[3]["val_loss"] < 20
    assert all({"tokens", "loss", "lr", "grad_norm", "tokens_per_s", "delta_ti"} <= set(r) for r in metrics)
    if kind == "pit":  # the float32 bound at the model's d and kappa(T) (tests/tolerances.py)
        assert within(max(r["delta_ti"] for r in metrics), run_bound(tmp_path), "pit run delta_ti")
    else:
        assert min(r["delta_ti"] for r in metrics) > 1e-2
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    assert summary["final_train_ppl"] == pytest.approx(2.718281828 ** summary["final_train_loss"])
    for key in ("val_loss", "val_ppl", "runtime_s", "tokens", "peak_memory_mb", "first_step_loss"):
        assert key in summary
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    from pit.models.checkpoint import load_model

    model = load_model(tmp_path / "final")
    assert model.interface.kind == kind
    assert (tmp_path / "final" / "tokenizer.json").is_file()
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted_run(tiny_data, tmp_path):
    s = spec(tiny_data, max_steps=16, checkpoint_every=4, eval_every=6)
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "killed"
    train(PretrainArgs.from_dict(s), ref_dir)

    kill_at_step_8_then_resume(s, run_dir)
    ref, resumed = rows(ref_dir), rows(run_dir)
    assert [r["step"] for r in resumed] == list(range(1, 17))
    for a, b in zip(ref, resumed):
        assert abs(a["loss"] - b["loss"]) <= 1e-6, (a, b)
        assert abs(a.get("val_loss", 0) - b.get("val_loss", 0)) <= 1e-6, (a, b)  # steps 6 and 12
    w_ref, w_run = (
        load_file(ref_dir / "final" / "model.safetensors"),
        load_file(run_dir / "final" / "model.safetensors"),
    )
    assert w_ref.keys() == w_run.keys()
    assert all(torch.equal(w_ref[k], w_run[k]) for k in w_ref)


def test_loss_chunk_rows_change_only_round_off(tiny_data, tmp_path):
    """loss_chunk_rows 16 splits each micro-batch's 128 rows of logits into 8 chunks (the default takes them in one):
    the same losses to round-off, and the same run by its fingerprint (a finished run folder is not trained again)."""
    default, chunked = tmp_path / "default", tmp_path / "chunked"
    train(PretrainArgs.from_dict(spec(tiny_data)), default)
    train(PretrainArgs.from_dict(spec(tiny_data, loss_chunk_rows=16)), chunked)
    a, b = rows(default), rows(chunked)
    assert [r["step"] for r in b] == list(range(1, 9))
    assert all(abs(x["loss"] - y["loss"]) <= 1e-5 for x, y in zip(a, b)), (a, b)
    assert any(x["loss"] != y["loss"] or x["grad_norm"] != y["grad_norm"] for x, y in zip(a, b))  # another sum order
    again = train(PretrainArgs.from_dict(spec(tiny_data, loss_chunk_rows=16)), default)
    assert isinstance(again, FinishedRun) and rows(default) == a


def test_resume_on_another_thread_count_warns_that_the_run_changes(tiny_data, tmp_path, caplog):
    """`threads` is outside the fingerprint, so a run stopped on 1 thread resumes on 2; a warning names both counts,
    since the sums of each step split over threads differently from there. Resumed on the same count: no warning."""
    s = spec(tiny_data, max_steps=4, checkpoint_every=2, stop_after_steps=2, threads=1)
    for run_dir in (tmp_path / "other", tmp_path / "same"):
        assert train(PretrainArgs.from_dict(s), run_dir) == {}  # stopped after step 2, its checkpoint kept
    caplog.set_level("WARNING", logger="pit.training.run_folder")
    train(PretrainArgs.from_dict(s | {"stop_after_steps": None, "threads": 2}), tmp_path / "other")
    warned = [r.getMessage() for r in caplog.records if "CPU threads" in r.getMessage()]
    assert warned == [
        "resuming on 2 CPU threads from a checkpoint written on 1: from here the steps differ at round-off from a run "
        "that kept 1 (`threads: 1` resumes it exactly)"
    ]
    assert [r["step"] for r in rows(tmp_path / "other")] == [1, 2, 3, 4]
    caplog.clear()
    train(PretrainArgs.from_dict(s | {"stop_after_steps": None}), tmp_path / "same")
    assert not [r for r in caplog.records if "CPU threads" in r.getMessage()]


def test_ddp_two_processes_match_single_process(tiny_data, tmp_path):
    s = spec(tiny_data, max_steps=5, global_batch_tokens=512, micro_batch_size=4, threads=1)
    single = tmp_path / "single"
    threads = torch.get_num_threads()
    train(PretrainArgs.from_dict(s), single)
    assert torch.get_num_threads() == threads, "train() must restore the caller's thread count"
    ddp = tmp_path / "ddp"
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        "-m",
        "pit",
        "train",
        "--spec",
        json.dumps(s),
        "--out",
        str(ddp),
    ]
    rc = subprocess.run(torchrun, capture_output=True, text=True, timeout=600)
    assert rc.returncode == 0, rc.stderr[-3000:]
    a, b = rows(single), rows(ddp)
    assert len(a) == len(b) == 5
    for x, y in zip(a, b):
        assert abs(x["loss"] - y["loss"]) <= 1e-5, (x, y)
    assert json.loads((ddp / "run.json").read_text())["params"]["world_size"] == 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_mlflow_sqlite_store_has_params_metrics_artifacts(tiny_data, tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    train(
        PretrainArgs.from_dict(
            spec(
                tiny_data,
                run_name="scratch-tiny-pit",
                tags={"slot": "303m"},
                mlflow={"tracking_uri": uri, "experiment": "pit-test"},
            )
        ),
        tmp_path / "run",
    )
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("pit-test")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_name == "scratch-tiny-pit" and run.info.status == "FINISHED"
    assert (
        run.data.tags["interface"] == "pit" and run.data.tags["mode"] == "scratch" and run.data.tags["slot"] == "303m"
    )
    assert run.data.params["train.max_steps"] == "8" and "git_commit" not in run.data.params
    assert run.data.tags["stage"] == "pretrain" and run.data.tags["mlflow.source.name"] == "pit train"
    assert len(run.data.tags["mlflow.source.git.commit"]) >= 7 and run.data.tags["mlflow.runName"] == "scratch-tiny-pit"
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert "tokenizer_sha256" in run.data.params and "train_data_sha256" in run.data.params
    history = client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in history) == list(range(1, 9))
    logged = max(m.value for m in client.get_metric_history(run.info.run_id, "delta_ti"))
    assert within(logged, run_bound(tmp_path / "run"), "mlflow delta_ti")
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary.json", "metrics.jsonl", "run.json"} <= names
    assert {"final_train_loss", "val_loss", "runtime_s", "peak_memory_mb"} <= set(run.data.metrics)
    # `pit mlflow sync` of the run folder gives back every metric (and its history), tag and param of the live run
    later = f"sqlite:///{tmp_path / 'later.db'}"
    assert pit_cli("mlflow", "sync", str(tmp_path / "run"), "--tracking-uri", later).returncode == 0
    other = mlflow.MlflowClient(later)
    (synced,) = other.search_runs([other.get_experiment_by_name("pit-test").experiment_id])
    assert set(synced.data.metrics) == set(run.data.metrics) and synced.data.params == run.data.params
    assert synced.data.tags == run.data.tags
    for key in run.data.metrics:
        live = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
        assert sorted((m.step, m.value) for m in other.get_metric_history(synced.info.run_id, key)) == sorted(live), key


@pytest.mark.slow
def test_mlflow_server_down_mid_run_does_not_stop_training(tiny_data, tmp_path):
    import mlflow

    port = free_port()
    store = f"sqlite:///{tmp_path / 'server.db'}"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            store,
            "--default-artifact-root",
            str(tmp_path / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        mlflow_store_ready(uri, server)
        s = spec(tiny_data, max_steps=30, mlflow={"tracking_uri": uri, "experiment": "served"})
        run_dir = tmp_path / "run"
        proc = subprocess.Popen(
            [sys.executable, "-m", "pit", "train", "--spec", json.dumps(s), "--out", str(run_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 240
        while not ((run_dir / "metrics.jsonl").exists() and len(rows(run_dir)) >= 3):
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.05)
        client = mlflow.MlflowClient(uri)
        (run,) = client.search_runs([client.get_experiment_by_name("served").experiment_id])
        assert run.data.params["train.max_steps"] == "30"
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    assert "MLflow tracking disabled" in err
    assert len(rows(run_dir)) == 30 and (run_dir / "summary.json").is_file()

    # the run folder uploads later to another store
    later = f"sqlite:///{tmp_path / 'later.db'}"
    rc = pit_cli("mlflow", "sync", str(run_dir), "--tracking-uri", later)
    assert rc.returncode == 0, rc.stderr
    client = mlflow.MlflowClient(later)
    (run,) = client.search_runs([client.get_experiment_by_name("served").experiment_id])
    assert len(client.get_metric_history(run.info.run_id, "loss")) == 30


def test_teacher_mode_arms_start_from_the_teacher(tiny_data, tmp_path):
    from pit.models import build_model, load_teacher
    from pit.training.pretrain import build_run_model

    teacher = build_model("gpt2-tiny", seed=0)
    teacher.save_pretrained(tmp_path / "teacher")
    E0 = teacher.transformer.wte.weight.detach()
    for kind, t_init in (("pit", "inverse_h"), ("tt", "identity"), ("untied", "identity")):
        cfg = PretrainArgs.from_dict(
            spec(
                tiny_data,
                tok="gpt2",
                mode="teacher",
                model=str(tmp_path / "teacher"),
                interface={"kind": kind, "t_init": t_init},
            )
        )
        model = build_run_model(cfg, 50257, 50256)
        E = model.interface.input_embedding().detach()
        kappa = torch.linalg.cond(E0.double()).item()  # PIT's T = H^-1 has kappa(E0); TT and untied copy E0
        bound = relative_bound(E0.shape[1], 3, kappa) if kind == "pit" else 0.0
        assert within(((E - E0).norm() / E0.norm()).item(), bound, f"{kind} E = E0"), kind
    summary = train(
        PretrainArgs.from_dict(
            spec(
                tiny_data,
                tok="gpt2",
                mode="teacher",
                model=str(tmp_path / "teacher"),
                interface={"kind": "pit"},
                max_steps=3,
            )
        ),
        tmp_path / "run",
    )
    assert rows(tmp_path / "run")[0]["loss"] == summary["first_step_loss"]
    assert isinstance(load_teacher(str(tmp_path / "teacher")), type(teacher))
    # a stand-in teacher on a BPE of the corpus takes that vocabulary's EOS, not GPT-2's 50256
    stand_in = build_run_model(
        PretrainArgs.from_dict(spec(tiny_data, model="gpt2-tiny", interface={"kind": "tt"})), 2000, 0
    )
    assert (stand_in.config.vocab_size, stand_in.config.bos_token_id, stand_in.config.eos_token_id) == (2000, 0, 0)


def test_bad_input_fails_before_training(tiny_data, tmp_path):
    with pytest.raises(PitError, match=r"global_batch_tokens 1000 is not a multiple of micro_batch_size x seq_len"):
        train(PretrainArgs.from_dict(spec(tiny_data, global_batch_tokens=1000)), tmp_path / "a")
    assert not (tmp_path / "a").exists()
    with pytest.raises(PitError, match=r"cannot load teacher '.*no-teacher'"):
        train(
            PretrainArgs.from_dict(spec(tiny_data, tok="gpt2", mode="teacher", model=str(tmp_path / "no-teacher"))),
            tmp_path / "b",
        )
    # a checkpoint that already has an interface given as the teacher: refused, with the mode that takes it
    from pit.core.interfaces import InterfaceConfig
    from pit.models import build_model

    build_model("scratch-tiny", InterfaceConfig(kind="tt"), vocab_size=50257).save_pretrained(tmp_path / "scratch")
    with pytest.raises(PitError, match=r"already has a tt interface .*mode 'teacher' converts a plain causal LM: set "
                       "mode: continue"):  # fmt: skip
        train(
            PretrainArgs.from_dict(spec(tiny_data, tok="gpt2", mode="teacher", model=str(tmp_path / "scratch"))),
            tmp_path / "c",
        )
    with pytest.raises(PitError, match=r"unknown keys \['lr_max'\]"):
        PretrainArgs.from_dict({**spec(tiny_data), "lr_max": 1.0})
    rc = pit_cli("train", "--spec", json.dumps(spec(tiny_data, micro_batch_size=0)), "--out", str(tmp_path / "d"))
    assert rc.returncode == 2 and "micro_batch_size 0; expected > 0" in rc.stderr


def test_spike_and_nonfinite_policies(tiny_data, tmp_path):
    # an absurd learning rate makes the loss blow up; 'stop' ends the run with a clear error
    s = spec(
        tiny_data,
        lr=50.0,
        min_lr=50.0,
        warmup_steps=0,
        max_steps=12,
        spike_factor=1.5,
        on_spike="stop",
        on_nonfinite="stop",
        grad_clip=1e6,
    )
    with pytest.raises(PitError, match=r"(spike|nonfinite) loss"):
        train(PretrainArgs.from_dict(s), tmp_path / "stop")
    # 'skip' goes on past them; a run that skipped most of its steps has diverged: an error, not a finished run ...
    s.update(on_spike="skip", on_nonfinite="skip")
    with pytest.raises(PitError, match=r"the run diverged: \d+ of 12 steps skipped"):
        train(PretrainArgs.from_dict(s), tmp_path / "skip")
    events = [r.get("event") for r in rows(tmp_path / "skip")]
    assert "spike" in events or "nonfinite" in events
    assert not (tmp_path / "skip" / "summary.json").exists()
    # ... unless allow_divergence records it (as a learning-rate sweep does)
    s.update(allow_divergence=True)
    train(PretrainArgs.from_dict(s), tmp_path / "allowed")
    assert (tmp_path / "allowed" / "summary.json").exists()


def test_a_run_stuck_in_nonfinite_steps_ends_there_as_diverged(tiny_data, tmp_path):
    """stop_after_nonfinite k: after k consecutive non-finite steps the weights no longer change, so the run ends,
    recorded as diverged at the first of them; a setting that never fires changes nothing (same fingerprint)."""
    s = spec(tiny_data, lr=1e4, min_lr=1e4, warmup_steps=0, max_steps=40, grad_clip=1e9, allow_divergence=True)
    assert (
        PretrainArgs.from_dict({**s, "stop_after_nonfinite": 0}).fingerprint()
        == PretrainArgs.from_dict(s).fingerprint()
    )
    summary = train(PretrainArgs.from_dict({**s, "stop_after_nonfinite": 3}), tmp_path / "stuck")
    logged = rows(tmp_path / "stuck")
    first = next(r["step"] for r in logged if r.get("event") == "nonfinite")
    assert all(r.get("event") == "nonfinite" for r in logged[first - 1 :]) and len(logged) == first + 2
    assert summary["diverged_at_step"] == first and summary["steps_run"] == first + 2 < 40
    assert "stopped after 3 consecutive non-finite steps from step" in summary["diverged"]

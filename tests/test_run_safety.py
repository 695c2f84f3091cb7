"""Runs that cannot be lost or mixed (issue 14, class 2), each at a deterministic point, no timers:

- a finished run folder is reported done and left untouched; other settings are refused, and replace the old
  result (`overwrite`) only once the new run is complete, also when the replacement itself is killed;
- a second process on a run folder fails at once (the folder's flock);
- damaged checkpoints (truncated, junk `step-*`) fall back to the newest intact one, with the same result;
- one training is one MLflow run across kills and reruns, at the worst kill points: after the MLflow run was
  created but before the first checkpoint, and after MLflow FINISHED but before Snakemake recorded the job
  (Snakemake then deletes the job's outputs and runs it again), for pretraining and LoRA;
- a killed `pit table` or tokenization leaves no mixed set a reader cannot tell, and no temporaries after the
  next run.

Kills are real SIGKILLs at a chosen point (`killed_at`: an audit hook in the child) or `stop_after_steps`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import killed_at
from safetensors.torch import load_file

from pit.errors import PitError
from pit.training.args import LoraArgs, PretrainArgs
from pit.training.lora import train_lora
from pit.training.pretrain import train
from pit.training.run_folder import LOCK_MARKER


def spec(data, **kw) -> dict:
    base = dict(
        mode="scratch",
        model="scratch-tiny",
        interface={"kind": "pit"},
        train_data=data["bpe2k"]["train"],
        val_data=data["bpe2k"]["val"],
        tokenizer=data["bpe2k"]["tokenizer"],
        seq_len=32,
        global_batch_tokens=128,
        micro_batch_size=4,
        max_steps=8,
        warmup_steps=2,
        eval_batches=1,
        final_loss_window=2,
        mlflow={"enabled": False},
    )
    return base | kw


@pytest.fixture(scope="module")
def mlflow_db(tmp_path_factory) -> str:
    """One SQLite store for the module (creating one takes seconds); each test has its own experiment."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def store(mlflow_db, request) -> dict:
    return {"tracking_uri": mlflow_db, "experiment": request.node.name}


def mlflow_runs(mlflow: dict) -> list:
    import mlflow as mlflow_lib

    client = mlflow_lib.MlflowClient(mlflow["tracking_uri"])
    exp = client.get_experiment_by_name(mlflow["experiment"])
    return client.search_runs([exp.experiment_id]) if exp is not None else []


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """{relative path: (mtime_ns, sha256)} of every file under `folder` but the lock file (a killed process leaves
    one behind, which the next one removes)."""
    return {
        str(f.relative_to(folder)): (f.stat().st_mtime_ns, hashlib.sha256(f.read_bytes()).hexdigest())
        for f in sorted(folder.rglob("*"))
        if f.is_file() and f.name != ".lock"
    }


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(f).items()}


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def pit_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pit", *args], capture_output=True, text=True)


def train_cli(s: dict, out: Path, *flags: str) -> subprocess.CompletedProcess:
    return pit_cli("train", "--spec", json.dumps(s), "--out", str(out), *flags)


# --- finished runs: done, refused, replaced only when complete ---------------------------------------------------


def test_finished_run_is_reported_done_and_left_untouched(tiny_data, tmp_path, store):
    s = spec(tiny_data, checkpoint_every=2, mlflow=store)
    run = tmp_path / "run"
    summary = train(PretrainArgs.from_dict(s), run)
    before = snapshot(run)
    again = train_cli(s, run)
    assert again.returncode == 0, again.stderr[-2000:]
    [line] = again.stdout.splitlines()
    assert line.startswith(f"{run}: already finished with these settings (fingerprint ")
    assert snapshot(run) == before, "a finished run was touched"
    assert [r.info.status for r in mlflow_runs(s["mlflow"])] == ["FINISHED"]
    assert train(PretrainArgs.from_dict(s), run) == summary  # the library gives the stored summary back


def test_other_settings_are_refused_and_replace_the_old_run_only_once_complete(tiny_data, tmp_path):
    old, new = spec(tiny_data), spec(tiny_data, lr=2e-3, checkpoint_every=2)
    old_fp, new_fp = PretrainArgs.from_dict(old).fingerprint(), PretrainArgs.from_dict(new).fingerprint()
    run, ref = tmp_path / "run", tmp_path / "ref"
    train(PretrainArgs.from_dict(old), run)
    train(PretrainArgs.from_dict(new), ref)
    before = snapshot(run)

    with pytest.raises(PitError, match="holds a finished run with other settings") as refused:
        train(PretrainArgs.from_dict(new), run)  # (`pit lora train` shows the CLI's exit 2 below)
    assert f"fingerprint {old_fp[:12]}" in str(refused.value) and new_fp[:12] in str(refused.value)
    assert "--overwrite" in str(refused.value) and snapshot(run) == before

    # the replacement, stopped half-way: the old result is still the folder's, whole
    assert train(PretrainArgs.from_dict(new | {"stop_after_steps": 4}), run, overwrite=True) == {}
    assert {k: v for k, v in snapshot(run).items() if not k.startswith(".next/")} == before
    assert (run / ".next/checkpoints/step-000004").is_dir()

    # resumed to the end, then killed while its results move up (after final/, before metrics.jsonl)
    killed = killed_at(
        "os.rename",
        str(run / "metrics.jsonl"),
        ["-m", "pit", "train", "--spec", json.dumps(new), "--out", str(run), "--overwrite"],
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (run / "summary.json").exists(), "a half-replaced folder must not read as finished"
    done = train(PretrainArgs.from_dict(new), run)  # completes the move, then finds this run finished
    from pit.training.run_folder import FinishedRun

    assert isinstance(done, FinishedRun) and done == json.loads((ref / "summary.json").read_text()) | {
        "run_name": "run",
        "runtime_s": done["runtime_s"],
        "peak_memory_mb": done["peak_memory_mb"],
    }
    assert json.loads((run / "run.json").read_text())["fingerprint"] == new_fp
    assert losses(run) == losses(ref) and same_weights(run / "final", ref / "final")
    assert not (run / ".next").exists() and not list(run.rglob("*.tmp"))


# --- one process per run folder ----------------------------------------------------------------------------------


def test_a_second_process_on_the_same_run_folder_fails_at_once(tiny_data, tmp_path):
    s, run = spec(tiny_data), tmp_path / "run"
    run.mkdir()
    fd = os.open(run / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a `pit train` at work on this folder holds
        os.write(fd, f"{LOCK_MARKER}4242\n".encode())
        with pytest.raises(PitError, match=r"in use by another process \(pid 4242"):
            train(PretrainArgs.from_dict(s), run)
        proc = train_cli(s, run)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
        assert "pit train: error:" in proc.stderr and "in use by another process" in proc.stderr
        assert sorted(p.name for p in run.iterdir()) == [".lock"], "the second process wrote into the folder"
    finally:
        os.close(fd)
    assert train(PretrainArgs.from_dict(s), run)["final_train_loss"] > 0  # free again
    assert not (run / ".lock").exists()


# --- damaged checkpoints -----------------------------------------------------------------------------------------


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_damaged_checkpoints_fall_back_to_the_newest_intact_one(tiny_data, tmp_path, caplog):
    s = spec(tiny_data, checkpoint_every=2, keep_checkpoints=3)
    ref, run = tmp_path / "ref", tmp_path / "run"
    train(PretrainArgs.from_dict(s), ref)
    assert train(PretrainArgs.from_dict(s | {"stop_after_steps": 6}), run) == {}
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["step-000002", "step-000004", "step-000006"]
    truncate(ckpts / "step-000006/trainer_state.pt")
    truncate(ckpts / "step-000004/model/model.safetensors")
    (ckpts / "step-999999").mkdir()
    (ckpts / "step-999999/trainer_state.pt").write_bytes(b"junk")
    # a user's files in checkpoints/ (named like checkpoints, but not as save_checkpoint names them): never touched
    shutil.copytree(ckpts / "step-000002", ckpts / "step-000002.keep")
    (ckpts / "step-junk").mkdir()
    (ckpts / "NOTES.txt").write_text("lr looked high at step 4")
    mine = {p: snapshot(p) if p.is_dir() else p.read_text() for p in (ckpts / "step-000002.keep", ckpts / "NOTES.txt")}

    mine[ckpts / "step-999999"] = snapshot(ckpts / "step-999999")  # no checksums the run wrote: not the run's
    with caplog.at_level(logging.WARNING, logger="pit.training"):
        train(PretrainArgs.from_dict(s), run)
    warned = caplog.text
    for bad in ("step-000006", "step-000004"):
        assert f"checkpoint {ckpts / bad} is damaged" in warned, warned
    assert f"checkpoint {ckpts / 'step-999999'} cannot be verified" in warned  # passed over, kept (issue 65)
    assert "falling back to step-000002" in warned and "step-junk" not in warned and ".keep" not in warned
    assert losses(run) == losses(ref) and same_weights(run / "final", ref / "final")
    assert sorted(p.name for p in ckpts.iterdir()) == ["NOTES.txt", "step-000002.keep", "step-999999", "step-junk"]
    assert {p: snapshot(p) if p.is_dir() else p.read_text() for p in mine} == mine


def test_checkpoints_that_read_fine_but_hold_other_bytes_are_damaged(tiny_data, tmp_path, caplog):
    """A bit flip in the newest checkpoint's weights, the weights of another step, a tensor removed: each reads
    as a valid safetensors file, so before checksums the run resumed from it silently (another final model, rc 0).
    Each checkpoint's checksums.sha256 tells, and the run falls back to the newest intact one."""
    from safetensors.torch import load_file, save_file

    s = spec(tiny_data, checkpoint_every=1, keep_checkpoints=6)
    ref, run = tmp_path / "ref", tmp_path / "run"
    train(PretrainArgs.from_dict(s), ref)
    assert train(PretrainArgs.from_dict(s | {"stop_after_steps": 6}), run) == {}
    ckpts = run / "checkpoints"
    weights = {k: ckpts / f"step-00000{k}/model/model.safetensors" for k in (3, 4, 5, 6)}
    data = bytearray(weights[6].read_bytes())
    data[-5] ^= 0x01  # one bit of the last tensor's data
    weights[6].write_bytes(bytes(data))
    weights[5].write_bytes(weights[3].read_bytes())  # another step's weights
    tensors = load_file(weights[4])
    save_file(dict(list(tensors.items())[1:]), weights[4])  # one tensor fewer
    tensors = load_file(weights[3])  # a NaN weight, and the checksums that would tell deleted (issue 58)
    name = next(iter(tensors))
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, weights[3])
    (ckpts / "step-000003/checksums.sha256").unlink()
    with caplog.at_level(logging.WARNING, logger="pit.training"):
        train(PretrainArgs.from_dict(s), run)
    for bad in ("step-000006", "step-000005", "step-000004"):
        assert f"checkpoint {ckpts / bad} is damaged" in caplog.text, caplog.text
    # without the checksums nothing proves the run wrote step-000003: passed over, never resumed, not deleted
    assert f"checkpoint {ckpts / 'step-000003'} cannot be verified (no checksums.sha256 that pit wrote" in caplog.text
    assert "falling back to step-000002" in caplog.text
    assert losses(run) == losses(ref) and same_weights(run / "final", ref / "final")


def test_training_data_changed_under_a_stopped_run_is_refused_naming_the_file(tiny_data, tmp_path):
    """Issue 58: token files replaced under a stopped run (same length, other ids) were not noticed: the run resumed
    on two data sets and run.json's train_data_sha256 became the new file's. Its inputs are fixed at its start."""
    data = tmp_path / "data"
    shutil.copytree(Path(tiny_data["bpe2k"]["train"]).parent, data)
    s = spec(tiny_data, train_data=str(data / "train.bin"), checkpoint_every=2)
    run = tmp_path / "run"
    assert train(PretrainArgs.from_dict(s | {"stop_after_steps": 4}), run) == {}
    recorded = json.loads((run / "run.json").read_text())["params"]["train_data_sha256"]
    before = snapshot(run)
    tokens = (data / "train.bin").read_bytes()
    (data / "train.bin").write_bytes(tokens[2:] + tokens[:2])  # same length and sidecar, other ids at each place
    with pytest.raises(PitError, match="was trained on other inputs: train_data") as refused:
        train(PretrainArgs.from_dict(s), run)
    assert str(data / "train.bin") in str(refused.value) and recorded[:12] in str(refused.value)
    assert "--overwrite" in str(refused.value) and snapshot(run) == before  # nothing deleted, run.json as it was


def test_a_finished_run_whose_training_data_changed_is_not_reported_done(tiny_data, tmp_path, capsys):
    """Issue 65, item 8: `pit train` on a finished run whose train.bin was rewritten (same length, other ids) said
    "already finished with these settings": the inputs were compared on a resume, not for a finished run. run.json
    records them (`inputs`); one written before them is compared by its params' train_data_sha256."""
    from pit.commands import main

    data = tmp_path / "data"
    shutil.copytree(Path(tiny_data["bpe2k"]["train"]).parent, data)
    s = spec(tiny_data, train_data=str(data / "train.bin"), max_steps=2, warmup_steps=1, final_loss_window=1)
    run = tmp_path / "run"
    train(PretrainArgs.from_dict(s), run)
    record = json.loads((run / "run.json").read_text())
    recorded = record["inputs"]["train_data"]["sha256"]
    assert recorded == record["params"]["train_data_sha256"]
    assert set(record["inputs"]) == {"train_data", "val_data", "tokenizer"}
    tokens = (data / "train.bin").read_bytes()
    (data / "train.bin").write_bytes(tokens[2:] + tokens[:2])  # same length and sidecar, other ids at each place
    before = snapshot(run)
    capsys.readouterr()
    assert main(["train", "--spec", json.dumps(s), "--out", str(run)]) == 2
    [err] = capsys.readouterr().err.strip().splitlines()
    assert err.startswith(f"pit train: error: {str(run)!r} holds this run finished (fingerprint ")
    assert snapshot(run) == before
    assert f"was trained on other inputs: train_data {str(data / 'train.bin')!r} (sha256 {recorded[:12]} " in err
    assert "pass --overwrite to train it again on these inputs" in err
    del record["inputs"]  # a run.json written before `inputs`
    (run / "run.json").write_text(json.dumps(record))
    with pytest.raises(PitError, match="holds this run finished .* was trained on other inputs: train_data"):
        train(PretrainArgs.from_dict(s), run)
    (data / "train.bin").write_bytes(tokens)  # the data it was trained on: done, as before
    assert train(PretrainArgs.from_dict(s), run).message.startswith(f"{run}: already finished with these settings")


def test_an_unfinished_run_with_other_settings_needs_overwrite(tiny_data, tmp_path, caplog):
    """Issue 58: `pit train` onto an unfinished run's folder with other settings deleted its checkpoints and replaced
    its metrics.jsonl with only a warning; like a finished one, it now needs --overwrite, which starts it over."""
    s, run = spec(tiny_data, checkpoint_every=2), tmp_path / "run"
    assert train(PretrainArgs.from_dict(s | {"stop_after_steps": 4}), run) == {}
    before = snapshot(run)
    other = PretrainArgs.from_dict(s | {"lr": 2e-3})
    with pytest.raises(PitError, match="holds an unfinished run that cannot be continued: its checkpoint step-000004 "
                       "belongs to a run with other settings"):  # fmt: skip
        train(other, run)
    assert snapshot(run) == before
    with caplog.at_level(logging.WARNING, logger="pit.training"):
        assert train(other, run, overwrite=True)["final_train_loss"] > 0
    assert "starting the run over (--overwrite)" in caplog.text and len(losses(run)) == 8


# --- one training, one MLflow run --------------------------------------------------------------------------------


def test_killed_before_the_first_checkpoint_continues_the_same_mlflow_run(tiny_data, tmp_path, store):
    s = spec(tiny_data, checkpoint_every=4, mlflow=store)
    run = tmp_path / "run"
    assert train(PretrainArgs.from_dict(s | {"stop_after_steps": 2}), run) == {}
    assert not (run / "checkpoints").exists()
    record = json.loads((run / "run.json").read_text())
    [first] = mlflow_runs(s["mlflow"])
    assert first.info.run_id == record["mlflow_run_id"] and first.info.status == "RUNNING"

    train(PretrainArgs.from_dict(s), run)
    assert [(r.info.run_id, r.info.status) for r in mlflow_runs(s["mlflow"])] == [(first.info.run_id, "FINISHED")]
    [only] = mlflow_runs(s["mlflow"])
    assert only.data.params["train.max_steps"] == "8" and only.data.metrics["val_loss"] > 0
    assert record["fingerprint"] == PretrainArgs.from_dict(s).fingerprint()  # run.json names the run's settings


def snakemake_reruns(run: Path, outputs: list[str]) -> None:
    """What Snakemake does to an incomplete job's outputs before it runs the job again."""
    for name in outputs:
        p = run / name
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def test_killed_after_mlflow_finished_before_snakemake_recorded_the_job(tiny_data, tmp_path, store):
    s = spec(tiny_data, checkpoint_every=2, mlflow=store)
    run, first = tmp_path / "run", tmp_path / "first"
    # SIGKILL inside the run's last act: MLflow says FINISHED, summary.json and final/ are written, the
    # trainer checkpoints are not removed yet
    argv = ["-m", "pit", "train", "--spec", json.dumps(s), "--out", str(run)]
    killed = killed_at("shutil.rmtree", str(run / "checkpoints/step-000006"), argv)  # the newest goes first
    assert killed.returncode == -9 and (run / "checkpoints").is_dir(), killed.stderr[-2000:]
    [finished] = mlflow_runs(s["mlflow"])
    assert finished.info.status == "FINISHED"
    shutil.copytree(run / "final", first)

    before = snapshot(run)
    again = train(PretrainArgs.from_dict(s), run)  # the job run again with its outputs in place: done, nothing new
    assert snapshot(run) == before and again == json.loads((run / "summary.json").read_text())
    assert [r.info.run_id for r in mlflow_runs(s["mlflow"])] == [finished.info.run_id]

    snakemake_reruns(run, ["summary.json", "final"])  # the job run again as Snakemake runs it: same MLflow run
    train(PretrainArgs.from_dict(s), run)
    [only] = mlflow_runs(s["mlflow"])
    assert only.info.run_id == finished.info.run_id and only.info.status == "FINISHED"
    assert same_weights(run / "final", first)

    snakemake_reruns(run, ["summary.json", "final"])  # again, now without checkpoints: from step 0, same run
    assert not (run / "checkpoints").exists()
    train(PretrainArgs.from_dict(s), run)
    [only] = mlflow_runs(s["mlflow"])
    assert only.info.run_id == finished.info.run_id and only.info.status == "FINISHED"
    assert same_weights(run / "final", first)


def make_base(tiny_data, folder: Path) -> Path:
    from transformers import AutoTokenizer

    from pit.core.interfaces import InterfaceConfig
    from pit.data.reader import TokenFile
    from pit.models import build_model

    vocab = TokenFile(tiny_data["bpe2k"]["val"]).meta["vocab_size"]
    build_model("scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=vocab, seed=0).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_data["bpe2k"]["tokenizer"]).save_pretrained(folder)
    return folder


def lora_spec(base: Path, **kw) -> dict:
    return (
        dict(
            base=str(base),
            task="mbpp",
            limit=16,
            rank=4,
            alpha=8,
            max_steps=4,
            batch_size=2,
            seq_len=64,
            warmup_steps=1,
            checkpoint_every=1,
            keep_checkpoints=2,
            mlflow={"enabled": False},
        )
        | kw
    )


def test_lora_runs_are_one_mlflow_run_and_a_finished_one_is_done(tiny_data, tmp_path, store):
    base = make_base(tiny_data, tmp_path / "base")
    s = lora_spec(base, checkpoint_every=3, mlflow=store)
    run = tmp_path / "run"
    assert train_lora(LoraArgs.from_dict(s | {"stop_after_steps": 2}), run) == {}  # before the first checkpoint
    run_id = json.loads((run / "run.json").read_text())["mlflow_run_id"]
    summary = train_lora(LoraArgs.from_dict(s), run)
    assert [(r.info.run_id, r.info.status) for r in mlflow_runs(s["mlflow"])] == [(run_id, "FINISHED")]

    before = snapshot(run)
    assert train_lora(LoraArgs.from_dict(s), run) == summary and snapshot(run) == before
    proc = pit_cli("lora", "train", "--spec", json.dumps(s | {"rank": 2}), "--out", str(run))
    *notices, error = proc.stderr.splitlines()  # the stand-in notice, then one error line
    assert proc.returncode == 2 and all("STAND-IN" in line for line in notices), proc.stderr[-2000:]
    assert error.startswith("pit lora") and "error:" in error
    assert "holds a finished run with other settings" in error
    assert snapshot(run) == before

    snakemake_reruns(run, ["summary.json", "adapter", "merged"])
    assert train_lora(LoraArgs.from_dict(s), run)["final_train_loss"] == summary["final_train_loss"]
    assert [(r.info.run_id, r.info.status) for r in mlflow_runs(s["mlflow"])] == [(run_id, "FINISHED")]


def test_lora_falls_back_from_a_truncated_checkpoint(tiny_data, tmp_path, caplog):
    base = make_base(tiny_data, tmp_path / "base")
    s = lora_spec(base)
    ref, run = tmp_path / "ref", tmp_path / "run"
    train_lora(LoraArgs.from_dict(s), ref)
    assert train_lora(LoraArgs.from_dict(s | {"stop_after_steps": 3}), run) == {}
    truncate(run / "checkpoints/step-000003/trainable.safetensors")
    with caplog.at_level(logging.WARNING, logger="pit.training"):
        train_lora(LoraArgs.from_dict(s), run)
    assert f"checkpoint {run / 'checkpoints/step-000003'} is damaged (SafetensorError" in caplog.text
    assert "falling back to step-000002" in caplog.text
    assert losses(run) == losses(ref) and same_weights(run / "adapter", ref / "adapter")


# --- tables and token files: one unit, no temporaries left ---------------------------------------------------------


def test_a_killed_table_write_is_detectable_and_the_next_run_cleans_up(tmp_path):
    import pandas as pd

    from pit.reporting.tables import write_table

    def sha256sum_check() -> subprocess.CompletedProcess:
        return subprocess.run(["sha256sum", "-c", "table1.sha256"], cwd=stem.parent, capture_output=True, text=True)

    stem = tmp_path / "tables/table1"
    df = pd.DataFrame({"mode": ["scratch"], "train_loss": [2.5]})
    write_table(df, stem, "table1", "old")
    assert sha256sum_check().returncode == 0, "the set has no manifest a reader can check"
    code = (
        "import pandas as pd, sys\nfrom pit.reporting.tables import write_table\n"
        "write_table(pd.DataFrame({'mode': ['scratch'], 'train_loss': [2.25]}), sys.argv[1], 'table1', 'new')\n"
    )
    killed = killed_at("os.rename", f"{stem}.csv", ["-c", code, str(stem)])  # one file of the set renamed
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert list(stem.parent.glob(".table1.*.tmp")), "the kill left no temporaries: it hit no write"
    assert "new" in stem.with_suffix(".tex").read_text() and "2.5\n" in stem.with_suffix(".csv").read_text()
    assert sha256sum_check().returncode != 0, "a mixed set must read as incomplete"
    from pit.reporting.tables import table_set_complete

    assert not table_set_complete(stem)

    write_table(df.assign(train_loss=[2.25]), stem, "table1", "new")
    assert not list(stem.parent.glob("*.tmp")) and table_set_complete(stem)
    for suffix in (".md", ".tex", ".json", ".html"):  # the CSV is a plain table: the profile is in the .json
        assert "new" in stem.with_suffix(suffix).read_text()
    assert stem.with_suffix(".csv").read_text() == "mode,train_loss\nscratch,2.25\n"
    check = sha256sum_check()
    assert check.returncode == 0 and check.stdout.count(": OK") == 5, check.stdout + check.stderr


def test_a_killed_tokenization_leaves_no_mixed_pair_and_no_temporaries(tiny_data, tmp_path):
    from pit.data.reader import TokenFile
    from pit.data.tokenize import tokenize_split

    tok = tiny_data["bpe2k"]["tokenizer"]
    manifest = Path(tok).parents[1] / "corpus/manifest.json"  # the tiny_data fixture's corpus
    out = tmp_path / "val.bin"
    tokenize_split(manifest, "val", tok, out, token_budget=40_000)
    code = (
        "import sys\nfrom pit.data.tokenize import tokenize_split\n"
        "tokenize_split(sys.argv[1], 'val', sys.argv[2], sys.argv[3])\n"
    )
    # killed as the new tokens are renamed into place, after their pending sidecar: neither sidecar may describe
    # the tokens beside it as complete (a pending one is refused), and the next run may replace the pair
    killed = killed_at("os.rename", str(out), ["-c", code, str(manifest), tok, str(out)])
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert list(tmp_path.glob(".val.bin.*.tmp")), "the kill left no temporaries: it hit no write"
    assert json.loads(out.with_suffix(".json").read_text())["pending"] is True
    with pytest.raises(PitError, match="expected it and its sidecar"):  # an incomplete pair: refused, never mixed
        TokenFile(out)

    meta = tokenize_split(manifest, "val", tok, out)
    assert not list(tmp_path.glob("*.tmp"))
    assert len(TokenFile(out)) == meta["tokens"] > 40_000

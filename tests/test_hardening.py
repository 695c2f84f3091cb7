"""Commands that never delete or overwrite what they did not make (issue 29, part 2), and the command sweep's
remaining tracebacks (part 4): a path below a regular file, a folder where a file goes (or the reverse), an export
onto a folder with files."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pit.commands import main
from pit.errors import PitError
from pit.io import atomic_path, write_json


def test_a_path_below_a_regular_file_is_one_error_and_writes_nothing(tmp_path):
    (tmp_path / "afile").write_text("keep")
    with pytest.raises(PitError, match="afile' is a file, not a folder"), atomic_path(tmp_path / "afile" / "x.json"):
        pass
    assert (tmp_path / "afile").read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_file_never_replaces_a_folder_nor_a_folder_a_file(tmp_path):
    results = tmp_path / "run"
    (results / "final").mkdir(parents=True)
    (results / "summary.json").write_text("{}")
    with pytest.raises(PitError, match="is a folder; this writes a file there: nothing was replaced"):
        write_json(results, {"delta_ti": 0.0})  # e.g. `pit diagnose ... --out run` instead of run/diagnostics.json
    assert sorted(p.name for p in results.iterdir()) == ["final", "summary.json"]
    with (
        pytest.raises(PitError, match="is a file; this writes a folder there"),
        atomic_path(results / "summary.json") as t,
    ):
        t.mkdir()
    assert (results / "summary.json").read_text() == "{}"
    assert not list(tmp_path.rglob("*.tmp"))  # no temporaries left behind


def test_export_refuses_a_folder_with_files_without_force(tmp_path, capsys):
    dst = tmp_path / "results"
    dst.mkdir()
    (dst / "summary.json").write_text("{}")
    rc = main(["export", str(tmp_path / "missing"), str(dst)])
    err = capsys.readouterr().err
    assert rc == 2 and "exists and is not empty; pass --force" in err and (dst / "summary.json").is_file()


def test_a_damaged_summary_stops_a_rerun_and_deletes_nothing(tmp_path):
    """A finished run whose summary.json was truncated: a rerun with other settings (no --overwrite) used to count
    it as unfinished and delete final/, metrics.jsonl and summary.json at start."""
    from pit.training.run_folder import claim

    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "summary.json").write_text('{"val_loss": 3.1, "ste')
    before = sorted(p.name for p in run.iterdir())
    outputs = ("final", "metrics.jsonl", "summary.json")
    with pytest.raises(PitError, match="summary.json' is not a readable JSON object"), claim(run, "x", outputs):
        pass
    assert sorted(p.name for p in run.iterdir()) == before and (run / "final").is_dir()
    with claim(run, "other", outputs, ("final",), overwrite=True) as where:
        assert where.path == run / ".next"  # with --overwrite the new run is staged; the old files stay until then
    assert (run / "final").is_dir() and (run / "metrics.jsonl").is_file()


def test_a_download_onto_a_folder_writes_nothing_beside_it(tmp_path, capsys):
    import json

    from helpers import STDLIB_CORPUS

    (tmp_path / "corpus").mkdir()
    rc = main(["data", "download", "--spec", json.dumps({**STDLIB_CORPUS, "max_documents": 2}), "--out",
               str(tmp_path / "corpus")])  # fmt: skip
    assert rc == 2 and "is a folder; expected the manifest file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"] and not any((tmp_path / "corpus").iterdir())


def test_validation_data_of_another_tokenizer_of_the_same_size_is_refused(tiny_data, tmp_path, capsys):
    """pit diagnose, pit side-effects and LoRA's side effects compare the token file's tokenizer hash with the
    checkpoint's tokenizer.json, as training compares it with the tokenizer folder (the size alone matched)."""
    import json
    import shutil

    from transformers import AutoTokenizer

    from pit.core.interfaces import InterfaceConfig
    from pit.data.reader import TokenFile
    from pit.models import build_model
    from pit.models.checkpoint import save_pretrained_atomic

    val = TokenFile(tiny_data["bpe2k"]["val"])
    model = build_model("scratch-tiny", InterfaceConfig(kind="tt"), vocab_size=val.meta["vocab_size"], seed=0)
    ckpt = tmp_path / "ckpt"
    save_pretrained_atomic(model, ckpt, AutoTokenizer.from_pretrained(tiny_data["bpe2k"]["tokenizer"]))
    other = tmp_path / "other.bin"
    shutil.copy(val.path, other)
    other.with_suffix(".json").write_text(json.dumps({**val.meta, "tokenizer_sha256": "f" * 64, "tokenizer": "b2"}))
    assert main(["diagnose", str(ckpt), "--val-data", str(val.path), "--spec", '{"positions": 4, "seq_len": 16}']) == 0
    capsys.readouterr()
    for argv in (
        ["diagnose", str(ckpt), "--val-data", str(other), "--spec", '{"positions": 4, "seq_len": 16}'],
        ["side-effects", str(ckpt), str(ckpt), "--val-data", str(other), "--windows", "1", "--seq-len", "16"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "was made with tokenizer ffffffffffff ('b2')" in err[0], err


def test_a_diverged_run_is_an_error_unless_the_profile_records_divergence(tiny_data, tmp_path, capsys):
    """`lr: 1e300` used to train with most steps skipped and non-finite final weights, exit 0, marked finished."""
    import json

    s = {"mode": "scratch", "model": "scratch-tiny", "train_data": tiny_data["bpe2k"]["train"],
         "val_data": tiny_data["bpe2k"]["val"], "tokenizer": tiny_data["bpe2k"]["tokenizer"], "seq_len": 32,
         "global_batch_tokens": 128, "micro_batch_size": 4, "max_steps": 6, "warmup_steps": 0, "lr": 1e300,
         "min_lr": 0.0, "eval_batches": 1, "mlflow": {"enabled": False}}  # fmt: skip
    rc = main(["train", "--spec", json.dumps(s), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "the run diverged: " in err[-1] and "not marked finished" in err[-1], err
    assert not (tmp_path / "run" / "summary.json").exists() and not (tmp_path / "run" / "final").exists()
    rc = main(["train", "--spec", json.dumps({**s, "allow_divergence": True}), "--out", str(tmp_path / "sweep")])
    summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
    assert rc == 0 and "weight tensors are not finite" in summary["diverged"] and summary["skipped_steps"] >= 1


def test_a_micro_batch_that_cannot_fit_is_refused_before_the_first_step(tiny_data, tmp_path, capsys):
    """`micro_batch_size: 1000000` used to be killed by the OOM killer; a fitting one still trains."""
    import json

    from pit.models import build_model
    from pit.training.runtime import activation_bytes

    config = build_model("scratch-tiny", vocab_size=512).config
    assert activation_bytes(config, 8, 32) == config.num_hidden_layers * 17 * 8 * 32 * config.hidden_size * 4
    s = {"mode": "scratch", "model": "scratch-tiny", "train_data": tiny_data["bpe2k"]["train"],
         "val_data": tiny_data["bpe2k"]["val"], "tokenizer": tiny_data["bpe2k"]["tokenizer"], "seq_len": 32,
         "global_batch_tokens": 32_000_000, "micro_batch_size": 1_000_000, "max_steps": 2, "warmup_steps": 0,
         "mlflow": {"enabled": False}}  # fmt: skip
    rc = main(["train", "--spec", json.dumps(s), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        rc == 2
        and "micro_batch_size 1000000 x seq_len 32 needs at least" in err[-1]
        and "GiB are available" in (err[-1])
    )
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "summary.json").exists()


def test_a_user_file_named_like_a_temporary_is_never_deleted(tmp_path):
    """Issue 58: user files named like our temporaries (`.NAME.old.tmp`, `.NAME.backup.tmp`) were deleted by the next
    write of NAME; only `.NAME.pit-tmp-PID-XXXXXXXX.tmp` of a process that is gone is ours to remove."""
    mine = {".results.json.old.tmp": "keep 1", ".results.json.backup.tmp": "keep 2", ".results.json.1-abc.tmp": "3"}
    for name, text in mine.items():
        (tmp_path / name).write_text(text)
    dead = _dead_pid()
    stale = tmp_path / f".results.json.pit-tmp-{dead}-abcd_123.tmp"
    stale.mkdir()
    write_json(tmp_path / "results.json", {"a": 1})
    assert {name: (tmp_path / name).read_text() for name in mine} == mine
    assert not stale.exists(), "a killed writer's temporary is ours: removed"


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


KILLED_BETWEEN_RENAMES = """
import os, signal, sys
from pit.io import atomic_path
def hook(event, args):  # SIGKILL as the new folder is renamed into place: after the old one was moved aside
    if event == "os.rename" and str(args[1]) == sys.argv[1]:
        os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(hook)
with atomic_path(sys.argv[1]) as tmp:
    tmp.mkdir()
    (tmp / "weights.bin").write_text("new")
"""


def test_a_folder_replacement_killed_between_its_renames_is_put_back(tmp_path):
    """Issue 58: a kill between the two renames of a folder replacement left the destination missing, and the next
    write of it deleted the only copy (the old one, beside it). It is put back first, then replaced as usual."""
    dst = tmp_path / "final"
    dst.mkdir()
    (dst / "weights.bin").write_text("old")
    killed = subprocess.run([sys.executable, "-c", KILLED_BETWEEN_RENAMES, str(dst)], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not dst.exists() and len(list(tmp_path.glob(".final.*.tmp"))) == 2  # the old copy and the new temporary
    with pytest.raises(RuntimeError, match="a failed write"), atomic_path(dst):
        raise RuntimeError("a failed write")  # the next write of the path fails: the old copy must survive it
    assert (dst / "weights.bin").read_text() == "old" and not list(tmp_path.glob(".final.*"))

"""A run folder's `pit train` / `pit lora train` remove only what the run can prove it made (issue 65, item 4):
its lock (LOCK_MARKER inside), its staging folder (STAGED in it), checkpoints whose checksums.sha256 it wrote, and
of those only the files the list records. A user's `.lock`, `.next/`, another tool's `checkpoints/step-100000/`
and a file added to one of the run's checkpoints stay as they are.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from pit.errors import PitError
from pit.training.pretrain import REQUIRED_OUTPUTS, STALE_OUTPUTS
from pit.training.run_folder import LOCK_MARKER, RunFolder, claim


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_lock_file_the_run_did_not_write_is_refused_and_kept(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").write_text("my lock: do not touch\n")
    with pytest.raises(PitError, match=r"holds \.lock, which pit did not write"), claim(run, "f", STALE_OUTPUTS):
        pass
    assert (run / ".lock").read_text() == "my lock: do not touch\n"
    # A run's lock left by a killed process (the marker inside; the kernel dropped its flock) is taken and removed.
    (run / ".lock").write_text(f"{LOCK_MARKER}999999\n")
    with claim(run, "f", STALE_OUTPUTS):
        assert (run / ".lock").read_text().startswith(LOCK_MARKER)
    assert not (run / ".lock").exists()


def test_a_staging_folder_the_run_did_not_make_is_kept(tmp_path):
    run = tmp_path / "run"
    (run / ".next").mkdir(parents=True)
    (run / ".next" / "draft.txt").write_text("mine")
    with claim(run, "f", STALE_OUTPUTS, REQUIRED_OUTPUTS) as where:  # no finished run: .next used to be dropped
        assert where.path == run
    assert files(run / ".next") == {"draft.txt": b"mine"}
    (run / "final").mkdir()  # a finished run of other settings: --overwrite stages the new run in .next
    (run / "summary.json").write_text('{"val_loss": 3.0}')
    (run / "run.json").write_text(json.dumps({"fingerprint": "other"}))
    refused = pytest.raises(PitError, match=r"holds \.next, which pit did not write")
    with refused, claim(run, "f", STALE_OUTPUTS, REQUIRED_OUTPUTS, overwrite=True):
        pass
    assert files(run / ".next") == {"draft.txt": b"mine"}


def save(folder: RunFolder, step: int, keep: int = 2) -> None:
    """A real trainer checkpoint of a one-layer model (`RunFolder.save_checkpoint`, as a run writes it)."""
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    write = lambda d: save_file(model.state_dict(), d / "model.safetensors")  # noqa: E731
    folder.save_checkpoint(step, write, optimizer, scheduler, {"inputs": {}, "fingerprint": "f"}, keep)


def test_checkpoints_the_run_did_not_write_and_files_added_to_its_own_are_kept(tmp_path, caplog):
    """Another tool's `checkpoints/step-100000/` was read as a damaged checkpoint and removed; so was an intact
    checkpoint of the run a user added NOTES.md to ("files differ from checksums.sha256: ... added")."""
    folder = RunFolder(tmp_path / "run", "f")
    ckpts = folder.path / "checkpoints"
    save(folder, 1)
    save(folder, 2)
    (ckpts / "step-000002" / "NOTES.md").write_text("looked fine at step 2")
    (ckpts / "step-000001" / "NOTES.md").write_text("and at step 1")
    (ckpts / "step-100000").mkdir()
    (ckpts / "step-100000" / "weights.bin").write_bytes(b"another tool's")
    (ckpts / "step-100000" / "checksums.sha256").write_text(f"{'0' * 64}  weights.bin\n")
    theirs = files(ckpts / "step-100000")
    with caplog.at_level(logging.INFO, logger="pit.training"):
        ckpt, state = folder.newest_intact()
    assert ckpt == ckpts / "step-000002" and state["step"] == 2 and "damaged" not in caplog.text, caplog.text
    assert f"checkpoint {ckpts / 'step-100000'} cannot be verified" in caplog.text
    save(folder, 3)  # keeps 2: step-000001 goes, but not its NOTES.md; another tool's folder is not counted
    assert files(ckpts / "step-000001") == {"NOTES.md": b"and at step 1"}
    assert (ckpts / "step-000002" / "model.safetensors").is_file()
    folder.remove_checkpoints()  # the run finished: its files go, the others' stay
    assert files(ckpts / "step-000002") == {"NOTES.md": b"looked fine at step 2"}
    assert files(ckpts / "step-100000") == theirs
    assert sorted(p.name for p in ckpts.iterdir()) == ["step-000001", "step-000002", "step-100000"]

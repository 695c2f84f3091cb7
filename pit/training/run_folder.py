"""The run folder that `pit train` and `pit lora train` share: start or resume, trainer checkpoints,
metrics.jsonl, run.json and the artifacts that end a run.

    run.json                 resolved settings, hashes, MLflow identity (written at start)
    metrics.jsonl            one JSON row per optimizer step (the source of truth)
    checkpoints/step-NNNNNN/ the model (or the trainable part) + trainer_state.pt (every `checkpoint_every`)
    summary.json             written last: the run is complete when it exists

A run resumes from its newest checkpoint when that checkpoint's fingerprint (the hash of the settings that
define the trajectory, `RunArgs.fingerprint`) matches; metrics.jsonl is cut back to the rows that
checkpoint has seen, so a resumed run appends exactly the rows an uninterrupted run would have written.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from pit.io import atomic_path, read_jsonl, write_json, write_text

log = logging.getLogger("pit.training")
TRAINER_STATE = "trainer_state.pt"
FINAL_ARTIFACTS = ("summary.json", "run.json", "metrics.jsonl")


class RunFolder:
    """One run's folder. `main` is False on the other ranks of a DDP job, which never write."""

    def __init__(self, path: str | Path, fingerprint: str, main: bool = True):
        self.path, self.fingerprint, self.main = Path(path), fingerprint, main

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def latest_checkpoint(self) -> Path | None:
        steps = sorted(self.path.glob(f"checkpoints/step-*/{TRAINER_STATE}"))
        return steps[-1].parent if steps else None

    def resume_point(self, stale: Iterable[str]) -> Path | None:
        """The checkpoint to resume from, or None for a fresh start. Checkpoints written with other settings are
        removed (with a warning); a fresh start removes the `stale` outputs of an earlier run in the folder."""
        ckpt = self.latest_checkpoint()
        if (
            ckpt is not None
            and torch.load(ckpt / TRAINER_STATE, weights_only=True).get("fingerprint") != self.fingerprint
        ):
            log.warning("checkpoints in %s belong to a run with other settings; starting afresh", self.path)
            shutil.rmtree(self.path / "checkpoints", ignore_errors=True)
            ckpt = None
        if ckpt is not None:
            log.info("resuming %s from %s", self.path, ckpt.name)
        elif self.main and self.path.exists():
            for name in stale:  # a fresh start owns the folder
                p = self.path / name
                shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        return ckpt

    def save_checkpoint(
        self, step: int, write_model: Callable[[Path], None], optimizer, scheduler, state: dict, keep: int
    ) -> None:
        """checkpoints/step-NNNNNN/ (atomically): what `write_model(folder)` writes, plus the optimizer, the
        schedule, the RNG states and `state`; only the newest `keep` checkpoints stay."""
        with atomic_path(self.path / "checkpoints" / f"step-{step:06d}") as tmp:
            tmp.mkdir()
            write_model(tmp)
            torch.save(
                {
                    "step": step,
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "rng_cpu": torch.get_rng_state(),
                    "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                    **state,
                },
                tmp / TRAINER_STATE,
            )
        for old in sorted((self.path / "checkpoints").glob("step-*"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)

    @staticmethod
    def restore(ckpt: Path, optimizer, scheduler) -> dict:
        """Load the optimizer, the schedule and the RNG states of a checkpoint; return its trainer state."""
        state = torch.load(ckpt / TRAINER_STATE, weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng_cpu"])
        if state["rng_cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng_cuda"])
        return state

    def write_run_json(self, record: dict) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_json(self.path / "run.json", record)

    def keep_metrics_until(self, step: int) -> None:
        """Cut metrics.jsonl back to the rows of steps <= `step` (the resume point)."""
        rows = read_jsonl(self.metrics_path) if self.metrics_path.exists() else []
        write_text(self.metrics_path, "".join(json.dumps(r) + "\n" for r in rows if r["step"] <= step))

    def metrics(self) -> list[dict]:
        return read_jsonl(self.metrics_path)

    def finish(self, tracker) -> None:
        """Log the run's record files as MLflow artifacts, end the MLflow run, drop the trainer checkpoints."""
        for name in FINAL_ARTIFACTS:
            tracker.log_artifact(self.path / name)
        tracker.finish()
        shutil.rmtree(self.path / "checkpoints", ignore_errors=True)


@dataclass(kw_only=True)
class RunHandles:
    """What `setup` hands to `fit` and to the end of every run (pretraining and LoRA): the arguments, the folder,
    where it runs, the model, the optimizer and schedule, the MLflow run, the trainer state and the resume step."""

    args: object
    folder: RunFolder
    device: object
    autocast: object
    model: object
    optimizer: object
    scheduler: object
    tracker: object
    state: dict
    start_step: int
    run_name: str


class MetricsLog:
    """Appends one row per step to metrics.jsonl (flushed at once) and uploads rows to MLflow every `every` steps
    (None: only when `upload` is called)."""

    def __init__(self, path: Path, tracker, keys: tuple[str, ...], every: int | None = 1):
        self.file = open(path, "a")  # noqa: SIM115 (closed in close())
        self.tracker, self.keys, self.pending = tracker, keys, []
        self.every = max(every, 1) if every is not None else None

    def write(self, row: dict) -> None:
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        self.pending.append(row)
        if self.every is not None and row["step"] % self.every == 0:
            self.upload()

    def upload(self, extra: list[dict] = ()) -> None:
        rows, self.pending = self.pending + list(extra), []
        self.tracker.log_metrics(rows, self.keys)

    def close(self) -> None:
        self.file.close()

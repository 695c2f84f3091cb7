"""The run folder that `pit train` and `pit lora train` share: claim, start or resume, trainer checkpoints,
metrics.jsonl, run.json and the artifacts that end a run.

    .lock                    flock'ed by the process that runs in the folder (LOCK_MARKER and its pid inside);
                             gone when it ends
    run.json                 resolved settings, hashes, fingerprint, MLflow run id (written as soon as the
                             MLflow run exists, before any step)
    metrics.jsonl            one JSON row per optimizer step (the source of truth)
    checkpoints/step-NNNNNN/ the model (or the trainable part) + trainer_state.pt (every `checkpoint_every`: with
                             the sha256 of every input the run reads, fixed at its start) and checksums.sha256
                             (CHECKSUMS_MARKER, then the sha256 of each file, verified before a resume); other
                             names in checkpoints/ are never touched
    summary.json             written last: the run is complete when it exists (with its outputs)
    .next/                   a run that replaces a finished one (`overwrite`), trained here and moved up when
                             complete: the old result stays in place until then (STAGED marks it as the run's)

What the run removes it can prove it made: its lock (LOCK_MARKER inside, or empty), its staging folder (STAGED in
it), a checkpoint whose checksums.sha256 it wrote (CHECKSUMS_MARKER first), and of that checkpoint only the files
the list records (a file a user added stays, with its folder). A `.lock`, `.next/` or `step-NNNNNN/` of anyone
else is left as it is: a lock or staging folder not the run's is refused with one line, a checkpoint folder
without the run's list is passed over with a warning.

`claim` holds the folder for one process and decides what a run does there: a complete run with the same
fingerprint (the hash of the settings that define the trajectory, `RunArgs.fingerprint`, kept in run.json) is
done (`FinishedRun`, nothing is touched); a complete run with another fingerprint is refused unless `overwrite`;
anything else resumes from the newest intact checkpoint of the same fingerprint (a damaged one, or one without its
inputs' hashes, is dropped with a warning naming it; one without the run's checksums is passed over and kept) or
starts afresh. An unfinished run with other settings (its checkpoints' or run.json's fingerprint), or whose inputs
changed since it started (a file's sha256 differs from the one its checkpoint recorded), is refused like a finished
one unless `overwrite`, which starts it afresh. metrics.jsonl is cut back to the rows that checkpoint has seen, so a
resumed run appends exactly the rows an uninterrupted run would have written, and an earlier attempt's MLflow run
(its id in run.json) is continued: one training is one MLflow run across kills and reruns.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from pit.errors import PitError
from pit.io import (
    atomic_path,
    destination,
    json_text,
    read_jsonl,
    remove_stale_temporaries,
    sha256_file,
    sha256_path,
    write_json,
    write_text,
)
from pit.tracking.provenance import with_source_tags
from pit.tracking.tracker import Tracker
from pit.training.args import MLFLOW_DEFAULTS

log = logging.getLogger("pit.training")
TRAINER_STATE = "trainer_state.pt"
CHECKSUMS = "checksums.sha256"  # in every trainer checkpoint: the sha256 of each of its files, written last
FINAL_ARTIFACTS = ("summary.json", "run.json", "metrics.jsonl")
LOCK_FILE = ".lock"
LOCK_MARKER = "pit run folder lock, pid "  # the lock file's content: a `.lock` without it is not the run's
STAGING = ".next"
STAGED = ".pit-staged"  # in STAGING from its creation: the staging folder is the run's
CHECKSUMS_MARKER = "# pit trainer checkpoint (sha256sum -c skips this line)"  # CHECKSUMS' first line
PROMOTING = ".promoting"  # in STAGING: the names it held when its move up began
STEP_DIR = re.compile(r"step-(\d{6,})")  # what save_checkpoint names a checkpoint; nothing else there is ours


def short(fingerprint) -> str:
    """A fingerprint as messages show it; 'unknown' for none, or for a run.json value that is not one (edited)."""
    return fingerprint[:12] if isinstance(fingerprint, str) and fingerprint else "unknown"


class FinishedRun(dict):
    """The summary.json of a run folder that already holds this run, complete: returned instead of running it."""

    def __init__(self, summary: dict, path: Path, fingerprint: str):
        super().__init__(summary)
        self.path, self.fingerprint = path, fingerprint

    @property
    def message(self) -> str:
        """The one line `pit train` / `pit lora train` print for it."""
        return (
            f"{self.path}: already finished with these settings (fingerprint {short(self.fingerprint)}); "
            "left untouched (--overwrite trains it again)"
        )


class RunFolder:
    """One run's folder. `main` is False on the other ranks of a DDP job, which never write. `home` is the folder
    the run's results end up in: `path` itself, or its parent when `path` is the staging folder `.next`."""

    def __init__(
        self, path: str | Path, fingerprint: str, main: bool = True, home: str | Path | None = None, overwrite=False
    ):
        self.path, self.fingerprint, self.main = Path(path), fingerprint, main
        self.home = Path(home) if home is not None else self.path
        self.overwrite = overwrite  # an unfinished run with other settings or other inputs may be started over

    @property
    def name(self) -> str:
        """The run's default name: its folder's (never `.next`)."""
        return self.home.name

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def candidates(self) -> list[Path]:
        """The entries `checkpoints/step-NNNNNN` (the names `save_checkpoint` gives), newest first; any other name
        there (a user's copy `step-000004.keep`, notes) is not a checkpoint and is never touched."""
        entries = [p for p in (self.path / "checkpoints").glob("step-*") if STEP_DIR.fullmatch(p.name)]
        return sorted(entries, key=lambda p: int(p.name[5:]), reverse=True)

    def own_checkpoints(self) -> list[Path]:
        """The `candidates` whose CHECKSUMS the run wrote (`recorded_files`), newest first: the only ones it removes."""
        return [ckpt for ckpt in self.candidates() if recorded_files(ckpt) is not None]

    def remove_checkpoints(self) -> None:
        """Remove the run's trainer checkpoints (`own_checkpoints`, `remove_checkpoint`), and checkpoints/ when
        nothing else is left in it."""
        for ckpt in self.own_checkpoints():
            remove_checkpoint(ckpt)
        with contextlib.suppress(OSError):
            (self.path / "checkpoints").rmdir()

    @staticmethod
    def read_checkpoint(ckpt: Path) -> dict:
        """The trainer state of `ckpt`, checked readable: a step-NNNNNN folder whose trainer_state.pt loads and
        names that step, with safetensors files that are all complete. Raises on a damaged checkpoint."""
        from safetensors import safe_open

        m = STEP_DIR.fullmatch(ckpt.name)
        if m is None or not ckpt.is_dir():
            raise ValueError("not a step-NNNNNN checkpoint folder")
        state = torch.load(ckpt / TRAINER_STATE, weights_only=True)
        if not isinstance(state, dict) or state.get("step") != int(m[1]):
            raise ValueError(f"{TRAINER_STATE} holds no trainer state of step {int(m[1])}")
        if not isinstance(state.get("inputs"), dict):
            raise ValueError("it records no hashes of the run's inputs (an older pit wrote it): nothing proves what "
                             "it was trained on")  # fmt: skip
        weights = sorted(name for name in recorded_files(ckpt) or {} if name.endswith(".safetensors"))
        if not weights:
            raise ValueError("no weights (*.safetensors)")
        for name in weights:
            with safe_open(ckpt / name, "pt"):  # checks the header against the file's size: a truncated file fails
                pass
        RunFolder.verify_checksums(ckpt)
        return state

    @staticmethod
    def write_checksums(ckpt: Path) -> None:
        """CHECKSUMS in `ckpt`: CHECKSUMS_MARKER (what proves the run wrote it), then the sha256 of every file in it,
        as `sha256sum` writes them (`sha256sum -c` checks them and skips the marker, a comment)."""
        files = sorted(p for p in ckpt.rglob("*") if p.is_file() and p.name != CHECKSUMS)
        lines = "".join(f"{sha256_file(f)}  {f.relative_to(ckpt).as_posix()}\n" for f in files)
        (ckpt / CHECKSUMS).write_text(f"{CHECKSUMS_MARKER}\n{lines}")

    @staticmethod
    def verify_checksums(ckpt: Path) -> None:
        """Raise ValueError when a file of `ckpt` differs from the hash its CHECKSUMS recorded as it was written, or
        is missing, or when CHECKSUMS itself is missing or not the run's (nothing then proves the files are the ones
        written). A file the list does not record (a user's notes) is not the checkpoint's: it is ignored."""
        recorded = recorded_files(ckpt)
        if recorded is None:
            raise ValueError(f"no {CHECKSUMS} that pit wrote: its files cannot be verified")
        missing = sorted(name for name in recorded if not (ckpt / name).is_file())
        if missing:
            raise ValueError(f"files {CHECKSUMS} records are missing: {missing}")
        for name, digest in recorded.items():
            if sha256_file(ckpt / name) != digest:
                raise ValueError(f"{name} differs from the sha256 recorded when it was written (bit rot, or a file "
                                 "of another checkpoint)")  # fmt: skip

    def newest_intact(self) -> tuple[Path | None, dict | None]:
        """(checkpoint, its trainer state) of the newest intact checkpoint, or (None, None). A damaged one is
        reported (a warning naming it) and removed (`remove_checkpoint`), so that it neither blocks a resume nor
        counts as kept; one without the run's CHECKSUMS (another tool's `step-NNNNNN/`) is passed over and kept."""
        damaged = False
        for ckpt in self.candidates():
            if recorded_files(ckpt) is None:
                log.warning("checkpoint %s cannot be verified (no %s that pit wrote: its files cannot be verified); "
                            "passed over and left in place", ckpt, CHECKSUMS)  # fmt: skip
                damaged = True
                continue
            try:
                state = self.read_checkpoint(ckpt)
            except Exception as err:  # noqa: BLE001 -- whatever the damage, this checkpoint cannot be resumed
                log.warning("checkpoint %s is damaged (%s: %s); removing it", ckpt, type(err).__name__, str(err)[:200])
                if self.main:
                    remove_checkpoint(ckpt)
                damaged = True
                continue
            if damaged:
                log.warning("falling back to %s, the newest intact checkpoint of %s", ckpt.name, self.path)
            return ckpt, state
        if damaged:
            log.warning("no intact checkpoint left in %s; starting afresh", self.path)
        return None, None

    def resume_point(self, stale: Iterable[str], inputs: dict[str, dict]) -> tuple[Path | None, dict | None]:
        """(checkpoint, trainer state) to resume from, or (None, None) for a fresh start. `inputs` ({field: {path,
        sha256}}, `input_record`) are this attempt's inputs: a checkpoint that recorded others, or one written with
        other settings, is a PitError naming the difference unless `overwrite` (then the checkpoints are removed and
        the run starts afresh). A fresh start removes the `stale` outputs of an earlier attempt in the folder (one
        with run.json; stale-named outputs without it are a PitError, never deleted), and those of an earlier attempt
        with other settings only with `overwrite`."""
        ckpt, state = self.newest_intact()
        if ckpt is not None:
            problem = _changed_inputs(state["inputs"], inputs) or self._other_settings(state.get("fingerprint"))
            if problem is None:
                log.info("resuming %s from %s", self.path, ckpt.name)
                return ckpt, state
            self._start_over_or_refuse(f"its checkpoint {ckpt.name} {problem}")
            if self.main:
                self.remove_checkpoints()
        if self.main and self.path.exists():
            found = [name for name in stale if (self.path / name).exists()]
            recorded = read_record(self.path / "run.json").get("fingerprint")
            if found and not isinstance(recorded, str):  # every attempt writes run.json before its outputs
                raise PitError(
                    f"{str(self.path)!r} holds {', '.join(found)} but no run.json of a run (with its fingerprint): not "
                    "a run folder an earlier attempt of a run made, so nothing was deleted (choose another --out, or "
                    "remove them yourself)"
                )
            problem = self._other_settings(recorded)
            if found and problem is not None:
                self._start_over_or_refuse(f"its run.json {problem} (and it holds {', '.join(found)})")
            for name in found:  # a fresh start owns the folder of an earlier attempt
                p = self.path / name
                shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        return None, None

    def _other_settings(self, fingerprint: str | None) -> str | None:
        """Why a record of `fingerprint` is not this run's (None when it is)."""
        if fingerprint == self.fingerprint:
            return None
        theirs, ours = short(fingerprint), short(self.fingerprint)
        return f"belongs to a run with other settings (fingerprint {theirs}; this run's is {ours})"

    def _start_over_or_refuse(self, problem: str) -> None:
        """With `overwrite`, a warning (the unfinished run is started over); else a PitError naming `problem`."""
        if not self.overwrite:
            raise PitError(
                f"{str(self.path)!r} holds an unfinished run that cannot be continued: {problem}. Nothing was "
                "deleted: pass --overwrite to start it over, or choose another --out"
            )
        log.warning("%s: %s; starting the run over (--overwrite)", self.path, problem)

    def save_checkpoint(
        self, step: int, write_model: Callable[[Path], None], optimizer, scheduler, state: dict, keep: int
    ) -> None:
        """checkpoints/step-NNNNNN/ (atomically): what `write_model(folder)` writes, plus the optimizer, the
        schedule, the RNG states, the CPU thread count (`restore` compares it) and `state`; only the newest `keep`
        checkpoints stay."""
        with atomic_path(self.path / "checkpoints" / f"step-{step:06d}") as tmp:
            tmp.mkdir()
            write_model(tmp)
            with open(tmp / TRAINER_STATE, "wb") as f:  # a file object: a failed write is its OSError (disk full),
                torch.save(  # where torch's own file writer says only "unexpected pos"
                    {
                        "step": step,
                        "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(),
                        "rng_cpu": torch.get_rng_state(),
                        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                        "cpu_threads": torch.get_num_threads(),
                        **state,
                    },
                    f,
                )
            self.write_checksums(tmp)
        for old in self.own_checkpoints()[keep:] if keep > 0 else []:  # newest first
            remove_checkpoint(old)

    @staticmethod
    def restore(state: dict, optimizer, scheduler, device: torch.device) -> dict:
        """Load the optimizer, the schedule and the RNG states of a checkpoint's trainer state; return it. On CPU,
        a warning where the checkpoint was written on another number of threads: torch splits its sums and GEMMs
        over the threads, so the run goes on at round-off from one that kept its count (`threads` is outside the
        fingerprint, so the resume itself is allowed)."""
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng_cpu"])
        if state["rng_cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng_cuda"])
        saved, now = state.get("cpu_threads"), torch.get_num_threads()  # None: a checkpoint from before it was kept
        if device.type == "cpu" and saved is not None and saved != now:
            log.warning(
                "resuming on %(now)d CPU threads from a checkpoint written on %(saved)d: from here the steps differ at "
                "round-off from a run that kept %(saved)d (`threads: %(saved)d` resumes it exactly)",
                {"now": now, "saved": saved},
            )
        return state

    def write_run_json(self, record: dict) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_json(self.path / "run.json", record)

    def earlier_mlflow_run_id(self) -> str | None:
        """The MLflow run id an earlier attempt of this run (same fingerprint) recorded in run.json, if any."""
        record = read_record(self.path / "run.json")
        return record.get("mlflow_run_id") if record.get("fingerprint") == self.fingerprint else None

    def start_tracking(
        self,
        mlflow: dict,
        run_name: str,
        tags: dict,
        params: dict,
        run_id: str | None,
        metric_keys: dict,
        inputs: dict | None = None,
    ) -> Tracker:
        """The run's MLflow run: `run_id` (the checkpoint's), else the one an earlier attempt recorded in run.json,
        else a new one. run.json (settings, fingerprint, tags with the git commit, run id, `metric_keys`: which
        keys of which record file the run logs as metrics, what `pit mlflow sync` replays, and `inputs`: the
        hashes of its inputs, `input_record`, which a finished run is checked against) is written the moment
        the run id is known, so a kill at any later point resumes the same MLflow run; params already logged are
        kept."""
        mlflow = {**MLFLOW_DEFAULTS, **mlflow}
        experiment = mlflow["experiment"]
        tags = with_source_tags(tags)
        record = {
            "run_name": run_name,
            "experiment": experiment,
            "tags": tags,
            "params": params,
            "metric_keys": {name: list(keys) for name, keys in metric_keys.items()},
            "fingerprint": self.fingerprint,
            **({"inputs": inputs} if inputs is not None else {}),
        }
        tracker = Tracker(
            mlflow["tracking_uri"],
            experiment,
            run_name,
            tags,
            enabled=self.main and mlflow["enabled"],
            run_id=run_id or self.earlier_mlflow_run_id(),
            on_start=lambda run_id: self.write_run_json({**record, "mlflow_run_id": run_id}),
        )
        if self.main:
            self.write_run_json({**record, "mlflow_run_id": tracker.run_id})
            tracker.log_params(params)
        return tracker

    def keep_metrics_until(self, step: int) -> None:
        """Cut metrics.jsonl back to the rows of steps <= `step` (the resume point)."""
        rows = read_jsonl(self.metrics_path) if self.metrics_path.exists() else []
        write_text(self.metrics_path, "".join(json.dumps(r) + "\n" for r in rows if r["step"] <= step))

    def metrics(self) -> list[dict]:
        return read_jsonl(self.metrics_path)

    def finish(self, tracker, summary: dict) -> None:
        """End the run: log the record files (run.json, metrics.jsonl, the summary) as MLflow artifacts, end the
        MLflow run, then write summary.json, which makes the run complete (a kill before it: the run continues, in
        the same MLflow run), and drop the trainer checkpoints."""
        with atomic_path(self.path / "summary.json") as tmp:
            tmp.write_text(json_text(summary))
            for path in (tmp, *(self.path / name for name in FINAL_ARTIFACTS if name != "summary.json")):
                tracker.log_artifact(path)
            tracker.log_checkpoint(self.path)
            tracker.finish()
        self.remove_checkpoints()


def input_record(paths: dict[str, str]) -> dict[str, dict]:
    """{field: {"path", "sha256"}} of a run's inputs ({field: path}, RunArgs.input_paths; a folder's hash is
    pit.io.sha256_path's): hashed at every start and resume, never per step; a checkpoint keeps it."""
    return {name: {"path": path, "sha256": sha256_path(path)} for name, path in sorted(paths.items())}


def _changed_inputs(recorded: dict, current: dict) -> str | None:
    """Which input differs between a checkpoint's record and this attempt's (None when none does)."""
    changed = [
        f"{name} {current.get(name, {}).get('path') or was['path']!r} (sha256 {was['sha256'][:12]} when the run "
        f"started, now {(current.get(name) or {}).get('sha256', 'missing')[:12]})"
        for name, was in sorted(recorded.items())
        if (current.get(name) or {}).get("sha256") != was.get("sha256")
    ]
    return f"was trained on other inputs: {'; '.join(changed)}" if changed else None


def check_finished_inputs(done: FinishedRun, paths: dict[str, str]) -> None:
    """A PitError naming the input when the finished run `done` was trained on other inputs than those at `paths`
    ({field: path}, RunArgs.input_paths) hold now: the hashes its run.json records (`inputs`; a run.json written
    before them: its params' `train_data_sha256`), compared as a resume compares a checkpoint's. An input whose
    path is gone is not compared (nothing there to train on)."""
    record = read_record(done.path / "run.json")
    recorded = record.get("inputs")
    if not isinstance(recorded, dict):
        params = record.get("params") if isinstance(record.get("params"), dict) else {}
        sha = params.get("train_data_sha256")
        recorded = {"train_data": {"path": paths.get("train_data"), "sha256": sha}} if isinstance(sha, str) else {}
    recorded = {name: was for name, was in recorded.items() if name in paths and isinstance(was, dict) and
                isinstance(was.get("sha256"), str)}  # fmt: skip
    problem = _changed_inputs(recorded, input_record({name: paths[name] for name in recorded}))
    if problem:
        raise PitError(
            f"{str(done.path)!r} holds this run finished (fingerprint {short(done.fingerprint)}), but it {problem}: "
            "nothing was touched; pass --overwrite to train it again on these inputs (the old result stays until the "
            "new one is complete), or choose another --out"
        )


def read_record(path: Path) -> dict:
    """A JSON object file, or {} when it is missing or unreadable."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def complete_fingerprint(path: Path, required: Iterable[str]) -> str | None:
    """The fingerprint of the complete run in `path` (summary.json and the `required` outputs present): '' when
    run.json does not record it; None when `path` holds no complete run."""
    if not read_record(path / "summary.json") or not all((path / name).exists() for name in required):
        return None
    return read_record(path / "run.json").get("fingerprint") or ""


_LISTED = re.compile(r"([0-9a-f]{64})  (.+)")  # a `sha256sum` line


def recorded_files(ckpt: Path) -> dict[str, str] | None:
    """{relative path: sha256} that `ckpt`'s CHECKSUMS records, when the run wrote it: CHECKSUMS_MARKER first (or,
    written by a pit before the marker, a plain `sha256sum` list naming TRAINER_STATE), every name a path inside
    `ckpt`. None for anything else (no list, another tool's): nothing proves the run wrote that folder."""
    try:
        lines = (ckpt / CHECKSUMS).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    marked = bool(lines) and lines[0] == CHECKSUMS_MARKER
    matches = [_LISTED.fullmatch(line) for line in lines[marked:] if line.strip()]
    if not all(matches):
        return None
    recorded = {m[2]: m[1] for m in matches}
    inside = all(not Path(n).is_absolute() and ".." not in Path(n).parts and n != CHECKSUMS for n in recorded)
    return recorded if inside and (marked or TRAINER_STATE in recorded) else None


def remove_checkpoint(ckpt: Path) -> None:
    """Remove what the run wrote in the checkpoint `ckpt`: the files its CHECKSUMS records, CHECKSUMS, then the
    folders left empty. A file it does not record (a user's notes) stays, with the folders holding it (a warning
    names it); a folder without the run's CHECKSUMS is not touched."""
    recorded = recorded_files(ckpt)
    if recorded is None:
        return
    present = (p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if not p.is_dir())
    extra = sorted(name for name in present if name not in recorded and name != CHECKSUMS)
    if not extra:
        shutil.rmtree(ckpt)
        return
    for name in recorded:
        (ckpt / name).unlink(missing_ok=True)
    (ckpt / CHECKSUMS).unlink()
    for folder in sorted((p for p in ckpt.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty
    log.warning("removed checkpoint %s but kept %s: files the run did not write", ckpt, ", ".join(extra[:4]))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def promote(staging: Path, home: Path, outputs: Iterable[str]) -> None:
    """Move the complete run in `staging` up into `home`, replacing the run there: `home/summary.json` goes first
    (from then on the folder reads as unfinished), then each output (`outputs`, run.json) is replaced by the staged
    one or removed when the staged run has none (so are the old run's checkpoints), summary.json comes last.
    Interrupted, it completes when run again (`claim` does): PROMOTING records what the staged run held when the
    move began."""
    marker = staging / PROMOTING
    if not marker.is_file():
        write_json(marker, sorted(p.name for p in staging.iterdir()))
    staged = set(json.loads(marker.read_text()))
    (home / "summary.json").unlink(missing_ok=True)
    old_run = RunFolder(home, "")
    for name in sorted({*outputs, "run.json", "checkpoints"} - {"summary.json"}):
        if name == "checkpoints" and name not in staged:
            old_run.remove_checkpoints()  # the trainer checkpoints only: other files there are not ours
        elif name not in staged:
            _remove(home / name)
        elif (staging / name).exists():  # else: moved up before an interruption
            if name == "checkpoints":
                old_run.remove_checkpoints()
            else:
                _remove(home / name)
            os.replace(staging / name, home / name)
    os.replace(staging / "summary.json", home / "summary.json")
    shutil.rmtree(staging)
    log.info("%s now holds the run trained in %s", home, staging.name)


def _staging_ours(staging: Path) -> bool:
    """Whether `staging` is the run's staging folder: a folder (not a link) holding STAGED (or, staged by a pit
    before the marker, the PROMOTING record of an interrupted move up)."""
    return staging.is_dir() and not staging.is_symlink() and any((staging / n).is_file() for n in (STAGED, PROMOTING))


def _stage(staging: Path) -> None:
    """Make the staging folder with its STAGED marker, or take up the run's own from an earlier attempt; a `.next`
    that is not the run's is a PitError, and stays as it is."""
    if _staging_ours(staging):
        return
    if staging.exists() or staging.is_symlink():
        raise PitError(f"run folder {str(staging.parent)!r} holds {STAGING}, which pit did not write (no {STAGED} "
                       "in it): nothing was touched (move it away yourself, or choose another --out)")  # fmt: skip
    staging.mkdir()
    (staging / STAGED).write_text("a run staged by pit (pit.training.run_folder): moved up once complete\n")


def _tidy(path: Path, outputs: Iterable[str], required: Iterable[str]) -> None:
    """What a killed process left in `path`: temporaries, a staged run's interrupted move up (completed), a staging
    folder with no finished run left to replace (removed). A `.next` that is not the run's (`_staging_ours`) is
    left alone."""
    staging = path / STAGING
    ours = _staging_ours(staging)
    for folder in (path, path / "checkpoints", *((staging, staging / "checkpoints") if ours else ())):
        for tmp in remove_stale_temporaries(folder):
            log.info("removed %s, left by a killed process", tmp)
    if not ours:
        return
    if (staging / "summary.json").is_file():
        log.warning("completing the replacement of %s by the finished run in %s", path, staging)
        promote(staging, path, outputs)
    elif complete_fingerprint(path, required) is None:
        log.warning("%s holds no finished run to replace; dropping the staged run in %s", path, staging)
        shutil.rmtree(staging)


def _open_lock(lock: Path) -> int:
    """A descriptor of the lock file `lock`, created if missing; never through a symbolic link (a PitError, as a
    folder there is)."""
    while True:
        with contextlib.suppress(FileExistsError):
            return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            return os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue  # its holder removed it between the two opens: create it
        except OSError:
            raise PitError(_foreign_lock(lock)) from None


def _foreign_lock(lock: Path) -> str:
    return (f"run folder {str(lock.parent)!r} holds {LOCK_FILE}, which pit did not write (a run's lock holds "
            f"{LOCK_MARKER!r}): nothing was touched (remove it, or choose another --out)")  # fmt: skip


@contextlib.contextmanager
def folder_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path/.lock` (LOCK_MARKER and the pid inside) for the block; a PitError at once
    when another process holds it. A `.lock` that is not a run's (neither LOCK_MARKER nor empty: a user's file, a
    lock of a pit before the marker) is a PitError too, and stays as it was; a run's is removed at the end. A
    folder this call created is removed if left empty."""
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    lock = path / LOCK_FILE
    while True:
        fd = _open_lock(lock)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (a flock changes nothing in the file)
        except BlockingIOError:
            text = os.read(fd, 64).decode(errors="replace")
            holder = text.removeprefix(LOCK_MARKER).strip() or "unknown"
            os.close(fd)
            raise PitError(
                f"run folder {str(path)!r} is in use by another process (pid {holder}, lock {LOCK_FILE}); "
                "wait for it to end or choose another --out"
            ) from None
        if os.pread(fd, len(LOCK_MARKER), 0) not in (b"", LOCK_MARKER.encode()):
            os.close(fd)
            raise PitError(_foreign_lock(lock))
        with contextlib.suppress(FileNotFoundError):
            if os.stat(lock, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                break  # else the holder removed the file between our open and flock: take the new one
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{LOCK_MARKER}{os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            if os.stat(lock, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                lock.unlink()  # ours: the file this process locked
        os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                path.rmdir()  # only when empty: a run that failed before writing anything leaves no folder


def _decide(path: Path, fingerprint: str, required, overwrite: bool, main: bool) -> RunFolder | FinishedRun:
    summary = path / "summary.json"
    if summary.exists() and not read_record(summary):  # a damaged finished run: a reason to stop, never to delete
        if not overwrite:
            raise PitError(
                f"{str(summary)!r} is not a readable JSON object (damaged?); it marks a finished run, so nothing was "
                "touched: restore or remove it, or pass --overwrite to replace the run (the old files stay until the "
                "new run is complete)"
            )
        return RunFolder(path / STAGING, fingerprint, main, home=path)
    done = complete_fingerprint(path, required)
    if done is None:
        return RunFolder(path, fingerprint, main, overwrite=overwrite)  # (its resume_point decides, with overwrite)
    if done == fingerprint and not overwrite:
        return FinishedRun(read_record(path / "summary.json"), path, fingerprint)
    if not overwrite:
        raise PitError(
            f"{str(path)!r} holds a finished run with other settings (fingerprint {short(done)}; this run's is "
            f"{short(fingerprint)}): pass --overwrite to replace it (the old result stays until the new one is "
            "complete) or choose another --out"
        )
    return RunFolder(path / STAGING, fingerprint, main, home=path)


@contextlib.contextmanager
def claim(
    path: str | Path,
    fingerprint: str,
    outputs: Iterable[str],
    required: Iterable[str] = (),
    overwrite: bool = False,
    main: bool = True,
    barrier: Callable[[], None] = lambda: None,
) -> Iterator[RunFolder | FinishedRun]:
    """Hold run folder `path` for one run with `fingerprint` and yield where it runs:

    - a FinishedRun (its summary) when `path` holds this run complete (summary.json, the `required` outputs, this
      fingerprint in run.json): there is nothing to do, and nothing is touched;
    - a PitError naming both fingerprints when it holds a complete run with another one, unless `overwrite`; with
      `overwrite` the run trains in `path/.next/` and, once complete, replaces the old `outputs` (`promote`);
    - otherwise the folder itself (`RunFolder.resume_point` resumes or starts afresh).

    The main process locks the folder for the whole block (`folder_lock`: a second process fails at once) and
    first clears what a killed one left (`_tidy`). Other DDP ranks (`main` False) take no lock and decide after
    `barrier()`, which rank 0 passes once it has decided."""
    path, required = Path(path), tuple(required)
    if path.name == "..":  # `lnk/..`: the folder the kernel resolves it to (pit.io.destination), not a run named '..'
        path = destination(path)
    if not main:
        barrier()
        yield _decide(path, fingerprint, required, overwrite, main=False)
        return
    with folder_lock(path):
        _tidy(path, outputs, required)
        where = _decide(path, fingerprint, required, overwrite, main=True)
        if isinstance(where, RunFolder) and where.path != path:
            _stage(where.path)
        barrier()
        yield where
        if isinstance(where, RunFolder) and where.path != path and (where.path / "summary.json").is_file():
            promote(where.path, path, outputs)


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
        self.file = open(path, "ab", buffering=0)  # noqa: SIM115 (closed in close())
        self.tracker, self.keys, self.pending = tracker, keys, []
        self.every = max(every, 1) if every is not None else None

    def write(self, row: dict) -> None:
        """Append `row` as one line; a write the file system refuses part-way (disk full) is cut back off before its
        error goes on, so the file never ends in half a row (a resume reads every line)."""
        line, end = (json.dumps(row) + "\n").encode(), self.file.seek(0, os.SEEK_END)
        try:
            done = 0
            while done < len(line):
                done += self.file.write(line[done:])
        except OSError:
            self.file.truncate(end)
            raise
        self.pending.append(row)
        if self.every is not None and row["step"] % self.every == 0:
            self.upload()

    def upload(self, extra: list[dict] = ()) -> None:
        rows, self.pending = self.pending + list(extra), []
        self.tracker.log_metrics(rows, self.keys)

    def close(self) -> None:
        self.file.close()

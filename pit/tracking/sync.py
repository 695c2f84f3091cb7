"""`pit mlflow sync`: put runs into an MLflow store after the fact.

- A finished run folder (run.json, metrics.jsonl, summary.json, side_effects.json) whose store was
  unreachable kept everything it would have logged; this replays it as a new MLflow run with the same
  experiment, name and tags (the git commit included), the same params, and every metric the live run
  logs: run.json's `metric_keys` names, per record file, the keys the live run logs from it (the
  per-step rows of metrics.jsonl at their steps; summary.json and side_effects.json at the last step),
  its data files as dataset inputs and its model folder as the tag `pit.checkpoint`, as the live run does.
- An export of a store's runs (`results/mlflow/runs.jsonl`, pit/tracking/transfer.py) is imported.
"""

from __future__ import annotations

import json
from pathlib import Path

from pit.errors import PitError
from pit.io import read_jsonl
from pit.sidecars import read_object, read_run_record
from pit.tracking.tracker import FINAL_KEYS, METRIC_KEYS, Tracker, run_datasets, tracking_uri

# what a run folder written before run.json recorded `metric_keys` logged (pretraining's keys)
DEFAULT_METRIC_KEYS = {"metrics.jsonl": METRIC_KEYS, "summary.json": FINAL_KEYS}
ARTIFACTS = ("summary.json", "run.json", "metrics.jsonl", "side_effects.json")


def logged_rows(run_dir: Path, meta: dict) -> list[tuple[list[dict], tuple[str, ...]]]:
    """(rows, keys) per record file of the run folder, as the live run logged them: metrics.jsonl's rows at their
    steps, summary.json and side_effects.json as one row at the run's last step (summary.json's `steps`)."""
    summary_file = run_dir / "summary.json"
    summary = read_object(summary_file, "a summary.json", optional={"steps": int}) if summary_file.is_file() else {}
    last_step = summary.get("steps")
    out = []
    for name, keys in (meta.get("metric_keys") or DEFAULT_METRIC_KEYS).items():
        if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys):
            raise PitError(f"{str(run_dir / 'run.json')!r}: metric_keys {name!r} holds {json.dumps(keys)[:60]}; "
                           "expected an array of metric names")  # fmt: skip
        path = run_dir / name
        if not path.is_file():
            continue
        if name.endswith(".jsonl"):
            out.append((read_jsonl(path), tuple(keys)))
        elif last_step is not None:
            out.append(([{**read_object(path, f"a run's {name}"), "step": last_step}], tuple(keys)))
    return out


def sync_run(run_dir: str | Path, uri: str | None = None) -> str:
    """Upload a finished run folder (params, every metric the live run logs, its record files) as a new MLflow
    run; its run id."""
    run_dir = Path(run_dir)
    meta_file = run_dir / "run.json"
    if not meta_file.is_file():
        raise PitError(
            f"{str(run_dir)!r} is not a run folder: no run.json (expected the output of `pit train` or "
            "`pit lora train`, or an MLflow export: results/mlflow)"
        )
    meta = read_run_record(meta_file, required=("experiment", "run_name", "params"))
    logged = logged_rows(run_dir, meta)  # every record file read (and checked) before the store is touched
    tracker = Tracker(uri, meta["experiment"], meta["run_name"], meta.get("tags"))
    if not tracker.active:
        raise PitError(f"cannot reach the MLflow store {tracking_uri(uri)!r}")
    tracker.log_params(meta["params"])
    for rows, keys in logged:
        tracker.log_metrics(rows, keys)
    tracker.log_datasets(run_datasets(meta["params"]))
    tracker.log_checkpoint(run_dir)
    for name in ARTIFACTS:
        if (run_dir / name).is_file():
            tracker.log_artifact(run_dir / name)
    tracker.finish()
    if not tracker.active:
        raise PitError(f"upload to {tracking_uri(uri)!r} failed part-way; nothing in {str(run_dir)!r} was changed")
    return tracker.run_id

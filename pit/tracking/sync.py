"""`pit mlflow sync`: upload a finished run folder to an MLflow store after the fact.

A run whose store was unreachable kept everything in its folder (run.json, metrics.jsonl,
summary.json); this replays it as a new MLflow run with the same experiment, name and tags.
"""

from __future__ import annotations

import json
from pathlib import Path

from pit.errors import PitError
from pit.io import read_jsonl
from pit.tracking.tracker import METRIC_KEYS, Tracker, tracking_uri


def sync_run(run_dir: str | Path, uri: str | None = None) -> str:
    """Upload a finished run folder (params, metrics.jsonl, summary, config) as a new MLflow run; its run id."""
    run_dir = Path(run_dir)
    meta_file = run_dir / "run.json"
    if not meta_file.is_file():
        raise PitError(f"{str(run_dir)!r} is not a run folder: no run.json (expected the output of `pit train`)")
    meta = json.loads(meta_file.read_text())
    tracker = Tracker(uri, meta["experiment"], meta["run_name"], meta.get("tags"))
    if not tracker.active:
        raise PitError(f"cannot reach the MLflow store {tracking_uri(uri)!r}")
    tracker.log_params(meta["params"])
    tracker.log_metrics(read_jsonl(run_dir / "metrics.jsonl"), METRIC_KEYS)
    for name in ("summary.json", "run.json", "metrics.jsonl"):
        if (run_dir / name).is_file():
            tracker.log_artifact(run_dir / name)
    tracker.finish()
    if not tracker.active:
        raise PitError(f"upload to {tracking_uri(uri)!r} failed part-way; nothing in {str(run_dir)!r} was changed")
    return tracker.run_id

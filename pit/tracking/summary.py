"""`pit mlflow summary`: the report stage (tables, figures, REPORT.md) as one MLflow run `summary-<profile>`.

The run carries the tables, figures and report as artifacts, the pipeline config as params (and
`config.json`), and every number of our tables as a metric `<table>/<row key>/<column>`.
"""

from __future__ import annotations

import csv
import json
import math
import re
import tempfile
from pathlib import Path

from pit.errors import PitError
from pit.io import write_json
from pit.tracking.tracker import Tracker, tracking_uri


def _metric_name(*parts: str) -> str:
    return "/".join(re.sub(r"[^\w.\- ]+", "_", p).strip(" ./") or "_" for p in parts)


# text columns that describe a row rather than name it (the claims table's quote, verdict, ...)
DESCRIPTIVE = {"paper", "group", "metric", "direction", "evidence", "verdict", "control", "standin_data"}
MAX_METRIC_NAME = 250  # MLflow's limit


def table_metrics(csv_path: str | Path) -> dict[str, float]:
    """Our numeric cells of a table CSV (`paper_*` columns left out) as metrics named `<table>/<row key>/<column>`,
    the row key being the row's text cells that name it (e.g. teacher-256m-PIT, not the claims table's quote or
    verdict) and its seed. The per-seed tables (`*_seeds.csv`) are artifacts only."""
    csv_path = Path(csv_path)
    if csv_path.stem.endswith("_seeds"):
        return {}
    lines = [line for line in csv_path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    metrics = {}
    for row in csv.DictReader(lines):
        values, key = {}, []
        for col, cell in row.items():
            try:
                values[col] = float(cell)
            except (TypeError, ValueError):
                if col not in DESCRIPTIVE and cell:
                    key.append(cell)
        if "seed" in values:
            key.append(f"seed{values.pop('seed'):g}")
        for col, value in values.items():
            if not col.startswith("paper_") and math.isfinite(value):
                metrics[_metric_name(csv_path.stem, "-".join(key) or "row", col)[-MAX_METRIC_NAME:]] = value
    return metrics


def _log(tracker: Tracker, config: dict, paths: dict[str, Path]) -> None:
    """Params, table metrics and artifacts of the summary run."""
    profile = config.get("profile", "default")
    tracker.log_params({"profile": profile, "config": config})
    metrics = {}
    for table in sorted(paths["tables"].glob("*.csv")):
        metrics.update(table_metrics(table))
    tracker.log_metrics([{"step": 0, **metrics}], tuple(metrics))
    tracker.log_artifacts(paths["tables"], "tables")
    tracker.log_artifacts(paths["figures"], "figures")
    tracker.log_artifact(paths["report"])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        tracker.log_artifact(Path(tmp) / "config.json")


def log_summary(
    config: dict, tables: str | Path, figures: str | Path, report: str | Path, out: str | Path, uri: str | None = None
) -> dict:
    """One MLflow run `summary-<profile>` in the profile's experiment: the tables, figures and report as
    artifacts, the config as params (and `config.json`), the tables' numbers as metrics. Best effort like
    training: an unreachable store is a warning and `out` records `logged: false`."""
    profile = config.get("profile", "default")
    settings = config.get("mlflow") or {}
    uri = uri or settings.get("tracking_uri")
    experiment = settings.get("experiment", f"pit-{profile}")
    run_name = f"summary-{profile}"
    paths = {"tables": Path(tables), "figures": Path(figures), "report": Path(report)}
    for what, path in paths.items():
        if not path.exists():
            raise PitError(f"{what} {str(path)!r} does not exist (expected the report stage's outputs)")
    record = {
        "run_name": run_name,
        "experiment": experiment,
        "tracking_uri": tracking_uri(uri),
        "run_id": None,
        "logged": False,
    }
    if settings.get("enabled", True):
        tracker = Tracker(uri, experiment, run_name, {"stage": "summary", "profile": profile, "role": "summary"})
        _log(tracker, config, paths)
        tracker.finish()
        record.update(run_id=tracker.run_id, logged=tracker.active)
    write_json(out, record)
    return record

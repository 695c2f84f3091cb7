"""`pit mlflow summary`: the report stage (tables, figures, REPORT.md) as one MLflow run `summary-<profile>`.

The run carries the tables, figures and report as artifacts, the pipeline config as params (and
`config.json`), every number of the paper's tables (table1 ... table4_*) as a metric
`<table>/<row key>/<column>`, and each other table (the claims table, its per-seed numbers, the study's
tables) as an MLflow table artifact `table_artifacts/<stem>.json` (`MlflowClient.log_table`, shown by the UI's
artifact view): their rows are named by claim text, which makes poor metric names (hundreds of them, up to
~190 characters).
"""

from __future__ import annotations

import csv
import io
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
PAPER_TABLE = re.compile(r"table\d.*")  # the paper's tables: their numbers become metrics; the others table artifacts
TABLE_ARTIFACTS = "table_artifacts"


def csv_rows(csv_path: Path) -> list[str]:
    """The data lines of a table CSV: its `#` note lines and blank lines left out."""
    return [line for line in csv_path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def table_metrics(csv_path: str | Path) -> dict[str, float]:
    """Our numeric cells of a table CSV (`paper_*` columns left out) as metrics named `<table>/<row key>/<column>`,
    the row key being the row's text cells that name it (e.g. teacher-256m-PIT) and its seed. Only the paper's
    tables (`PAPER_TABLE`); the others are table artifacts (`log_tables`)."""
    csv_path = Path(csv_path)
    if not PAPER_TABLE.fullmatch(csv_path.stem):
        return {}
    metrics = {}
    for row in csv.DictReader(csv_rows(csv_path)):
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


def log_tables(tracker: Tracker, csv_paths: list[Path]) -> None:
    """Each table CSV as an MLflow table artifact `table_artifacts/<stem>.json` (columns and rows, as
    `mlflow.log_table` writes them); a table with no rows in this profile (e.g. the stability sweep's in a profile
    without one: its CSV is empty) is left out."""
    import pandas as pd

    for path in csv_paths:
        if not (rows := csv_rows(path)):
            continue
        frame = pd.read_csv(io.StringIO("\n".join(rows)))  # an empty cell: null
        # text as object dtype: log_table looks for text columns as "object", which pandas 3 warns about for "str"
        frame = frame.astype(dict.fromkeys(frame.select_dtypes(exclude="number").columns, object))
        tracker.log_table(frame, f"{TABLE_ARTIFACTS}/{path.stem}.json")


def _log(tracker: Tracker, config: dict, paths: dict[str, Path]) -> None:
    """Params, table metrics and artifacts of the summary run."""
    profile = config.get("profile", "default")
    tracker.log_params({"profile": profile, "config": config})
    metrics = {}
    for table in sorted(paths["tables"].glob("*.csv")):
        metrics.update(table_metrics(table))
    tracker.log_metrics([{"step": 0, **metrics}], tuple(metrics))
    log_tables(tracker, [t for t in sorted(paths["tables"].glob("*.csv")) if not PAPER_TABLE.fullmatch(t.stem)])
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

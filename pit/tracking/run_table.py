"""The runs of an MLflow store as one table: name, status, key final metrics (`pit runs` prints it).

Reads the store with `mlflow.MlflowClient` (a SQLite file or a tracking server); each metric
column is the metric's last logged value. Columns: experiment, run (the run name, e.g.
`teacher-256m-pit`), status, start (UTC), the key metrics below when any listed run has them,
and every `pass@k`-style metric (names containing `pass`), e.g. from evaluation runs.
"""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime, timezone

from pit.errors import PitError
from pit.tracking.tracker import tracking_uri

# metric name in the store -> column name
KEY_METRICS = {
    "final_train_loss": "final_loss",
    "val_loss": "val_loss",
    "delta_ti": "delta_ti",
    "runtime_s": "runtime_s",
}
FORMATS = ("md", "csv", "json")


def _experiments(client, names: list[str] | None):
    if not names:
        return sorted(client.search_experiments(), key=lambda e: e.name)
    found = []
    for name in names:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            known = ", ".join(sorted(e.name for e in client.search_experiments())) or "none"
            raise PitError(f"no experiment {name!r} in the MLflow store (experiments: {known})")
        found.append(exp)
    return found


def _all_runs(client, experiment_id: str):
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id], max_results=1000, page_token=token, order_by=["attributes.start_time ASC"]
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def list_runs(uri: str | None = None, experiments: list[str] | None = None) -> list[dict]:
    """One dict per run: experiment, run, status, start, run_id and the key final metrics."""
    import mlflow

    uri = tracking_uri(uri)
    try:
        client = mlflow.MlflowClient(tracking_uri=uri)
        exps = _experiments(client, experiments)
    except PitError:
        raise
    except Exception as err:  # noqa: BLE001 -- an unreachable store is bad input here
        raise PitError(f"cannot read the MLflow store {uri!r}: {type(err).__name__}: {err}") from None
    rows = []
    for exp in exps:
        for run in _all_runs(client, exp.experiment_id):
            metrics = run.data.metrics
            row = {
                "experiment": exp.name,
                "run": run.info.run_name,
                "status": run.info.status,
                "start": datetime.fromtimestamp(run.info.start_time / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M"),
                "run_id": run.info.run_id,
            }
            for key, column in KEY_METRICS.items():
                row[column] = metrics.get(key)
            for key in sorted(metrics):
                if "pass" in key.lower():
                    row[key] = metrics[key]
            rows.append(row)
    return rows


def _columns(rows: list[dict]) -> list[str]:
    fixed = ["experiment", "run", "status", "start"]
    metric_cols = []
    for row in rows:
        for key in row:
            if key not in fixed and key != "run_id" and key not in metric_cols:
                metric_cols.append(key)
    metric_cols = [c for c in metric_cols if any(r.get(c) is not None for r in rows)]
    return fixed + metric_cols + ["run_id"]


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def format_runs(rows: list[dict], fmt: str = "md") -> str:
    """The rows of `list_runs` as a GitHub Markdown table, CSV or JSON."""
    if fmt not in FORMATS:
        raise PitError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(rows, indent=2, sort_keys=True) + "\n"
    cols = _columns(rows)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c) for c in cols})
        return out.getvalue()
    from tabulate import tabulate

    return tabulate([[_cell(r.get(c)) for c in cols] for r in rows], headers=cols, tablefmt="github") + "\n"

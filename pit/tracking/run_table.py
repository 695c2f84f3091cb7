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
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

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


def _local_store(uri: str) -> Path | None:
    """The file (SQLite) or folder (file store) of a local MLflow store URI; None for a server or other backends."""
    parsed = urlparse(uri)
    if parsed.scheme == "sqlite":
        path = uri[len("sqlite:///") :] if uri.startswith("sqlite:///") else parsed.path
        return None if path in ("", ":memory:") else Path(path)
    if parsed.scheme == "file":
        return Path(parsed.path)
    return Path(uri) if parsed.scheme == "" or len(parsed.scheme) == 1 else None  # a plain path (or C:\...)


def check_store(uri: str, timeout: float = 5.0) -> None:
    """Before listing: a local store must exist and be one (listing never creates a store: MLflow would make an
    empty mlflow.db or mlruns/ otherwise), and a server must accept a connection within `timeout` seconds (MLflow
    would retry a refused port for minutes); then requests are not retried. A PitError naming the URI otherwise."""
    local = _local_store(uri)
    if local is not None:
        sqlite = urlparse(uri).scheme == "sqlite"
        if not (local.is_file() if sqlite else local.is_dir()):
            raise PitError(
                f"no MLflow store at {uri!r} ({str(local)!r} does not exist): nothing to list; pass --uri (or set "
                "MLFLOW_TRACKING_URI) to an existing store"
            )
        if sqlite:
            with open(local, "rb") as f:
                if f.read(16) != b"SQLite format 3\x00":
                    raise PitError(f"{str(local)!r} (from {uri!r}) is not an SQLite database; expected an MLflow store")
        return
    parsed = urlparse(uri)
    if parsed.scheme in ("http", "https"):
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            socket.create_connection((parsed.hostname, port), timeout=timeout).close()
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise PitError(f"cannot reach the MLflow server {uri!r}: {reason} (waited at most {timeout:g} s)") from None
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")


def list_runs(uri: str | None = None, experiments: list[str] | None = None) -> list[dict]:
    """One dict per run: experiment, run, status, start, run_id and the key final metrics. Reads only: a store
    that does not exist is an error, never created (`check_store`)."""
    uri = tracking_uri(uri)
    check_store(uri)
    import mlflow

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

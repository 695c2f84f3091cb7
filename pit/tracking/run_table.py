"""The runs of an MLflow store as one table: name, status, key final metrics (`pit runs` prints it).

The runs come from `mlflow.search_runs` as a pandas DataFrame (every run of the listed experiments,
paged by MLflow; each metric column the metric's last logged value). Ours on top of it, and why:
`check_store` (listing must never create a store, and a server that is down must fail in seconds,
not after MLflow's minutes of retries), the filters on the run tags (`--stage/--mode/--arm`: a value
no listed run has is one error line naming the values there are), the choice and names of the columns
below, and the Markdown / CSV / JSON output.

Every row (CSV, JSON, `--wide`): experiment, run (the run name, e.g. `teacher-256m-pit`), status, start
(UTC), the key metrics below when any listed run has them, each evaluation score `<label>/<task>/pass_at_k`
(HumanEval, MBPP) or `<label>/<task>/accuracy` (GSM8K, SVAMP: exact match), e.g. `lora/gsm8k/accuracy`,
the tags stage, mode, slot, arm, task, and the run id. The default Markdown table is compact (under 120
characters for the pipeline's run names): run, stage, status, final_loss, val_loss, delta_ti, `score` (an
evaluation run's in-domain score after LoRA, `lora/<task>/...`), the first 8 characters of the run id, and
the experiment only when several are listed. Rows come per experiment, grouped by stage in the pipeline's order
(pretrain, lora, evaluate, summary), each stage's runs by start time.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

from pit.errors import PitError
from pit.tracking.tags import run_tags, stage_order
from pit.tracking.tracker import tracking_uri

# metric name in the store -> column name
KEY_METRICS = {
    "final_train_loss": "final_loss",
    "val_loss": "val_loss",
    "delta_ti": "delta_ti",
    "runtime_s": "runtime_s",
}
FORMATS = ("md", "csv", "json")
# the run tags shown as columns, and the ones `pit runs` filters on (pit/tracking/tags.py)
TAG_COLUMNS = ("stage", "mode", "slot", "arm", "task")
FILTERS = ("stage", "mode", "arm")
COMPACT = ("run", "stage", "status", "final_loss", "val_loss", "delta_ti", "score", "id")
# an evaluation run's score metric (pit.evaluation.evaluate.log_result): pass@k, or exact-match accuracy
SCORE_METRIC = re.compile(r"[^/]+/[^/]+/(pass_at_\d+|accuracy)")


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


def local_store(uri: str) -> Path | None:
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
    local = local_store(uri)
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


def _search(uri: str, experiment_ids: list[str]):
    """`mlflow.search_runs` on the store `uri` (the fluent API reads the global tracking URI: set, then put back)."""
    import mlflow

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        return mlflow.search_runs(experiment_ids=experiment_ids, order_by=["attributes.start_time ASC"])
    finally:
        mlflow.set_tracking_uri(previous)


def _value(value):
    """A DataFrame cell as JSON-ready Python: NaN (no such metric in this run) -> None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _row(run, experiment: str, score_columns: list[str]) -> dict:
    row = {
        "experiment": experiment,
        "run": run.get("tags.mlflow.runName"),
        "status": run["status"],
        "start": run["start_time"].strftime("%Y-%m-%d %H:%M"),
        "run_id": run["run_id"],
    }
    for tag in TAG_COLUMNS:
        row[tag] = _value(run.get(f"tags.{tag}"))
    for key, column in KEY_METRICS.items():
        row[column] = _value(run.get(f"metrics.{key}"))
    for column in score_columns:
        value = _value(run.get(f"metrics.{column}"))
        if value is not None:
            row[column] = value
    return row


def _with_arm_tags(frame):
    """`tags.mode` and `tags.arm` as pit.tracking.tags.run_tags gives them, for runs logged before runs carried
    them (a store made by an earlier version: stand-in teachers with mode scratch, no arm)."""
    keys = ("stage", "mode", "slot", "seed", "interface", "role", "arm")
    tagged = [
        run_tags(
            run.get("tags.mlflow.runName") or "",
            {k: run.get(f"tags.{k}") for k in keys if _value(run.get(f"tags.{k}"))},
        )
        for _, run in frame.iterrows()
    ]
    return frame.assign(**{f"tags.{k}": [t.get(k) for t in tagged] for k in ("mode", "arm")})


def _filter(frame, filters: dict[str, str | None]):
    """The rows of `frame` whose tags equal the given values; a value no row has is a PitError naming those there
    are (a typo lists nothing otherwise)."""
    for tag, value in filters.items():
        if value is None:
            continue
        if tag not in FILTERS:
            raise PitError(f"cannot filter on {tag!r}: expected one of {', '.join(FILTERS)}")
        column = frame[f"tags.{tag}"] if f"tags.{tag}" in frame.columns else None
        present = sorted({v for v in column if isinstance(v, str)}) if column is not None else []
        if value not in present:
            raise PitError(f"--{tag} {value!r}: no listed run has it (values: {', '.join(present) or 'none'})")
        frame = frame[column == value]
    return frame


def ordered(frame, experiment_ids: list[str]):
    """The runs of `frame` (mlflow.search_runs's columns) by experiment (in the order given), then by stage in the
    pipeline's order (pit.tracking.tags.STAGES; other stages after), then by start time."""
    order = {e: i for i, e in enumerate(experiment_ids)}
    stage = frame["tags.stage"].map(stage_order) if "tags.stage" in frame.columns else 0
    frame = frame.assign(_order=frame["experiment_id"].map(order), _stage=stage)
    return frame.sort_values(["_order", "_stage", "start_time"], kind="stable").drop(columns=["_order", "_stage"])


def list_runs(
    uri: str | None = None, experiments: list[str] | None = None, filters: dict[str, str | None] | None = None
) -> list[dict]:
    """One dict per run (experiments by name, then stages in the pipeline's order, then runs by start time):
    experiment, run, status, start, run_id, the
    tags of `TAG_COLUMNS`, the key final metrics and the evaluation scores; only runs whose tags match `filters`
    ({stage|mode|arm: value}). Reads only: a store that does not exist is an error, never created
    (`check_store`)."""
    uri = tracking_uri(uri)
    check_store(uri)
    import mlflow

    try:
        exps = _experiments(mlflow.MlflowClient(tracking_uri=uri), experiments)
        frame = _search(uri, [e.experiment_id for e in exps]) if exps else None
    except PitError:
        raise
    except Exception as err:  # noqa: BLE001 -- an unreachable store is bad input here
        raise PitError(f"cannot read the MLflow store {uri!r}: {type(err).__name__}: {err}") from None
    if frame is None or frame.empty:
        if any(v is not None for v in (filters or {}).values()):
            raise PitError(f"no runs in {uri!r} to filter")
        return []
    frame = ordered(_filter(_with_arm_tags(frame), filters or {}), [e.experiment_id for e in exps])
    names = {e.experiment_id: e.name for e in exps}
    scores = sorted(c[len("metrics.") :] for c in frame.columns if c.startswith("metrics."))
    scores = [c for c in scores if SCORE_METRIC.fullmatch(c)]
    return [_row(run, names[run["experiment_id"]], scores) for _, run in frame.iterrows()]


def _compact(row: dict) -> dict:
    """A row of the compact table: the in-domain score after LoRA of an evaluation run, a short run id."""
    score = next((v for k, v in row.items() if row.get("task") and k.startswith(f"lora/{row['task']}/")), None)
    return {**row, "score": score, "id": row["run_id"][:8]}


def _columns(rows: list[dict]) -> list[str]:
    """experiment, run, status, start, the metrics and scores, the tags, run_id (columns no row fills left out)."""
    fixed = ["experiment", "run", "status", "start"]
    metric_cols = []
    for row in rows:
        for key in row:
            if key not in (*fixed, *TAG_COLUMNS, "run_id") and key not in metric_cols:
                metric_cols.append(key)
    filled = [c for c in (*metric_cols, *TAG_COLUMNS) if any(r.get(c) is not None for r in rows)]
    return fixed + filled + ["run_id"]


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def format_runs(rows: list[dict], fmt: str = "md", wide: bool = False) -> str:
    """The rows of `list_runs` as a GitHub Markdown table (compact unless `wide`), CSV or JSON (every column)."""
    if fmt not in FORMATS:
        raise PitError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(rows, indent=2, sort_keys=True) + "\n"
    cols = _columns(rows)
    if fmt == "md" and not wide:
        rows = [_compact(r) for r in rows]
        several = len({r["experiment"] for r in rows}) > 1
        shown = (["experiment"] if several else []) + list(COMPACT)
        cols = [c for c in shown if any(r.get(c) is not None for r in rows)]
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c) for c in cols})
        return out.getvalue()
    from tabulate import tabulate

    return tabulate([[_cell(r.get(c)) for c in cols] for r in rows], headers=cols, tablefmt="github") + "\n"

"""Runs that travel with the results: an MLflow store's runs as a plain file, and back into another store.

`mlflow.db` stays on the machine that ran the pipeline (it is not a DVC output: every job writes to it).
The report stage writes `results/mlflow/runs.jsonl`, a DVC output: one JSON object per run with its
experiment, name, status, start and end times, tags, params and full metric histories (step, timestamp,
value). After `dvc pull`, `pit mlflow sync results/mlflow` recreates those runs in the local store (or
any `--tracking-uri`), so `pit runs` and `mlflow ui` show them. Artifacts are not copied: the files they
are (run.json, metrics.jsonl, summary.json, tables, REPORT.md) are in the results tree itself.

Each imported run carries the tag `pit.imported_from` (its run id in the exporting store); importing the
same file again adds nothing, and neither does importing it into the store it came from. A tag that holds another
run's id (a LoRA or evaluation run's `pit.pretrain_run`; `mlflow.parentRunId` in exports of earlier versions) is
rewritten to that run's id in the importing store (the run it names started first, so it is imported first).
"""

from __future__ import annotations

import json
from pathlib import Path

from pit.errors import PitError
from pit.io import read_jsonl, write_text
from pit.progress import progress_bar
from pit.sidecars import check_object, is_kind
from pit.tracking.run_table import check_store, local_store
from pit.tracking.tags import LINK_TAGS, STAGES
from pit.tracking.tracker import UI_QUERY, experiment_id, store_lock, tracking_uri

EXPORT_FILE = "runs.jsonl"
IMPORTED_FROM = "pit.imported_from"


def _run_record(client, exp, run) -> dict:
    """One run as a JSON-ready dict (tags, params, every metric's whole history)."""
    info, data = run.info, run.data
    history = {
        key: [[m.step, m.timestamp, m.value] for m in client.get_metric_history(info.run_id, key)]
        for key in sorted(data.metrics)
    }
    return {
        "experiment": exp.name,
        "experiment_tags": dict(exp.tags),
        "run_id": info.run_id,
        "run_name": info.run_name,
        "status": info.status,
        "start_time": info.start_time,
        "end_time": info.end_time,
        "tags": dict(data.tags),
        "params": dict(data.params),
        "metrics": history,
    }


def export_runs(out: str | Path, experiment: str, uri: str | None = None) -> int:
    """Write every run of `experiment` in the store `uri` to `out` (JSON lines, oldest first); the number of runs.
    A store that does not exist or lacks the experiment gives an empty file (nothing was tracked)."""
    import mlflow

    uri = tracking_uri(uri)
    lines, exp = [], None
    local = local_store(uri)
    if local is None or local.exists():  # a local store that was never created: nothing was tracked
        check_store(uri)
        client = mlflow.MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(experiment)
    if exp is not None:
        runs = client.search_runs([exp.experiment_id], max_results=50000, order_by=["attributes.start_time ASC"])
        runs = progress_bar(runs, desc=f"export {experiment}", unit="run")
        lines = [json.dumps(_run_record(client, exp, run), sort_keys=True) + "\n" for run in runs]
    write_text(out, "".join(lines))
    return len(lines)


def export_file(path: str | Path) -> Path | None:
    """The export file that `path` names (the file itself, or a folder holding runs.jsonl); None otherwise."""
    path = Path(path)
    if path.is_dir() and (path / EXPORT_FILE).is_file():
        return path / EXPORT_FILE
    return path if path.is_file() and path.name.endswith(".jsonl") else None


def _present(client, exp_id: str, record: dict) -> str | None:
    """The id of this run in the store: itself (same run id) or an earlier import of it; None when absent."""
    try:
        return client.get_run(record["run_id"]).info.run_id
    except Exception:  # noqa: BLE001 -- not in this store
        pass
    found = client.search_runs([exp_id], filter_string=f"tags.`{IMPORTED_FROM}` = '{record['run_id']}'")
    return found[0].info.run_id if found else None


def _import_run(client, record: dict, ids: dict[str, str]) -> bool:
    """Recreate one exported run (times, tags, params, metric histories, status) unless present; `ids` maps
    exported run ids to this store's (the ids its LINK_TAGS name are taken from it, its own added). Whether it was
    created."""
    from mlflow.entities import Metric, Param

    exp_id = experiment_id(client, record["experiment"])
    present = _present(client, exp_id, record)
    if present is not None:
        ids[record["run_id"]] = present
        return False
    tags = {k: v for k, v in record["tags"].items() if k != "mlflow.runName"}
    tags[IMPORTED_FROM] = record["run_id"]
    for link in LINK_TAGS:
        if tags.get(link) in ids:
            tags[link] = ids[tags[link]]
    run = client.create_run(exp_id, start_time=record["start_time"], tags=tags, run_name=record["run_name"])
    run_id = ids[record["run_id"]] = run.info.run_id
    params = [Param(k, v) for k, v in record["params"].items()]
    metrics = [Metric(k, v, ts, step) for k, points in record["metrics"].items() for step, ts, v in points]
    for i in range(0, len(params), 100):
        client.log_batch(run_id, params=params[i : i + 100])
    for i in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[i : i + 1000])
    if record["status"] != "RUNNING":
        client.set_terminated(run_id, status=record["status"], end_time=record["end_time"])
    return True


RECORD_FIELDS = {
    "experiment": str,
    "run_id": str,
    "run_name": (str, type(None)),
    "status": str,
    "start_time": int,
    "end_time": (int, type(None)),
    "tags": dict,
    "params": dict,
    "metrics": dict,
}


def check_record(record, label: str) -> None:
    """One line of an export as `_run_record` writes it (RECORD_FIELDS, each metric a list of [step, timestamp,
    value] points), else a PitError naming `label`: checked for every line before any run is imported."""
    what = "an exported run (`pit mlflow export`)"
    if isinstance(record, dict) and not all(f in record for f in RECORD_FIELDS):
        missing = [f for f in RECORD_FIELDS if f not in record]
        raise PitError(f"{label}: not an exported run (missing {', '.join(missing)})")
    check_object(record, label, what, RECORD_FIELDS)
    for key, points in record["metrics"].items():
        point = (int, int, float)  # step, timestamp, value
        ok = isinstance(points, list) and all(
            isinstance(p, list) and len(p) == 3 and all(map(is_kind, p, point)) for p in points
        )
        if not ok:
            raise PitError(f"{label}: metric {key!r} is not a list of [step, timestamp, value] points ({what})")


def import_runs(path: str | Path, uri: str | None = None) -> tuple[int, int]:
    """Recreate the runs of an export (`export_runs`) in the store `uri` (created when missing);
    (runs imported, runs already there)."""
    source = export_file(path)
    if source is None:
        raise PitError(f"{str(path)!r} is not an MLflow export: expected {EXPORT_FILE} or a folder holding it")
    try:
        records = read_jsonl(source)
    except ValueError as err:
        raise PitError(f"{str(source)!r} is not a run export (one JSON object per line): {err}") from None
    for i, record in enumerate(records, 1):
        check_record(record, f"{str(source)!r} line {i}")
    import mlflow  # after the checks: a bad export is refused at once

    uri = tracking_uri(uri)
    imported, ids = 0, {}
    with store_lock(uri):
        client = mlflow.MlflowClient(tracking_uri=uri)
        ordered = sorted(records, key=lambda r: r["start_time"])
        for record in progress_bar(ordered, desc=f"import {source}", unit="run"):
            imported += _import_run(client, record, ids)
    return imported, len(records) - imported


def ui_urls(uri: str | None, base: str, experiments: list[str] | None = None) -> list[tuple[str, str]]:
    """(label, URL) of each experiment's runs table in the MLflow UI at `base` (all experiments by default), then of
    the same table filtered to each stage (label `<experiment> [stage <stage>]`: the runs page reads its search
    filter from the URL's `searchFilter`); the URLs select the UI's "Model training" view (`UI_QUERY`), where MLflow
    3 otherwise opens its GenAI one."""
    from urllib.parse import quote

    import mlflow

    uri = tracking_uri(uri)
    check_store(uri)
    client = mlflow.MlflowClient(tracking_uri=uri)
    found = client.search_experiments()
    if experiments:
        missing = sorted(set(experiments) - {e.name for e in found})
        if missing:
            known = ", ".join(sorted(e.name for e in found)) or "none"
            raise PitError(f"no experiment {missing[0]!r} in the MLflow store {uri!r} (experiments: {known})")
        found = [e for e in found if e.name in experiments]
    urls = []
    for e in sorted(found, key=lambda e: e.name):
        table = f"{base}/#/experiments/{e.experiment_id}/runs?{UI_QUERY}"
        urls.append((e.name, table))
        urls += [(f"{e.name} [stage {s}]", f"{table}&searchFilter={quote(f'tags.stage = {s!r}')}") for s in STAGES]
    return urls

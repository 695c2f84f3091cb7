"""MLflow tracking that never stops a run: `metrics.jsonl` in the run folder is the source of truth.

The tracking URI comes from `--tracking-uri` / the config, else `MLFLOW_TRACKING_URI`, else a
SQLite store in the project (`sqlite:///mlflow.db`). If the store cannot be reached (a server
down, a locked file), the first failure is logged as a warning and tracking switches off for the
rest of the run; `pit mlflow sync RUN_DIR` uploads the run folder later.

`pit mlflow summary` logs the report stage (tables, figures, REPORT.md) as the run
`summary-<profile>`; `pit runs` (pit/runs.py) lists a store's runs with their final metrics.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import json
import logging
import math
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from pit.errors import PitError
from pit.io import write_json

log = logging.getLogger("pit.tracking")

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


def tracking_uri(configured: str | None = None) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v if isinstance(v, (int, float, str, bool)) or v is None else json.dumps(v)
    return out


@contextlib.contextmanager
def _flock(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def store_lock(uri: str):
    """Jobs running in parallel share one SQLite store: its creation (schema migration), experiment
    creation and writes are serialised with a file lock next to the database. Other stores: no lock."""
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        db.parent.mkdir(parents=True, exist_ok=True)
        return _flock(db.with_name(db.name + ".lock"))
    return contextlib.nullcontext()


class Tracker:
    """A best-effort MLflow run. Every call is safe: failures disable tracking, never the run."""

    def __init__(self, uri: str | None, experiment: str, run_name: str, tags: dict[str, str] | None = None,
                 enabled: bool = True, run_id: str | None = None):
        self.run_id = None
        self.active = enabled
        if not enabled:
            return
        self._uri = tracking_uri(uri)
        # fail fast instead of retrying for minutes against a server that is down
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
        self._call(self._start, self._uri, experiment, run_name, tags or {}, run_id)

    def _start(self, uri, experiment, run_name, tags, run_id):
        import mlflow

        self._client = mlflow.MlflowClient(tracking_uri=uri)
        if run_id is not None:
            try:
                self.run_id = self._client.get_run(run_id).info.run_id
                self._client.update_run(self.run_id, status="RUNNING")
                return
            except Exception:  # the run is gone from this store: start a new one
                pass
        exp = self._client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp is not None else self._client.create_experiment(experiment)
        self.run_id = self._client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id
        self._close_orphans(exp_id, run_name, tags)

    def _close_orphans(self, exp_id, run_name, tags):
        """A job killed before its first checkpoint leaves its run RUNNING and restarts with a new one:
        earlier RUNNING runs of the same name and tags are marked KILLED (tag `pit.superseded_by`), so
        the store shows one live run per arm."""
        if "'" in run_name:  # not expressible in a search filter; our run names never have one
            return
        stale = self._client.search_runs(
            [exp_id], filter_string=f"attributes.run_name = '{run_name}' and attributes.status = 'RUNNING'")
        for run in stale:
            if run.info.run_id != self.run_id and all(run.data.tags.get(k) == str(v) for k, v in tags.items()):
                self._client.set_tag(run.info.run_id, "pit.superseded_by", self.run_id)
                self._client.set_terminated(run.info.run_id, status="KILLED")

    def _call(self, fn, *args):
        if not self.active:
            return None
        try:
            with store_lock(self._uri):
                return fn(*args)
        except Exception as err:  # noqa: BLE001  -- any tracking failure must not stop training
            log.warning("MLflow tracking disabled for this run (%s: %s); metrics.jsonl keeps everything, "
                        "upload later with `pit mlflow sync`", type(err).__name__, err)
            self.active = False
            return None

    def log_params(self, params: dict) -> None:
        from mlflow.entities import Param

        def go():
            items = [Param(k, str(v)[:6000]) for k, v in flatten(params).items()]
            for i in range(0, len(items), 100):
                self._client.log_batch(self.run_id, params=items[i:i + 100])
        self._call(go)

    def log_metrics(self, rows: list[dict], keys: tuple[str, ...]) -> None:
        """Log metric rows (dicts with 'step'); only finite numeric values of `keys`."""
        from mlflow.entities import Metric

        def go():
            ts = int(time.time() * 1000)
            items = [Metric(k, float(r[k]), ts, int(r["step"])) for r in rows for k in keys
                     if isinstance(r.get(k), (int, float)) and math.isfinite(r[k])]
            for i in range(0, len(items), 1000):
                self._client.log_batch(self.run_id, metrics=items[i:i + 1000])
        self._call(go)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._call(lambda: self._client.log_artifact(self.run_id, str(path), artifact_path))

    def log_artifacts(self, folder: str | Path, artifact_path: str | None = None) -> None:
        """Every file under `folder`, as `artifact_path/...`."""
        self._call(lambda: self._client.log_artifacts(self.run_id, str(folder), artifact_path))

    def set_tags(self, tags: dict[str, str]) -> None:
        self._call(lambda: [self._client.set_tag(self.run_id, k, str(v)) for k, v in tags.items()])

    def finish(self, status: str = "FINISHED") -> None:
        self._call(lambda: self._client.set_terminated(self.run_id, status=status))


METRIC_KEYS = ("loss", "lr", "grad_norm", "tokens_per_s", "tokens", "delta_ti", "val_loss", "val_ppl",
               "raw_cosine", "raw_procrustes", "raw_angle", "polar_cosine", "polar_procrustes", "polar_angle")


def sync_run(run_dir: str | Path, uri: str | None = None) -> str:
    """Upload a finished run folder (params, metrics.jsonl, summary, config) as a new MLflow run."""
    run_dir = Path(run_dir)
    meta_file = run_dir / "run.json"
    if not meta_file.is_file():
        raise PitError(f"{str(run_dir)!r} is not a run folder: no run.json (expected the output of `pit train`)")
    meta = json.loads(meta_file.read_text())
    tracker = Tracker(uri, meta["experiment"], meta["run_name"], meta.get("tags"))
    if not tracker.active:
        raise PitError(f"cannot reach the MLflow store {tracking_uri(uri)!r}")
    tracker.log_params(meta["params"])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    tracker.log_metrics(rows, METRIC_KEYS)
    for name in ("summary.json", "run.json", "metrics.jsonl"):
        if (run_dir / name).is_file():
            tracker.log_artifact(run_dir / name)
    tracker.finish()
    if not tracker.active:
        raise PitError(f"upload to {tracking_uri(uri)!r} failed part-way; nothing in {str(run_dir)!r} was changed")
    return tracker.run_id


def cmd_sync(args: argparse.Namespace) -> int:
    for run_dir in args.run_dirs:
        print(f"{run_dir}: uploaded as MLflow run {sync_run(run_dir, args.tracking_uri)}")
    return 0


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def _metric_name(*parts: str) -> str:
    return "/".join(re.sub(r"[^\w.\- ]+", "_", p).strip(" ./") or "_" for p in parts)


def table_metrics(csv_path: str | Path) -> dict[str, float]:
    """Our numeric cells of a table CSV (`paper_*` columns left out) as metrics named
    `<table>/<row key>/<column>`, the row key being the row's leading text cells (e.g. teacher-256m-PIT)."""
    csv_path = Path(csv_path)
    lines = [line for line in csv_path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    metrics = {}
    for row in csv.DictReader(lines):
        values, key = {}, []
        for col, cell in row.items():
            try:
                values[col] = float(cell)
            except (TypeError, ValueError):
                if not values:  # leading text cells name the row
                    key.append(cell or "")
        for col, value in values.items():
            if not col.startswith("paper_") and math.isfinite(value):
                metrics[_metric_name(csv_path.stem, "-".join(key) or "row", col)] = value
    return metrics


def log_summary(config: dict, tables: str | Path, figures: str | Path, report: str | Path, out: str | Path,
                uri: str | None = None) -> dict:
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
    record = {"run_name": run_name, "experiment": experiment, "tracking_uri": tracking_uri(uri), "run_id": None,
              "logged": False}
    if settings.get("enabled", True):
        tracker = Tracker(uri, experiment, run_name, {"profile": profile, "role": "summary"})
        tracker.log_params({"profile": profile, "git_commit": _git_commit() or "unknown", "config": config})
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
        tracker.finish()
        record.update(run_id=tracker.run_id, logged=tracker.active)
    write_json(out, record)
    return record


def cmd_summary(args: argparse.Namespace) -> int:
    try:
        config = json.loads(Path(args.config_file).read_text() if args.config_file else args.config)
    except json.JSONDecodeError as err:
        raise PitError(f"--config/--config-file is not JSON ({err}); expected the pipeline config as an object")
    if not isinstance(config, dict):
        raise PitError(f"--config must be a JSON object (the pipeline config), got {type(config).__name__}")
    record = log_summary(config, args.tables, args.figures, args.report, args.out, args.tracking_uri)
    if record["logged"]:
        print(f"logged run {record['run_name']} ({record['run_id']}) in experiment {record['experiment']!r} "
              f"of {record['tracking_uri']}")
    else:
        print(f"{record['run_name']}: not logged (MLflow disabled or the store was unreachable)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("mlflow", help="MLflow utilities")
    s = p.add_subparsers(dest="mlflow_command", required=True)
    q = s.add_parser("sync", help="upload run folders (metrics.jsonl, summary) to an MLflow store")
    q.add_argument("run_dirs", nargs="+")
    q.add_argument("--tracking-uri", default=None, help=f"default: $MLFLOW_TRACKING_URI or {DEFAULT_TRACKING_URI}")
    q.set_defaults(func=cmd_sync)
    q = s.add_parser("summary", help="log the tables, figures and report as a run `summary-<profile>`")
    src = q.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="the pipeline config as a JSON object (profile, mlflow, ...)")
    src.add_argument("--config-file", help="the pipeline config as a JSON file")
    q.add_argument("--tables", default="results/tables", help="folder of table files (default: results/tables)")
    q.add_argument("--figures", default="results/figures", help="folder of figures (default: results/figures)")
    q.add_argument("--report", default="results/REPORT.md", help="the report (default: results/REPORT.md)")
    q.add_argument("--out", required=True, help="JSON record of the logged run (run id, store, experiment)")
    q.add_argument("--tracking-uri", default=None,
                   help=f"default: the config's mlflow.tracking_uri, else $MLFLOW_TRACKING_URI or {DEFAULT_TRACKING_URI}")
    q.set_defaults(func=cmd_summary)

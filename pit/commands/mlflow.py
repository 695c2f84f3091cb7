"""`pit mlflow sync|summary|export`: put runs into an MLflow store later; log the report stage as one run.

- `sync PATH...`: each finished run folder (run.json, metrics.jsonl, summary.json) as a new run
  (pit/tracking/sync.py); an export (`results/mlflow`, or its runs.jsonl) imported run by run
  (pit/tracking/transfer.py), e.g. after `dvc pull` into a store that has none of them.
- `summary`: the tables, figures and REPORT.md as the run `summary-<profile>` (pit/tracking/summary.py).
- `ui`: `mlflow server` on the store, after printing each experiment's runs-table URL (MLflow 3 would open its
  GenAI view; the URL selects "Model training").
- `export`: an experiment's runs (tags, params, metric histories) as a JSON-lines file (the report stage
  writes results/mlflow/runs.jsonl).
"""

from __future__ import annotations

import argparse
import os
import sys

from pit.commands.common import check_outputs, read_config, sqlite_file
from pit.errors import PitError
from pit.tracking.summary import log_summary
from pit.tracking.sync import sync_run
from pit.tracking.tracker import DEFAULT_TRACKING_URI, tracking_uri
from pit.tracking.transfer import export_file, export_runs, import_runs, ui_urls


def cmd_sync(args: argparse.Namespace) -> int:
    for path in args.run_dirs:
        if export_file(path) is not None:
            imported, present = import_runs(path, args.tracking_uri)
            print(f"{path}: imported {imported} runs ({present} already in the store)")
        else:
            print(f"{path}: uploaded as MLflow run {sync_run(path, args.tracking_uri)}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    if not args.experiment.strip():
        raise PitError(f"--experiment {args.experiment!r}: expected an experiment name, e.g. pit-default")
    check_outputs([args.out], sqlite_file(tracking_uri(args.tracking_uri)))
    n = export_runs(args.out, args.experiment, args.tracking_uri)
    print(f"{args.out}: {n} runs of experiment {args.experiment!r}")
    return 0


def _config(args: argparse.Namespace) -> dict:
    if args.config_file:
        return read_config(args.config_file, "--config-file")
    if not args.config.lstrip().startswith("{"):
        raise PitError(
            f"--config {args.config[:80]!r}: expected the pipeline config as a JSON object (or --config-file)"
        )
    return read_config(args.config, "--config")


def cmd_summary(args: argparse.Namespace) -> int:
    sources = (args.config_file, args.tables, args.figures, args.report, sqlite_file(tracking_uri(args.tracking_uri)))
    check_outputs([args.out], *sources)
    record = log_summary(_config(args), args.tables, args.figures, args.report, args.out, args.tracking_uri)
    if record["logged"]:
        print(
            f"logged run {record['run_name']} ({record['run_id']}) in experiment {record['experiment']!r} "
            f"of {record['tracking_uri']}"
        )
    else:
        print(f"{record['run_name']}: not logged (MLflow disabled or the store was unreachable)")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise PitError(f"--port {args.port}: expected 1 to 65535")
    uri = tracking_uri(args.tracking_uri)
    for name, url in ui_urls(uri, f"http://{args.host}:{args.port}", args.experiment):
        print(f"{name}: {url}", flush=True)
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")  # GenAI scorer jobs: none here
    server = ["mlflow", "server", "--backend-store-uri", uri, "--host", args.host, "--port", str(args.port)]
    os.execv(sys.executable, [sys.executable, "-m", *server, "--workers", "1"])
    return 0  # not reached: the server replaces this process


def register(sub) -> None:
    p = sub.add_parser("mlflow", help="MLflow utilities")
    s = p.add_subparsers(dest="mlflow_command", required=True)
    q = s.add_parser("sync", help="upload run folders (metrics.jsonl, summary), or import an export, to a store")
    q.add_argument("run_dirs", nargs="+", metavar="PATH", help="a run folder, or an export (results/mlflow)")
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
    q.add_argument(
        "--tracking-uri",
        default=None,
        help=f"default: the config's mlflow.tracking_uri, else $MLFLOW_TRACKING_URI or {DEFAULT_TRACKING_URI}",
    )
    q.set_defaults(func=cmd_summary)
    q = s.add_parser("export", help="an experiment's runs as JSON lines (`sync` imports them into another store)")
    q.add_argument("--out", required=True, help="the file to write, e.g. results/mlflow/runs.jsonl")
    q.add_argument("--experiment", required=True, help="the experiment, e.g. pit-default")
    q.add_argument("--tracking-uri", default=None, help=f"default: $MLFLOW_TRACKING_URI or {DEFAULT_TRACKING_URI}")
    q.set_defaults(func=cmd_export)
    q = s.add_parser("ui", help="serve the store's MLflow UI; print each experiment's runs-table URL first")
    q.add_argument("--tracking-uri", default=None, help=f"default: $MLFLOW_TRACKING_URI or {DEFAULT_TRACKING_URI}")
    q.add_argument("--experiment", action="append", default=None, help="only this experiment's URL (repeatable)")
    q.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    q.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    q.set_defaults(func=cmd_ui)

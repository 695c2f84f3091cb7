"""`pit runs`: the runs of an MLflow store as one table (name, status, key final metrics).

    pit runs                                    # every experiment of $MLFLOW_TRACKING_URI or sqlite:///mlflow.db
    pit runs --stage evaluate                   # only the evaluation runs
    pit runs --stage pretrain --arm pit-head    # only the runs with these tags
    pit runs --experiment pit-paper --format csv
    pit runs --uri http://mlflow.example.org:5000 --format json

Reads the store with `mlflow.search_runs` (a SQLite file or a tracking server); each metric
column is the metric's last logged value. The default table is compact (under 120 characters):
run (e.g. `teacher-256m-pit`), stage, status, final_loss, val_loss, delta_ti, score (an evaluation
run's in-domain score after LoRA), the run id's first 8 characters. `--wide`, CSV and JSON add
the experiment, start (UTC), runtime_s, every evaluation score (`<label>/<task>/pass_at_1` for
HumanEval and MBPP, `<label>/<task>/accuracy` for GSM8K and SVAMP exact match, e.g.
`lora/gsm8k/accuracy`), the tags stage, mode, slot, arm, task, and the whole run id.
Rows come grouped by stage in the pipeline's order (pretrain, lora, evaluate, summary), each stage's runs by start
time. Filters: `--stage` (pretrain, lora, evaluate, summary), `--mode` (teacher, scratch, stand-in),
`--arm` (pit, pit-head, tt, untied, ...); a value no run has is an error naming those there are.

Listing only reads: a local store (SQLite file, mlruns folder) that does not exist is an error,
never created; a server that refuses the connection, or does not accept it within 5 s, is an
error at once, and requests to a server are not retried.
"""

from __future__ import annotations

import argparse

from pit.errors import PitError
from pit.tracking.run_table import FORMATS, format_runs, list_runs
from pit.tracking.tracker import DEFAULT_TRACKING_URI, tracking_uri


def cmd_runs(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise PitError(f"--format {args.format!r}: expected one of {', '.join(FORMATS)}")
    filters = {"stage": args.stage, "mode": args.mode, "arm": args.arm}
    rows = list_runs(args.uri, args.experiment, filters)
    if not rows and args.format != "json":
        print(f"no runs in {tracking_uri(args.uri)!r}")
        return 0
    print(format_runs(rows, args.format, wide=args.wide), end="")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "runs",
        help="table of the MLflow store's runs and their final metrics",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--uri", default=None, help=f"tracking URI (default: $MLFLOW_TRACKING_URI or {DEFAULT_TRACKING_URI})"
    )
    p.add_argument(
        "--experiment",
        action="append",
        default=None,
        help="only this experiment (e.g. pit-default, pit-paper); repeatable; default: all",
    )
    p.add_argument("--stage", default=None, help="only runs of this stage: pretrain, lora, evaluate, summary")
    p.add_argument("--mode", default=None, help="only runs of this mode: teacher, scratch, stand-in")
    p.add_argument("--arm", default=None, help="only runs of this arm: pit, pit-head, tt, untied, ...")
    p.add_argument("--format", default="md", help="md (default), csv or json")
    p.add_argument("--wide", action="store_true", help="the Markdown table with every column (CSV and JSON have them)")
    p.set_defaults(func=cmd_runs)

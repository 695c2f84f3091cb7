"""`pit share push|pull`: a pipeline run's results to a DVC remote and back, one step each way.

    pit share push [--remote NAME]     # after the pipeline: dvc commit --force, dvc push; then commit dvc.lock
    pit share pull [--remote NAME]     # in a clone: dvc pull, snakemake --touch --forceall, pit mlflow sync

`push` refuses while `snakemake -n` plans jobs (the outputs would not match the code and config), records every
stage's outputs in dvc.lock and DVC's cache, and pushes them to the remote (default: the one .dvc/config names);
each folder output first gets `.pit-out-path`, its own path. `pull` first checks that the remote holds what this
dvc.lock records (else one line, exit 2: this dvc.lock is not the pushed one; check out the commit that was pushed),
then fetches the outputs dvc.lock records, checks every pulled file against the hash dvc.lock records and each
folder's `.pit-out-path` against its path (one line per file that differs or is missing, or folder that is
another's, then exit 1; a damaged copy is removed from DVC's cache, so a pull from the repaired remote fetches it
again), refuses unless `dvc status` is then clean, marks them up to date for Snakemake (their modification times in
DAG order, Snakemake's metadata) and imports the MLflow runs of results/mlflow/runs.jsonl into the profile's store.
Afterwards `snakemake -n` has nothing to do, `dvc status` is clean and `pit runs` lists the runs. The profile is
dvc.yaml's `vars.configfile`. Run from the checkout's root (docs/reproducibility.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pit.tracking.share import pull, push
from pit.tracking.tracker import DEFAULT_TRACKING_URI


def cmd_push(args: argparse.Namespace) -> int:
    result = push(Path.cwd(), args.remote)
    remote = args.remote or "(default)"
    print(f"recorded the outputs in dvc.lock and pushed {result['pushed']} files to the remote {remote}")
    if result["lock_changed"]:
        print("dvc.lock changed: commit it (git add dvc.lock && git commit -m 'results'), so a clone pulls this run")
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    result = pull(Path.cwd(), args.remote, args.tracking_uri)
    if result["problems"]:
        print("\n".join(result["problems"]))
        print(
            f"pulled {result['fetched']} files; {len(result['problems'])} differ from dvc.lock or are missing: not "
            "marked up to date for Snakemake, no MLflow run imported (pull from a remote with the recorded content)"
        )
        return 1
    print(
        f"pulled {result['fetched']} files; Snakemake sees every output up to date; imported {result['imported']} "
        f"MLflow runs ({result['present']} already in the store)"
    )
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "share",
        help="push a run's results to a DVC remote, or pull them ready for Snakemake and MLflow",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s = p.add_subparsers(dest="share_command", required=True)
    q = s.add_parser("push", help="dvc commit --force and dvc push, once Snakemake has nothing left to do")
    q.add_argument("--remote", default=None, help="DVC remote name (default: .dvc/config's default remote)")
    q.set_defaults(func=cmd_push)
    q = s.add_parser("pull", help="dvc pull, snakemake --touch --forceall, import the MLflow runs")
    q.add_argument("--remote", default=None, help="DVC remote name (default: .dvc/config's default remote)")
    q.add_argument(
        "--tracking-uri",
        default=None,
        help=f"store to import the runs into (default: the profile's mlflow.tracking_uri, else {DEFAULT_TRACKING_URI})",
    )
    q.set_defaults(func=cmd_pull)

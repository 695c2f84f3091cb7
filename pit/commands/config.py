"""`pit config check FILE...`: check a workflow profile without running Snakemake (docs/workflow.md).

pit config check config/config.yaml
pit config check config/paper.yaml config/paper-smoke.yaml   # an overlay: merged in order, as --configfile does

Every check the workflow makes when it reads its config (pit/pipeline/config.py): the file is there and is YAML
(a syntax error with its line and column), the schema (with the run settings' bounds from
pit/training/args.py), the checks across keys, and every resolved run spec built into pit's run arguments.
A problem is one line `FILE:LINE: invalid config at KEY: ...` and exit code 2. Snakemake's own command line
reads `--configfile` before the workflow runs, so a missing or unparseable file there is Snakemake's message:
this command gives the one-line answer.
"""

from __future__ import annotations

import argparse


def run_check(args: argparse.Namespace) -> int:
    from pit.pipeline.config import check_files

    profile = check_files(args.files)
    print(
        f"{' + '.join(args.files)}: profile {profile.name!r} is valid: {len(profile.pretrain_runs())} pretraining "
        f"runs ({', '.join(profile.arms)}), {len(profile.posttrain_runs()) * len(profile.lora_tasks)} LoRA runs"
    )
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "config",
        help="check a workflow profile (YAML syntax, schema, run settings) in one line",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmds = p.add_subparsers(dest="config_command", required=True)
    c = cmds.add_parser("check", help="check profile files (several: merged in order, as snakemake --configfile)")
    c.add_argument("files", nargs="+", metavar="FILE", help="profile file(s), e.g. config/config.yaml")
    c.set_defaults(func=run_check)

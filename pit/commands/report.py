"""`pit report`: results/REPORT.md, the page a person reads first.

It says what was run (profile, slots, interfaces, steps, tokens), then shows every table (ours
beside the paper's) and links every figure, with the notes needed to read them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pit.commands.common import read_config
from pit.io import write_text
from pit.reporting.report import build_report


def cmd_report(args: argparse.Namespace) -> int:
    config = read_config(args.config, "--config")
    out = Path(args.out)
    runs = Path(args.runs) if Path(args.runs).is_dir() else None
    write_text(out, build_report(config, Path(args.tables), Path(args.figures), out, runs))
    print(f"report: {out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("report", help="write results/REPORT.md from the tables and figures", description=__doc__)
    p.add_argument(
        "--config",
        required=True,
        help="the resolved config, as a JSON object (the pipeline passes it) or a YAML/JSON file",
    )
    p.add_argument("--tables", default="results/tables")
    p.add_argument("--figures", default="results/figures")
    p.add_argument("--out", default="results/REPORT.md")
    p.add_argument(
        "--runs", default="results/pretrain", help="pretraining run folders (model sizes, vocabulary, tokens)"
    )
    p.set_defaults(func=cmd_report)

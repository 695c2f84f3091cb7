"""`pit report`: results/REPORT.md, the page a person reads first, and REPORT.html beside it.

In reading order: a short summary (profile, what ran, what is comparable with the paper, the few findings),
provenance, the paper's claims with their figures, what was run in detail, every table (ours beside the paper's)
with its notes, every figure with its caption (from the HTML report's captions, workflow/report/*.rst).
REPORT.html is the same page as HTML (the Snakemake HTML report shows it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pit.commands.common import read_config
from pit.io import check_output, opens_with, write_text
from pit.reporting.report import REPORT_TITLE, build_report, report_html


def cmd_report(args: argparse.Namespace) -> int:
    config = read_config(args.config, "--config")
    out = Path(args.out)
    for dst in (out, out.with_suffix(".html")):
        check_output(dst, [args.config, args.tables, args.figures, args.runs, args.captions])
    runs = Path(args.runs) if Path(args.runs).is_dir() else None
    captions = Path(args.captions) if Path(args.captions).is_dir() else None
    text = build_report(config, Path(args.tables), Path(args.figures), out, runs, captions)
    write_text(out, text, opens_with(f"# {REPORT_TITLE}"))
    write_text(out.with_suffix(".html"), report_html(text), opens_with(f"<title>{REPORT_TITLE}</title>"))
    print(f"report: {out} and {out.with_suffix('.html')}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="write results/REPORT.md (and .html) from the tables and figures", description=__doc__
    )
    p.add_argument(
        "--config",
        required=True,
        help="the resolved config, as a JSON object (the pipeline passes it) or a YAML/JSON file",
    )
    p.add_argument("--tables", default="results/tables")
    p.add_argument("--figures", default="results/figures")
    p.add_argument("--out", default="results/REPORT.md", help="REPORT.md; REPORT.html is written beside it")
    p.add_argument(
        "--runs", default="results/pretrain", help="pretraining run folders (model sizes, vocabulary, tokens)"
    )
    p.add_argument(
        "--captions",
        default="workflow/report",
        help="the figures' captions, <name>.rst (the HTML report's); a figure without one gets none",
    )
    p.set_defaults(func=cmd_report)

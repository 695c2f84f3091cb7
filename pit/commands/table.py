"""`pit table`: the paper's tables from run folders, ours beside the paper's (Markdown, CSV, LaTeX).

Every table names the profile that produced it; the paper's numbers come from
pit/reporting/paper_values.yaml (cited to table and row). Runs are found by their folder layout
`<root>/<mode>/<slot>/<interface>/` (results/pretrain, results/diagnostics, results/posttrain).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pit.errors import PitError
from pit.reporting.claims import claims_table, table_notes
from pit.reporting.tables import BUILDERS, write_table

TABLES = {**BUILDERS, "claims": claims_table}  # claims: the paper's claims, a verdict each (docs/study.md)


def cmd_table(args: argparse.Namespace) -> int:
    builder = TABLES[args.name]
    if args.name != "table3" and not args.runs:
        raise PitError(f"{args.name} reads run folders: pass --runs <root of <mode>/<slot>/<interface>/>")
    df = builder() if args.name == "table3" else builder(args.runs)
    notes = list(args.note or [])
    if args.name == "claims":  # how each claim's metric is computed, under the table
        notes += table_notes()
    write_table(df, Path(args.out), args.name, args.profile, notes)
    print(f"{args.name}: {len(df)} rows -> {args.out}.{{md,csv,tex,json,html}}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "table",
        help="build one of the paper's tables (CSV + JSON sidecar; Markdown, LaTeX, HTML)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", choices=sorted(TABLES))
    p.add_argument(
        "--runs",
        help="root of the run folders the table reads (not needed for table3; claims: the results root holding "
        "pretrain/, diagnostics/, posttrain/)",
    )
    p.add_argument("--profile", required=True, help="name of the config profile that produced the runs")
    p.add_argument("--out", required=True, help="output path without suffix (e.g. results/tables/table1)")
    p.add_argument("--note", action="append", help="a line printed under the Markdown table (repeatable)")
    p.set_defaults(func=cmd_table)

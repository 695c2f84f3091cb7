"""`pit table`: the paper's tables from run folders, ours beside the paper's (Markdown, CSV, LaTeX).

Every table names the profile that produced it; the paper's numbers come from
pit/reporting/paper_values.yaml (cited to table and row). Runs are found by their folder layout
`<root>/<mode>/<slot>/<interface>/` (results/pretrain, results/diagnostics, results/posttrain).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pit.commands.common import check_outputs, stage_folders
from pit.errors import PitError
from pit.io import write_text
from pit.reporting import decision, study_tables
from pit.reporting.claims import Design, claims_from_seeds, parse_design, table_notes
from pit.reporting.per_seed import per_seed_table
from pit.reporting.tables import BUILDERS, RUN_NOTES, write_table

# claims: the paper's claims, a verdict each; stability, teacher_gap, frontier: the study's supporting tables; all
# from the per-seed table (docs/study.md)
TABLES = [*BUILDERS, "claims", *study_tables.BUILDERS, *decision.BUILDERS]  # decision: a profile's `decision`


def cmd_table(args: argparse.Namespace) -> int:
    name = args.name
    if name != "table3" and not args.runs:
        raise PitError(f"{name} reads run folders: pass --runs <root of <mode>/<slot>/<interface>/>")
    notes = list(args.note or [])
    stem = Path(args.out)
    outputs = [stem.with_suffix(s) for s in (".md", ".csv", ".tex", ".json", ".html", ".sha256")]
    reads_root = name in ("claims", *study_tables.BUILDERS, *decision.BUILDERS)  # --runs: the results root
    check_outputs([*outputs, f"{args.out}_seeds.csv"], stage_folders(args.runs) if reads_root else args.runs)
    if reads_root and not any(Path(p).is_dir() for p in stage_folders(args.runs)):
        raise PitError(f"--runs {args.runs}: no pretrain/, diagnostics/ or posttrain/ there; expected the results root")
    if name == "claims":  # the per-seed table beside it, and how each claim's metric is computed under it
        seeds = per_seed_table(args.runs)
        design = Design.from_dict(parse_design(args.design))
        df = claims_from_seeds(seeds, design)
        write_text(f"{args.out}_seeds.csv", seeds.to_csv(index=False))
        notes += table_notes(design)
    elif name in study_tables.BUILDERS:  # stability and teacher_gap read the pretraining runs only
        stages = ("pretrain", "posttrain") if name == "frontier" else ("pretrain",)
        df = study_tables.BUILDERS[name](per_seed_table(args.runs, stages))
    elif name in decision.BUILDERS:  # the profile's declared decision (docs/real.md)
        d = decision.parse_decision(args.decision)
        arg = args.runs if name == "final_scores" else per_seed_table(args.runs, ("pretrain",))
        df = decision.BUILDERS[name](arg, d)
        notes += decision.table_notes(name, d)
    else:
        df = BUILDERS[name]() if name == "table3" else BUILDERS[name](args.runs)
        notes += RUN_NOTES[name](args.runs) if name in RUN_NOTES else []
    write_table(df, Path(args.out), name, args.profile, notes)
    print(f"{name}: {len(df)} rows -> {args.out}.{{md,csv,tex,json,html}}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "table",
        help="build one of the paper's tables (CSV + JSON sidecar; Markdown, LaTeX, HTML)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", choices=TABLES)
    p.add_argument(
        "--runs",
        help="root of the run folders the table reads (not needed for table3; claims: the results root holding "
        "pretrain/, diagnostics/, posttrain/)",
    )
    p.add_argument("--profile", required=True, help="name of the config profile that produced the runs")
    p.add_argument("--out", required=True, help="output path without suffix (e.g. results/tables/table1)")
    p.add_argument("--note", action="append", help="a line printed under the Markdown table (repeatable)")
    p.add_argument(
        "--design",
        help="claims: the declared design as JSON, the profile's `claims` key: {primary: {mode: arm}, "
        "matched_control: arm, alpha, power} (docs/study.md)",
    )
    p.add_argument(
        "--decision",
        help="trajectory, parity, final_scores: the profile's `decision` key as JSON: {slot, arm, ref, thresholds, "
        "tasks} (docs/real.md)",
    )
    p.set_defaults(func=cmd_table)

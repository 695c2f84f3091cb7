"""`pit figure NAME`: one of the paper's figures from run folders (pit/reporting/figures.py has the list)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pit.commands.common import check_outputs, stage_folders
from pit.errors import PitError
from pit.reporting import figures

FIGURES = ("loss-curves", "drift", "transition", "side-effects", "stand-in-teachers", "claims", "parity")


def _check(args: argparse.Namespace) -> None:
    """Each figure's required flags, as one clear error."""
    if (args.name == "claims") != (args.out_dir is not None) or (args.name != "claims" and not args.out):
        raise PitError("claims writes several PNGs: pass --out-dir DIR; every other figure: --out FILE")
    if args.name == "transition":
        if not args.checkpoint or len(args.checkpoint) != len(args.label or []) or not args.prompt:
            raise PitError("transition needs --checkpoint DIR --label NAME (one label per checkpoint) and --prompt")
        return
    if not args.runs:
        raise PitError(
            f"{args.name} reads run folders: pass --runs results/pretrain (side-effects: results/posttrain, "
            "stand-in-teachers: results/teachers, claims: results)"
        )
    if args.name == "loss-curves" and args.mode is None:
        raise PitError("loss-curves needs --mode teacher or --mode scratch")


def cmd_figure(args: argparse.Namespace) -> int:
    _check(args)
    runs = stage_folders(args.runs) if args.name in ("claims", "parity") else args.runs  # --runs: the results root
    check_outputs([args.out, args.out_dir], runs, args.checkpoint)
    if args.name == "claims":  # one PNG per group of claims
        from pit.reporting.claims import parse_design

        design = parse_design(args.design)
        for png in figures.claims(Path(args.runs), Path(args.out_dir), args.profile, study=args.study, design=design):
            print(f"claims: {png}")
        return 0
    out = Path(args.out)
    root = Path(args.runs) if args.runs else None  # transition reads checkpoints, not run folders
    if args.name == "transition":
        figures.transition(args.checkpoint, args.label, args.prompt, out, args.profile)
    elif args.name == "loss-curves":
        figures.loss_curves(root, args.mode, out, args.profile)
    elif args.name == "side-effects":
        figures.side_effects(root, out, args.profile)
    elif args.name == "parity":
        from pit.reporting.decision import parse_decision

        figures.parity(root, parse_decision(args.decision), out, args.profile)
    elif args.name == "stand-in-teachers":
        figures.stand_in_teachers(root, out, args.profile)
    else:
        figures.drift(root, out, args.profile)
    print(f"{args.name}: {out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "figure",
        help="draw one of the paper's figures (PNG)",
        description=figures.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", choices=list(FIGURES))
    p.add_argument("--runs", help="root of the run folders (results/pretrain; side-effects: results/posttrain)")
    p.add_argument("--checkpoint", action="append", help="transition: a checkpoint folder (repeatable)")
    p.add_argument("--label", action="append", help="transition: a label per checkpoint")
    p.add_argument("--prompt", action="append", help="transition: a prompt (repeatable)")
    p.add_argument("--mode", choices=["teacher", "scratch"])
    p.add_argument("--profile", required=True)
    p.add_argument("--out", help="PNG file to write")
    p.add_argument("--out-dir", help="claims: folder for claims_<group>.png (--runs: the results root)")
    p.add_argument("--design", help="claims: the claims table's declared design as JSON (the profile's `claims` key)")
    p.add_argument("--decision", help="parity: the profile's `decision` key as JSON (docs/real.md)")
    p.add_argument(
        "--study",
        action="store_true",
        help="claims: also study_frontier.png and study_teacher_gap.png (study profiles)",
    )
    p.set_defaults(func=cmd_figure)

"""`pit verify [TARGET...]`: rerun what a target needs in a scratch folder and compare with the recorded numbers.

    pit verify results/tables/table2.md                 # rerun everything Table 2 needs, from the data on
    pit verify results/tables/table2.md --from diagnose # reuse the recorded checkpoints: diagnostics + table
    pit verify results/data/gpt2/train.bin              # the data stage: bit-exact

The recorded results are this checkout's (made here or pulled with `pit share pull`); the rerun runs
Snakemake on this checkout's workflow in a scratch folder (`--directory`), so nothing here changes. Each
file the rerun wrote is compared with the recorded one: data files bit-exact, numbers within the
tolerance of their kind (losses relative 1e-3, perplexities 1e-2, scores absolute 0.05, other metrics
relative 1e-2 above 1e-6; a non-finite recorded value only by the same value; pit/tracking/verify.py lists
them and why). One line per number that differs and per recorded file that is missing; exit status 1 when
any number is out of tolerance or any file missing, 0 otherwise. The profile is dvc.yaml's `vars.configfile`
unless --configfile. Run from the checkout's root (docs/reproducibility.md).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from pit.errors import PitError
from pit.tracking.share import tracked_profile
from pit.tracking.verify import compare_trees, rerun, verdict


def _scratch(args: argparse.Namespace, root: Path) -> Path:
    if args.scratch is None:  # on the checkout's file system, so --from can link the recorded files
        (root / ".snakemake").mkdir(exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="verify-", dir=root / ".snakemake"))
    scratch = Path(args.scratch).resolve()
    if scratch.exists() and any(scratch.iterdir()):
        raise PitError(f"--scratch {args.scratch!r} holds files: expected a new or empty folder")
    scratch.mkdir(parents=True, exist_ok=True)
    return scratch


def cores(text: str) -> str:
    """--cores as Snakemake takes it: 'all' or a whole number >= 1 (with 0 cores Snakemake waits forever for one);
    anything else is a PitError, before any work."""
    if text == "all":
        return text
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or n < 1:
        shown = text if n is not None else repr(text)
        raise PitError(f"--cores {shown}: expected 'all' or a whole number >= 1")
    return str(n)


def cmd_verify(args: argparse.Namespace) -> int:
    args.cores = cores(args.cores)
    root = Path.cwd()
    configfile = Path(args.configfile) if args.configfile else tracked_profile(root)
    if not (root / configfile).is_file():
        raise PitError(f"--configfile {str(configfile)!r} does not exist (expected a profile, e.g. config/config.yaml)")
    scratch = _scratch(args, root)
    try:
        written, inputs_missing = rerun(
            root, (root / configfile).resolve(), args.targets, scratch, args.rules, args.cores
        )
        diffs, done, missing = compare_trees(root, scratch, written)
    finally:
        if args.scratch is None and not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    lines, status = verdict(diffs, done, inputs_missing + missing)
    where = f"; scratch folder {scratch}" if args.keep or args.scratch else ""
    print("\n".join(lines) + where)
    return status


def register(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="rerun what a target needs in a scratch folder and compare with the recorded numbers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("targets", nargs="*", metavar="TARGET", help="Snakemake targets (default: the whole pipeline)")
    p.add_argument(
        "--from",
        dest="rules",
        nargs="+",
        default=[],
        metavar="RULE",
        help="rerun only these rules and what follows them, from the recorded outputs (e.g. diagnose)",
    )
    p.add_argument("--configfile", default=None, help="the profile (default: dvc.yaml's vars.configfile)")
    p.add_argument(
        "--scratch", default=None, help="the scratch folder, kept (default: a temporary one in .snakemake/, removed)"
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary scratch folder")
    p.add_argument("--cores", default="all", help="Snakemake --cores of the rerun (default: all)")
    p.set_defaults(func=cmd_verify)

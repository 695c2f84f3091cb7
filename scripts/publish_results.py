"""Copy a finished pipeline run's tables, figures and REPORT.md into the repository, with what produced them.

    python scripts/publish_results.py --results results --profile study --wall-time-s 3120 --out docs/results/study \
        --dvc-lock dvc.lock --summary-into docs/study.md

Writes <out>/REPORT.md, <out>/tables/*.{md,csv,tex} (the claims' per-seed table claims_seeds.csv among them),
<out>/figures/*.png, <out>/dvc.lock (with --dvc-lock: the lock `dvc commit` wrote for the run) and <out>/README.md
(the commit the run was made from, the profile, its wall time, the machine); everything else in <out> is removed, so
nothing stale stays. With --summary-into, the claims summary (pit.reporting.claims.summary_markdown) replaces the
text between `<!-- summary:start -->` and `<!-- summary:end -->` of that file, and the reading of the table by verdict
(reading_markdown) the text between `<!-- reading:start -->` and `<!-- reading:end -->`: every sentence there is
generated from the table (tests/test_claims.py checks the committed ones). REPORT.md links its figures relative
to itself, so the copied report reads the same as the original.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path


def git_commit(repo: Path) -> str:
    """The commit the run was made from, and whether its working tree had changes."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True)
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def gemm_peak() -> float:
    """FP32 GEMM FLOP/s of this machine on all its threads, as `pit bench` measures it (an n = 3072 torch.mm, best of
    3 rounds of 3): what `pit plan`'s CPU numbers are scaled by on another CPU (docs/plan.md)."""
    from pit.training.bench import gemm_arm, time_arms

    fn, flops = gemm_arm(3072)
    return flops / time_arms({"gemm": fn}, rounds=3, repeats=3)["gemm"]


def copy_outputs(results: Path, out: Path) -> list[str]:
    """REPORT.md, tables/, figures/ of `results` into `out` (replacing what was there); the copied names."""
    for stale in out.iterdir():
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    copied = []
    for sub, patterns in (("tables", ("*.md", "*.csv", "*.tex")), ("figures", ("*.png",))):
        target = out / sub
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for pattern in patterns:
            for f in sorted((results / sub).glob(pattern)):
                shutil.copy2(f, target / f.name)
                copied.append(f"{sub}/{f.name}")
    shutil.copy2(results / "REPORT.md", out / "REPORT.md")
    return ["REPORT.md", *copied]


def replace_block(text: str, name: str, body: str, doc: Path) -> str:
    """`text` with the part between `<!-- name:start -->` and `<!-- name:end -->` replaced by `body`."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in text or end not in text:
        raise SystemExit(f"{doc}: expected the markers {start} and {end}")
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"


def write_summary(tables: Path, doc: Path, out: Path) -> None:
    """Replace the summary and reading blocks of `doc` with those generated from the claims table in `tables`, and
    its `bounds` block, where it has one, with the context-free bound per arm of the per-seed table."""
    import pandas as pd

    from pit.reporting.claims import read_claims, reading_markdown
    from pit.reporting.study_tables import context_free_markdown

    table = read_claims(tables)
    link = os.path.relpath(out / "README.md", doc.parent)
    text = replace_block(doc.read_text(), "summary", generated_summary(table, link), doc)
    text = replace_block(text, "reading", reading_markdown(table).strip(), doc)
    if "<!-- bounds:start -->" in text:  # docs/study.md: the context-free bound per arm
        bounds = context_free_markdown(pd.read_csv(tables / "claims_seeds.csv")).strip()
        text = replace_block(text, "bounds", bounds, doc)
    doc.write_text(text)


def write_real(results: Path, profile: Path, doc: Path) -> None:
    """Replace the `real` block of `doc` with the real-teacher summary of the run (pit.reporting.real_teachers) made
    with the profile file `profile`."""
    import yaml

    from pit.reporting.real_teachers import real_summary

    config = yaml.safe_load(profile.read_text())
    doc.write_text(replace_block(doc.read_text(), "real", "\n".join(real_summary(config, results)), doc))


def generated_summary(table, link: str) -> str:
    """The summary block of docs/study.md: a line to the provenance, then the claims summary."""
    from pit.reporting.claims import summary_markdown

    return f"Summary of the committed run ([its provenance]({link})):\n\n{summary_markdown(table).strip()}"


def main() -> None:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results", default="results", help="the run's results folder")
    parser.add_argument("--profile", required=True)
    parser.add_argument("--wall-time-s", type=float, required=True, help="wall time of the whole run (seconds)")
    parser.add_argument("--command", default=None, help="the command that made the run (shown in README.md)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--dvc-lock", help="the dvc.lock DVC wrote for this run (copied to <out>/dvc.lock)")
    parser.add_argument("--summary-into", help="a Markdown file whose summary markers get the claims summary")
    parser.add_argument(
        "--real-into",
        action="append",
        default=[],
        help="a Markdown file whose `real` markers get the real-teacher summary (README.md, docs/real.md; repeatable)",
    )
    parser.add_argument("--note", action="append", default=[], help="one more line for README.md (repeatable)")
    parser.add_argument(
        "--run-commit",
        help="the commit the runs were made at, when the tables and REPORT.md were written again at a later one "
        "(the results folder's checkout)",
    )
    args = parser.parse_args()
    results, out = Path(args.results), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = copy_outputs(results, out)
    if args.dvc_lock:
        shutil.copy2(args.dvc_lock, out / "dvc.lock")
        files.append("dvc.lock")
    if args.summary_into:
        write_summary(results / "tables", Path(args.summary_into), out)
    for doc in args.real_into:
        write_real(results, Path(f"config/{args.profile}.yaml"), Path(doc))
    command = args.command or f"snakemake --cores all --configfile config/{args.profile}.yaml"
    minutes = args.wall_time_s / 60
    commit = git_commit(results.resolve().parent)
    made = (
        f"- Made by `{command}` from a fresh clone at commit `{args.run_commit}`; the tables, figures and REPORT.md "
        f"were written again at commit `{commit}` (`--forcerun` of the reporting rules)."
        if args.run_commit
        else f"- Made by `{command}` from a fresh clone at commit `{commit}`."
    )
    lines = [
        f"# Results of the `{args.profile}` profile",
        "",
        made,
        *(f"- {note}" for note in args.note),
        f"- Wall time: {minutes:.1f} minutes (set-up excluded), on {os.cpu_count()} cores of {cpu_model()}, "
        f"Python {platform.python_version()}.",
        f"- FP32 GEMM peak of this machine: {gemm_peak() / 1e9:.1f} GFLOP/s on {os.cpu_count()} threads (`pit bench`'s "
        "n = 3072 torch.mm, measured at publishing; `pit plan`'s CPU numbers are scaled by it, docs/plan.md).",
        f"- Published {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by `scripts/publish_results.py`.",
        "",
        "Read [REPORT.md](REPORT.md) first: it opens with the summary of the claims, then the claims table. "
        "`python scripts/check_claims.py tables/claims.csv` recomputes every claims row from "
        "`tables/claims_seeds.csv`. Files:",
        "",
        *(f"- [{name}]({name})" for name in files),
        "",
    ]
    (out / "README.md").write_text("\n".join(lines))
    print(f"{len(files)} files -> {out}")


if __name__ == "__main__":
    main()

"""`pit verify`: rerun what a target needs in a scratch folder and compare its numbers with the recorded ones.

The recorded results are the checkout's own (made here, or pulled: `pit share pull`). The rerun is Snakemake on the
checkout's workflow with `--directory SCRATCH`, so nothing of the checkout is touched: by default every job the
target needs runs again from nothing; `--from RULE...` puts the recorded outputs the target needs into the scratch
folder (hard links, modification times kept: the DAG order of a checkout that ran, or pulled with `pit share pull`)
and reruns only those rules and what follows them (Snakemake's `--forcerun`): `--from diagnose` reruns the
diagnostics of the recorded checkpoints and the table.

Every file the rerun wrote is compared with the recorded file of the same path, by kind (`TOLERANCES`):
- data (the corpus shards, tokenizers and token files: resources/, results/data/, results/tokenizers/):
  bit-exact, by sha256; these are deterministic on any machine;
- the numbers of JSON, JSON-lines and CSV files, by the name of their key or column: integers exact; losses and
  cross-entropies (`*loss*`, `*_bits`) relative 1e-3; perplexities relative 1e-2 (exp of a loss); scores and
  agreement fractions (pass@k, accuracy, `*agreement*`) absolute 0.05; Delta_TI and the anchor metrics (cosines,
  Procrustes errors, angles) relative 1e-2 with an absolute floor at the float32 rounding bound of the widest
  interface (`DELTA_TI_FLOOR`, `ANCHOR_FLOOR`: PIT's structural zeros are rounding noise that differs between
  CPUs); every other number (gradients, KL, side effects) relative 1e-2 with an absolute floor of 1e-6;
  machine-dependent numbers (`runtime_s`, `time_s`, `tokens_per_s`, `peak_memory_mb`) and provenance (a score
  file's `date`, `commit`, `git_hash`) are not compared; text must be equal. Across CPUs,
  float32 training differs in the last bits of each step (reduction order, vector width), which a few dozen steps
  amplify to ~1e-5 relative in a loss; the tolerances leave a margin of two orders of magnitude and still catch a
  change of code, data or settings.
- a recorded value that is not finite (inf, -inf, NaN) matches only the same value in the rerun: no tolerance
  covers it (|rerun - inf| <= abs + rel * inf would accept any number).
- a file the rerun wrote that the checkout does not hold (deleted, or never made or pulled) is a failure: there is
  nothing to compare it with, so nothing was verified.
- not compared: renderings of compared files (tables' .md/.tex/.html/.sha256, figures, REPORT.md), checkpoint
  folders (their effect is in the losses, diagnostics and scores made from them), logs, run.json and the MLflow
  export (run ids, times, commits), generated samples (their scores are compared).
"""

from __future__ import annotations

import csv
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from pit.core.rounding import delta_ti_bound, relative_bound
from pit.errors import PitError
from pit.io import read_json, read_jsonl, sha256_file
from pit.progress import Steps
from pit.tracking.share import JobLines, snakemake
from pit.tracking.summary import csv_rows


@dataclass(frozen=True)
class Tolerance:
    """|rerun - recorded| <= abs + rel * |recorded| for the numbers whose key matches `pattern` (None: not compared)."""

    kind: str
    pattern: str
    rel: float | None
    abs: float | None


# PIT's structural zeros (its Delta_TI and anchor metrics, TT's polar metrics) are float32 rounding noise, different
# on every CPU: compared absolutely, with the float32 bounds (pit/core/rounding.py) at the widest token interface the
# profiles train (Cerebras-GPT 1.3B, d = 2,048; kappa(T) = 1) as floors. A non-zero value (TT's Delta_TI ~1e3, raw
# cosine ~0.5) is still compared relatively.
WIDEST_DIM = 2048
DELTA_TI_FLOOR = delta_ti_bound(WIDEST_DIM)  # 1.7e-2
ANCHOR_FLOOR = relative_bound(WIDEST_DIM, 3)  # 3.2e-5

TOLERANCES = (
    Tolerance("machine", r"runtime_s|time_s|tokens_per_s|peak_memory_mb|.*_seconds|wall.*", None, None),
    Tolerance("provenance", r"date|commit|git_hash", None, None),  # when and by which code: a score file's protocol
    Tolerance("rounding", r".*delta_ti.*", 1e-2, DELTA_TI_FLOOR),
    Tolerance("rounding", r".*(cosine|procrustes|angle).*", 1e-2, ANCHOR_FLOOR),
    Tolerance("perplexity", r".*ppl.*", 1e-2, 0.0),
    Tolerance("loss", r".*loss.*|.*_bits|.*bits_.*|ce_gap", 1e-3, 1e-6),
    Tolerance("score", r".*pass_at_\d+.*|.*accuracy.*|.*agreement.*|.*exact_match.*", 0.0, 0.05),
    Tolerance("metric", r".*", 1e-2, 1e-6),
)
DATA_PREFIXES = ("resources/", "results/data/", "results/tokenizers/")
SKIP_PREFIXES = ("results/logs/", "results/mlflow/", "results/figures/", ".snakemake/", "mlruns/")
SKIP_NAMES = re.compile(r"run\.json|REPORT\.md|mlflow\.db.*|.*\.samples\.jsonl")
CHECKPOINTS = {"final", "merged", "adapter", "checkpoints"}
NUMERIC_SUFFIXES = (".json", ".jsonl", ".csv")


@dataclass
class Difference:
    """One number (or file) that differs between the record and the rerun."""

    path: str
    where: str
    recorded: object
    rerun: object
    kind: str
    within: bool

    def line(self) -> str:
        verdict = "within tolerance" if self.within else "OUT OF TOLERANCE"
        if isinstance(self.recorded, float) and isinstance(self.rerun, float):
            gap = abs(self.rerun - self.recorded)
            rel = gap / abs(self.recorded) if self.recorded else math.inf
            shown = f"recorded {self.recorded:.6g}, rerun {self.rerun:.6g} (diff {gap:.2g}, rel {rel:.2g})"
        else:
            shown = f"recorded {self.recorded!r}, rerun {self.rerun!r}"
        return f"{self.path} {self.where}: {shown} [{self.kind}] {verdict}"


def tolerance(key: str) -> Tolerance:
    """The tolerance of a number named `key` (a JSON key or CSV column)."""
    return next(t for t in TOLERANCES if re.fullmatch(t.pattern, key))


def compare_number(key: str, recorded, rerun) -> tuple[str, bool] | None:
    """(kind, within tolerance) when two values differ; None when they are equal or not compared."""
    if recorded == rerun or (_nan(recorded) and _nan(rerun)):
        return None
    tol = tolerance(key)
    if tol.rel is None:
        return None
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (recorded, rerun))
    if not numbers:
        return "text", False
    if isinstance(recorded, int) and isinstance(rerun, int):
        return "count", False
    if not (math.isfinite(recorded) and math.isfinite(rerun)):  # only the same non-finite value matches (above)
        return f"{tol.kind}: not finite", False
    return tol.kind, abs(rerun - recorded) <= tol.abs + tol.rel * abs(recorded)


def _nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _leaves(value, where: str = "", key: str = ""):
    """(location, key, value) of every leaf of a JSON value; `key` is the nearest dict key (a list keeps it)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{where}.{k}" if where else str(k), str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{where}[{i}]", key)
    else:
        yield where, key, value


def _cell(text: str):
    """A CSV cell as int, float or text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _records(path: Path) -> list[tuple[str, str, object]]:
    """(location, key, value) of every value of a JSON, JSON-lines or CSV file."""
    if path.suffix == ".csv":
        out = []
        for i, row in enumerate(csv.DictReader(csv_rows(path)), 1):
            cells = {col: _cell(v) for col, v in row.items()}
            name = " ".join(v[:24] for v in cells.values() if isinstance(v, str) and v)[:48]
            out += [(f"row {i} ({name}) {col}", col, v) for col, v in cells.items()]
        return out
    if path.suffix == ".jsonl":
        return [(f"line {i} {w}", k, v) for i, row in enumerate(read_jsonl(path), 1) for w, k, v in _leaves(row)]
    return list(_leaves(read_json(path)))  # a damaged record is one PitError naming it


def compare_file(rel: str, recorded: Path, rerun: Path) -> list[Difference]:
    """The differences between a recorded file and its rerun, by the kinds above ([] when equal or not compared)."""
    if rel.startswith(DATA_PREFIXES):
        if sha256_file(recorded) == sha256_file(rerun):
            return []
        return [Difference(rel, "sha256", _short(recorded), _short(rerun), "data: bit-exact", False)]
    ours, theirs = _records(recorded), _records(rerun)
    if [k for _, k, _ in ours] != [k for _, k, _ in theirs]:  # other keys, columns or lengths
        return [Difference(rel, "layout", f"{len(ours)} values", f"{len(theirs)} values", "text", False)]
    out = []
    for (where, key, a), (_, _, b) in zip(ours, theirs, strict=True):
        verdict = compare_number(key, a, b)
        if verdict is not None:
            out.append(Difference(rel, where, a, b, *verdict))
    return out


def _short(path: Path) -> str:
    return sha256_file(path)[:12]


def compared(rel: str) -> bool:
    """Whether a file of the rerun is compared (data, or numbers) rather than left out (see the module docstring)."""
    parts = Path(rel).parts
    if rel.startswith(SKIP_PREFIXES) or SKIP_NAMES.fullmatch(parts[-1]) or CHECKPOINTS & set(parts[:-1]):
        return False
    return rel.startswith(DATA_PREFIXES) or rel.endswith(NUMERIC_SUFFIXES)


def verdict(diffs: list[Difference], done: list[str], missing: list[str]) -> tuple[list[str], int]:
    """(the lines `pit verify` prints: one per difference and one per recorded file that is missing, then a summary;
    the exit status: 1 when a difference is out of tolerance or a file is missing, else 0)."""
    lines = [d.line() for d in diffs]
    lines += [f"{rel}: MISSING from this checkout (the rerun wrote it; deleted, or never made or pulled here): not "
              "verified" for rel in missing]  # fmt: skip
    out = sum(not d.within for d in diffs)
    gone = f", {len(missing)} recorded files missing" if missing else ""
    lines.append(f"verified {len(done)} files: {len(diffs)} differences, {out} out of tolerance{gone}")
    return lines, int(bool(out or missing))


def compare_trees(recorded: Path, rerun: Path, files: list[str]) -> tuple[list[Difference], list[str], list[str]]:
    """(differences, files compared, files with no record) of the rerun's `files` (paths relative to both roots)."""
    diffs, done, missing = [], [], []
    for rel in sorted(f for f in files if compared(f)):
        if not (recorded / rel).is_file():
            missing.append(rel)
            continue
        diffs += compare_file(rel, recorded / rel, rerun / rel)
        done.append(rel)
    return diffs, done, missing


# --- the rerun ----------------------------------------------------------------------------------------------------

JOB = re.compile(r"^\s*(?:local)?rule (\w+):\n(?:\s+\w+: .*\n)*?\s+output: (.*)\n", re.M)


def _snakemake(root: Path, configfile: Path, directory: Path | None, *args: str, on_line=None) -> str:
    proc = snakemake(root, *args, configfile=configfile, directory=directory, tail=8, on_line=on_line)
    return proc.stdout + proc.stderr


def target_jobs(root: Path, configfile: Path, targets: list[str]) -> dict[str, list[str]]:
    """{rule: [outputs]} of every job the targets need (a dry run with --forceall in the checkout)."""
    jobs: dict[str, list[str]] = {}
    for rule, outputs in JOB.findall(_snakemake(root, configfile, None, "-n", "--forceall", *targets)):
        jobs.setdefault(rule, []).extend(p.strip() for p in outputs.split(","))
    if not jobs:
        raise PitError(f"snakemake plans no job for {' '.join(targets)}: expected outputs of the workflow")
    return jobs


def _link(src: str, dst: str) -> None:
    """A hard link (the rerun replaces files, never writes into them: pit writes atomically, Snakemake removes a
    job's outputs first), else a copy; modification times are the recorded ones either way."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _seed(root: Path, scratch: Path, outputs: list[str]) -> list[str]:
    """The recorded outputs (files, folders) in the scratch folder, linked (`_link`); those the checkout lacks."""
    missing = []
    for rel in outputs:
        src, dst = root / rel, scratch / rel
        if not src.exists():
            missing.append(rel)
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=True, copy_function=_link)
        else:
            _link(str(src), str(dst))
    return missing


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """{relative path: (mtime_ns, size)} of every file under `folder`."""
    files = (p for p in folder.rglob("*") if p.is_file())
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size) for p in files}


def rerun(
    root: Path, configfile: Path, targets: list[str], scratch: Path, rules: list[str], cores: str
) -> tuple[list[str], list[str]]:
    """Rerun the targets in `scratch` (everything they need, or from `rules` on with the recorded inputs), each job
    named on stderr as Snakemake finishes it (`JobLines`): (the files, relative paths, the rerun wrote; the recorded
    inputs it needs that the checkout lacks, when there are any: then nothing is rerun). The recorded outputs of
    `rules` themselves may be missing: they are made again, and the comparison names them."""
    if rules:
        jobs = target_jobs(root, configfile, targets)
        unknown = sorted(set(rules) - set(jobs))
        if unknown:
            raise PitError(f"--from {' '.join(unknown)}: not a rule the targets need (they need: {', '.join(jobs)})")
        remade = {p for rule in rules for p in jobs[rule]}
        missing = _seed(root, scratch, [p for outputs in jobs.values() for p in outputs])
        if set(missing) - remade:
            return [], sorted(set(missing) - remade)
    before = _snapshot(scratch)
    force = ["--forcerun", *rules] if rules else []
    steps = Steps("pit verify", unit="job", bar=True)  # each job as Snakemake finishes it, on stderr
    try:
        _snakemake(root, configfile, scratch, "--cores", cores, *force, "--", *targets, on_line=JobLines(steps))
    finally:
        steps.close()
    after = _snapshot(scratch)
    return sorted(rel for rel, stat in after.items() if before.get(rel) != stat), []

"""`pit share push|pull`: the results of a pipeline run to a DVC remote and back, in one step each way.

DVC records a stage's outputs (hashes in dvc.lock, files in .dvc/cache) only when `dvc repro` or `dvc commit`
runs; the pipeline is run with Snakemake, so after it `dvc push` finds nothing of the new outputs in the cache
("Everything is up to date"). A pulled clone has the files but not Snakemake's view of them: DVC writes them in no
particular order (modification times do not follow the DAG) and there is no .snakemake/ metadata, so
`snakemake -n` plans a full rerun; and the MLflow runs travel as results/mlflow/runs.jsonl, not as a store.

- `push`: refuses while Snakemake has jobs left (the outputs would not match the code and config), then writes
  OUT_MARK (the folder's own path) into each folder output, `dvc commit --force` (records every stage's outputs in
  dvc.lock and the cache) and `dvc push`.
- `pull`: refuses in one line when the remote lacks objects this dvc.lock records (`check_remote_holds_lock`: the
  checkout's dvc.lock is not the one pushed there), then `dvc pull`, then checks every pulled file against the hash
  dvc.lock records for it (`lock_problems`: DVC checks a file output's hash as it fetches it, but not the files of a
  folder output, and its `dvc status` trusts the hashes it noted as it wrote them) and each folder's OUT_MARK
  against its path (dvc.lock's folder entries swapped), removing a damaged cache object and DVC's copy of it (so a
  pull from the repaired remote fetches it), then refuses unless `dvc status` is clean (the pulled outputs match
  this checkout's code and config), then `snakemake --touch --forceall` (marks them up to date, in DAG order, with
  Snakemake's metadata) and imports results/mlflow/runs.jsonl into the profile's MLflow store (`pit mlflow sync
  results/mlflow`).

The profile is the one DVC tracks (`vars.configfile` in dvc.yaml). Commands run from the checkout's root.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

from pit.errors import PitError
from pit.io import load_yaml
from pit.progress import Steps
from pit.tracking.transfer import EXPORT_FILE, import_runs

LOCAL_PROFILE = "workflow/profiles/local"
OUT_MARK = ".pit-out-path"  # in each folder output `push` records: the folder's path (which DVC hashes with it)
EXPORT = Path("results/mlflow") / EXPORT_FILE


def tracked_profile(root: Path) -> Path:
    """The config file DVC tracks: `configfile` under `vars` in dvc.yaml (docs/reproducibility.md)."""
    dvc_yaml = root / "dvc.yaml"
    if not dvc_yaml.is_file():
        raise PitError(f"no dvc.yaml in {str(root)!r}; expected the root of a pit-repro checkout (run from there)")
    for entry in (load_yaml(dvc_yaml.read_text()) or {}).get("vars", []):
        if isinstance(entry, dict) and "configfile" in entry:
            return Path(entry["configfile"])
    raise PitError(f"{str(dvc_yaml)!r} names no profile: expected `configfile` under `vars`")


class JobLines:
    """Snakemake's log, fed line by line (`snakemake(on_line=...)`), as one line per finished job on `steps`
    (pit.progress.Steps): `[k/n] rule first-output (+m more)`, a failed job as `rule FAILED`; the job count once
    Snakemake has planned the run (its `Job stats` table)."""

    RULE = re.compile(r"^(?:local)?rule (\w+):$")
    FIELD = re.compile(r"^\s+(output|jobid): (.*)$")
    TOTAL = re.compile(r"^total\s+(\d+)$")
    FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")
    DONE = re.compile(r"^(\d+) of (\d+) steps \(.*\) done$")
    FAILED = re.compile(r"^Error in rule (\w+):$")

    def __init__(self, steps):
        self.steps, self.jobs, self.finished, self.current = steps, {}, [], {}

    def __call__(self, line: str) -> None:
        if m := self.RULE.match(line):
            self.current = {"rule": m[1]}
        elif (m := self.FIELD.match(line)) and self.current:
            self.current[m[1]] = m[2]
            if m[1] == "jobid":
                self.jobs[m[2]] = self.current
        elif (m := self.TOTAL.match(line)) and self.steps.total is None:
            self.steps.set_total(int(m[1]))
            self.steps.line(f"snakemake plans {m[1]} jobs")
        elif m := self.FINISHED.match(line):
            self.finished.append(self.jobs.get(m[1], {"rule": m[2]}))
        elif (m := self.DONE.match(line)) and self.finished:
            job = self.finished.pop(0)
            outputs = [o.strip() for o in job.get("output", "").split(",") if o.strip()]
            more = f" (+{len(outputs) - 1} more)" if len(outputs) > 1 else ""
            self.steps.line(f"{job['rule']} {outputs[0] if outputs else ''}{more}".strip(), int(m[1]) - self.steps.n)
        elif m := self.FAILED.match(line):
            self.steps.line(f"{m[1]} FAILED")


def _streamed(cmd: list[str], cwd: Path, on_line) -> subprocess.CompletedProcess:
    """Run `cmd` with its stderr merged into its stdout, passing each line to `on_line` as it comes."""
    lines = []
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            lines.append(line)
            on_line(line.rstrip("\n"))
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(lines), "")


def snakemake(
    root: Path,
    *args: str,
    configfile: Path | None = None,
    directory: Path | None = None,
    tail: int = 5,
    on_line=None,
) -> subprocess.CompletedProcess:
    """Snakemake (this interpreter's) on the checkout's workflow with the local profile and `configfile` (default: the
    tracked profile), in `directory` (default: the checkout); a failure is a PitError with the last `tail` lines.
    With `on_line`, each line of its log goes there as Snakemake writes it (e.g. `JobLines`)."""
    cmd = [sys.executable, "-m", "snakemake", "--profile", LOCAL_PROFILE, "--configfile"]
    cmd.append(str(configfile or tracked_profile(root)))
    if directory is not None:
        cmd += ["--snakefile", str(root / "workflow" / "Snakefile"), "--directory", str(directory)]
    if on_line is None:
        proc = subprocess.run([*cmd, *args], cwd=root, capture_output=True, text=True)
    else:
        proc = _streamed([*cmd, *args], root, on_line)
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()[-tail:]
        raise PitError(f"snakemake {' '.join(args)} failed: {' | '.join(lines)}")
    return proc


def pending_jobs(root: Path) -> int:
    """How many jobs `snakemake -n` plans (0: every output is up to date)."""
    out = snakemake(root, "-n")
    text = out.stdout + out.stderr
    if "Nothing to be done" in text:
        return 0
    total = re.search(r"^total\s+(\d+)", text, re.M)
    return int(total[1]) if total else 1


def _repo(root: Path):
    """The DVC repository at `root` (the checkout root: dvc.yaml and .dvc/ there), else a PitError."""
    from dvc.repo import Repo

    tracked_profile(root)  # one line when root has no dvc.yaml
    if not (root / ".dvc").is_dir():
        raise PitError(f"no .dvc folder in {str(root)!r}; expected the root of a pit-repro checkout (a DVC repository)")
    return Repo(str(root))


def _dvc(what: str, call):
    """A DVC API call; its errors are one line (PitError)."""
    from dvc.exceptions import DvcException

    try:
        return call()
    except DvcException as err:
        raise PitError(f"dvc {what}: {' '.join(str(err).split())}") from None


def push(root: Path, remote: str | None = None) -> dict:
    """Record the pipeline's outputs and push them: {'pushed': files sent, 'lock_changed': dvc.lock differs from
    git HEAD (commit it, or a clone pulls the old record)}. Each phase is a line on stderr as it starts."""
    tracked_profile(root)  # not a checkout's root: one error line, before any phase line
    steps = Steps("pit share push", total=3, unit="phase")
    steps.line("snakemake -n: is every output up to date?", 1)
    pending = pending_jobs(root)
    if pending:
        raise PitError(
            f"snakemake -n plans {pending} jobs: the outputs are not up to date with this checkout's code and config; "
            "run the pipeline first (snakemake --profile workflow/profiles/local)"
        )
    with _repo(root) as repo:
        steps.line("dvc commit --force: every stage's outputs into dvc.lock and DVC's cache", 1)
        pushing = f"dvc push: to the remote {remote or '(default)'}"
        pushed = record_and_push(root, repo, remote, lambda: steps.line(pushing, 1))
    steps.close()
    diff = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "dvc.lock"], cwd=root, capture_output=True)
    return {"pushed": pushed, "lock_changed": diff.returncode != 0}


def mark_folders(root: Path, repo) -> list[str]:
    """Write OUT_MARK into each folder output of the pipeline (dvc.yaml's outs that are folders here): the folder's
    own path, which DVC hashes into its listing, so the pulled content says which path it was pushed as
    (`_out_problems` compares). Returns the folders marked."""
    from pit.io import write_text

    marked = []
    for out in (out for stage in repo.index.stages for out in stage.outs):
        rel = Path(out.fs_path).relative_to(root.resolve()).as_posix()
        folder = root / rel
        if folder.is_dir() and not folder.is_symlink():
            mark = folder / OUT_MARK
            if not mark.is_file() or mark.read_text() != f"{rel}\n":  # (a folder copied from another path: replaced)
                write_text(mark, f"{rel}\n", replaces=lambda old: True)
            marked.append(rel)
    return marked


def record_and_push(root: Path, repo, remote: str | None, pushing=lambda: None) -> int:
    """Mark the folder outputs (`mark_folders`), record every stage's outputs in dvc.lock and the cache (`dvc commit
    --force`) and push them to `remote` (after `pushing()`); returns the files pushed."""
    mark_folders(root, repo)
    _dvc("commit", lambda: repo.commit(None, force=True))
    pushing()
    return _dvc("push", lambda: repo.push(remote=remote))


def _md5(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _drop_damaged(path: Path, digest: str, cache_path) -> str:
    """When DVC's cache object for `digest` does not hold content of that md5 (a damaged remote's copy, which DVC
    keeps and checks out again on every later pull), remove it and `path` when `path` is the copy DVC checked out
    of it (the same bytes): a pull from the repaired remote then fetches and writes it again. Returns what was
    done, for the problem's line."""
    cached = Path(cache_path(digest))
    if not cached.is_file() or _md5(cached) == digest:
        return ""
    copy = path.is_file() and not path.is_symlink() and path.read_bytes() == cached.read_bytes()
    cached.unlink()
    if copy:
        path.unlink()
    where = "DVC's cache and from here" if copy else "DVC's cache"
    return f"; the damaged copy was removed from {where}: pull again once the remote holds the recorded content"


def _out_problems(root: Path, out: dict, cache_path) -> list[str]:
    """One line per file of one dvc.lock output (`out`: path, md5; a folder's md5 ends in .dir and names its listing
    in the cache, [{relpath, md5}]) that is missing here or whose md5 differs from the recorded one, and for a
    folder whose OUT_MARK names another path (dvc.lock's entries swapped or edited). A damaged cache object is
    removed (`_drop_damaged`)."""
    path, md5 = out.get("path"), out.get("md5")
    if not isinstance(md5, str):
        return []  # another hash kind, or not cached: DVC did not pull it
    if not md5.endswith(".dir"):
        files = [(path, md5)]
    else:
        listing = Path(cache_path(md5))
        if not listing.is_file() or _md5(listing) != md5.removesuffix(".dir"):
            dropped = _drop_damaged(root / path, md5.removesuffix(".dir"), lambda _: listing)
            return [f"{path}: DVC's listing of the folder ({md5}) is missing or damaged in the cache: its files cannot "
                    f"be checked against dvc.lock{dropped}"]  # fmt: skip
        files = [(f"{path}/{entry['relpath']}", entry["md5"]) for entry in json.loads(listing.read_text())]
    problems = []
    for rel, digest in files:
        if not (root / rel).is_file():
            problems.append(f"{rel}: missing after the pull (dvc.lock records md5 {digest})")
        elif (found := _md5(root / rel)) != digest:
            problems.append(f"{rel}: md5 {found} differs from {digest}, the one dvc.lock records (the remote's copy "
                            f"was changed or damaged){_drop_damaged(root / rel, digest, cache_path)}")  # fmt: skip
    if not problems and f"{path}/{OUT_MARK}" in dict(files):  # (a folder pushed by `dvc push` alone has none)
        named = (root / path / OUT_MARK).read_text().strip()
        if named != path:
            problems.append(f"{path}: dvc.lock records for it the folder pushed as {named!r} ({md5}): its "
                            "folders' entries are swapped or edited (check out dvc.lock as pushed)")  # fmt: skip
    return problems


def lock_problems(root: Path, cache_path) -> list[str]:
    """Every pulled file checked against dvc.lock (`_out_problems`); `cache_path(md5)`: where DVC's cache keeps an
    object. Hashing the pulled outputs costs about as much as reading them (seconds per GB)."""
    lock = load_yaml((root / "dvc.lock").read_text()) if (root / "dvc.lock").is_file() else None
    stages = (lock or {}).get("stages") or {}
    return [
        line
        for stage in stages.values()
        for out in stage.get("outs", [])
        for line in _out_problems(root, out, cache_path)
    ]


def _pull(repo, remote: str | None) -> dict:
    """`dvc pull`; outputs it could not write (it drops a fetched file whose hash differs) are left to
    `lock_problems`, which names each, rather than being one error for all."""
    from dvc.exceptions import CheckoutError

    try:
        return repo.pull(remote=remote)
    except CheckoutError:
        return {}


def _lock_objects(root: Path, pushed: set[str]) -> dict[tuple[str, str], str]:
    """{(hash kind, md5): output path} of every output dvc.lock records whose path is in `pushed` (a file's md5, a
    folder's listing `.dir`); hash kind `md5` (DVC 3's, dvc.lock's `hash: md5`) or `md5-dos2unix` (an entry without
    one, DVC 2's)."""
    lock = load_yaml((root / "dvc.lock").read_text()) if (root / "dvc.lock").is_file() else None
    outs = [out for stage in ((lock or {}).get("stages") or {}).values() for out in stage.get("outs", [])]
    recorded = [o for o in outs if isinstance(o.get("md5"), str) and o.get("path") in pushed]
    return {(o.get("hash", "md5-dos2unix"), o["md5"]): o.get("path", "?") for o in recorded}


def _on_remote(repo, remote: str | None, kind: str, oids: list[str]) -> set[str]:
    """The objects of `oids` (hash kind `kind`) whose file the remote holds, by existence alone: DVC's `oids_exist`
    on a local remote verifies each object and deletes one whose content does not match its name, so a damaged copy
    would vanish from the remote before the pull's check against dvc.lock could name it (exit 1)."""
    odb = repo.cloud.get_remote_odb(name=remote, command="pull", hash_name=kind)
    there = odb.fs.exists([odb.oid_to_path(oid) for oid in oids])
    return {oid for oid, held in zip(oids, there) if held}


def lock_commit(root: Path) -> str:
    """dvc.lock's commit in words: the short hash of the last commit that changed it, and whether it has changes
    since."""
    git = ["git", "-C", str(root)]
    last = subprocess.run([*git, "log", "-1", "--format=%h", "--", "dvc.lock"], capture_output=True, text=True)
    if last.returncode != 0 or not last.stdout.strip():
        return "not committed"
    dirty = subprocess.run([*git, "diff", "--quiet", "HEAD", "--", "dvc.lock"], capture_output=True).returncode
    return f"commit {last.stdout.strip()}" + (", with uncommitted changes" if dirty else "")


def check_remote_holds_lock(root: Path, repo, remote: str | None) -> None:
    """Before a pull: every object dvc.lock records must be on the remote. When some are not, this checkout's
    dvc.lock is not the one pushed there (another run's, or one never pushed): one PitError line naming the remote,
    dvc.lock's commit and what to do, in place of one "missing or damaged" line per output after the pull."""
    pushed = {o.def_path for stage in repo.index.stages for o in stage.outs if o.use_cache and o.can_push}
    objects = _lock_objects(root, pushed)  # (an output with `cache: false` or `push: false` is never on a remote)
    missing = []
    for kind in sorted({k for k, _ in objects}):
        oids = [md5 for k, md5 in objects if k == kind]
        found = _dvc("pull", partial(_on_remote, repo, remote, kind, oids))
        missing += [objects[kind, md5] for md5 in oids if md5 not in found]
    if missing:
        name = remote or repo.config["core"].get("remote")
        url = repo.config["remote"].get(name, {}).get("url", "?")
        raise PitError(
            f"the remote {name!r} ({url}) lacks {len(missing)} of the {len(objects)} outputs this checkout's dvc.lock "
            f"({lock_commit(root)}) records (first: {missing[0]}): this dvc.lock does not match what was pushed there; "
            "check out the commit whose dvc.lock was pushed, or run `pit share push` in the run's checkout and commit "
            "its dvc.lock"
        )


def pull(root: Path, remote: str | None = None, uri: str | None = None) -> dict:
    """Pull the outputs dvc.lock records, check them against it, mark them up to date for Snakemake and import the
    MLflow runs: {'fetched': files, 'imported': runs, 'present': runs already in the store, 'problems': []}; with
    'problems' (one line per file that is missing or differs from dvc.lock) nothing is marked or imported. Each
    phase is a line on stderr as it starts (pit.progress.Steps)."""
    steps = Steps("pit share pull", total=5, unit="phase")
    with _repo(root) as repo:
        check_remote_holds_lock(root, repo, remote)
        steps.line(f"dvc pull: the outputs dvc.lock records, from the remote {remote or '(default)'}", 1)
        result = _dvc("pull", lambda: _pull(repo, remote))
        steps.line("checking every pulled file against dvc.lock", 1)
        problems = lock_problems(root, repo.cache.local.oid_to_path)
        if problems:
            steps.close()
            return {"fetched": result.get("stats", {}).get("fetched", 0), "imported": 0, "present": 0,
                    "problems": problems}  # fmt: skip
        steps.line("dvc status: the pulled outputs against this checkout's code and config", 1)
        changed = _dvc("status", lambda: repo.status())
    if changed:
        raise PitError(
            f"after the pull, dvc status lists {', '.join(sorted(changed))}: the pulled outputs do not match this "
            "checkout's code or config (check out the commit that recorded dvc.lock); not marking them up to date"
        )
    steps.line("snakemake --touch --forceall: every output up to date, in the DAG's order", 1)
    snakemake(root, "--touch", "--forceall", "--cores", "1")
    imported = present = 0
    profile = load_yaml((root / tracked_profile(root)).read_text()) or {}
    settings = profile.get("mlflow") or {}
    if settings.get("enabled", True) and (root / EXPORT).is_file():
        steps.line(f"importing the MLflow runs of {EXPORT}", 1)
        imported, present = import_runs(root / EXPORT, uri or settings.get("tracking_uri"))
    else:
        steps.line("no MLflow runs to import (MLflow off, or no export)", 1)
    steps.close()
    fetched = result.get("stats", {}).get("fetched", 0)
    return {"fetched": fetched, "imported": imported, "present": present, "problems": []}

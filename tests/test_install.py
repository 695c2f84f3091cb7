"""The checkout guard (docs/install.md): a workflow never runs another clone's different `pit` code.

An editable install binds an interpreter to one folder; a second clone run with that interpreter would execute the
first clone's code while Snakemake and DVC record the second clone's files. Both the Snakefile (at parse time) and
every `pit` command a job runs (through PIT_CHECKOUT) compare the checkout with the imported package.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import ROOT

from pit.checkout import CHECKOUT_ENV, checkout_mismatch, code_digest, package_dir


def clone(dest: Path, edit: bool) -> Path:
    """The workflow, configs and package copied to `dest`; with `edit`, its pit/ holds one changed line."""
    for name in ("workflow", "config", "pit"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if edit:
        init = dest / "pit" / "__init__.py"
        init.write_text(init.read_text() + "\n# another clone's change\n")
    return dest


def test_the_imported_package_is_this_checkout():
    assert package_dir() == (ROOT / "pit").resolve()
    assert checkout_mismatch(ROOT) is None


def test_identical_copy_passes_and_changed_copy_is_refused(tmp_path):
    same = clone(tmp_path / "same", edit=False)
    other = clone(tmp_path / "other", edit=True)
    assert code_digest(same / "pit") == code_digest(package_dir())
    assert checkout_mismatch(same) is None
    assert checkout_mismatch(tmp_path) is None  # a run folder with no pit/ of its own uses the installed one
    reason = checkout_mismatch(other)
    assert str(other.resolve()) in reason and str(package_dir()) in reason
    assert "\n" not in reason and "scripts/setup.sh" in reason


def pit_arch(checkout: Path) -> subprocess.CompletedProcess:
    """`pit arch` as a job of the workflow of `checkout` runs it."""
    env = os.environ | {CHECKOUT_ENV: str(checkout)}
    return subprocess.run([sys.executable, "-m", "pit", "arch"], capture_output=True, text=True, env=env)


def test_pit_refuses_a_job_of_another_checkout(tmp_path):
    other = clone(tmp_path / "other", edit=True)
    proc = pit_arch(other)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"pit arch: error: this workflow's checkout is {other}")
    ok = pit_arch(clone(tmp_path / "same", edit=False))
    assert ok.returncode == 0 and "scratch-133m" in ok.stdout


def test_snakemake_refuses_to_plan_another_checkouts_workflow(tmp_path):
    """The workflow of a clone whose pit/ differs from the imported one stops before planning any job (run from a
    folder outside the clone: `python -m` would put the working directory, and so a clone's own pit/, first)."""
    other = clone(tmp_path / "other", edit=True)
    cmd = [sys.executable, "-m", "snakemake", "-n", "--snakefile", str(other / "workflow/Snakefile")]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=os.environ | {"HF_HUB_OFFLINE": "1"})
    assert proc.returncode != 0
    assert f"this workflow's checkout is {other}" in proc.stderr + proc.stdout
    assert "Job stats" not in proc.stdout + proc.stderr
    same = clone(tmp_path / "same", edit=False)
    cmd = [sys.executable, "-m", "snakemake", "-n", "--snakefile", str(same / "workflow/Snakefile")]
    ok = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=os.environ | {"HF_HUB_OFFLINE": "1"})
    assert ok.returncode == 0 and "Job stats" in ok.stdout + ok.stderr


def test_jobs_run_snakemakes_own_pit_without_an_activated_environment(tmp_path):
    """The README's main command, `.venv/bin/snakemake --cores all`, in a shell where no `pit` is on PATH: each
    job's `pit` comes from the interpreter Snakemake runs on (the Snakefile puts its folder first on PATH)."""
    bare = os.path.dirname(shutil.which("bash"))
    assert shutil.which("pit", path=bare) is None
    env = os.environ | {"HF_HUB_OFFLINE": "1", "PATH": bare}
    target = "results/tables/table3.csv"
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", "--snakefile", str(ROOT / "workflow/Snakefile"), target]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / target).read_text().startswith("model,layers,d_model,n_heads")

"""What a rule's job needs besides its files: its shell command's pieces, its resources, its environment."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path


def json_arg(value) -> str:
    """A config value as one shell-quoted JSON argument: `--spec {params.spec}`."""
    return shlex.quote(json.dumps(value, sort_keys=True))


def logged(command: str) -> str:
    """A rule's shell command with its output to {log}; on failure the log's last line (the error) is shown."""
    return f"{command} > {{log}} 2>&1 || (tail -n 1 {{log}} >&2; exit 1)"


def name_pattern(names) -> str:
    """A wildcard constraint matching exactly `names` (and nothing when empty)."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


def job_resources(res: dict, runtime=None) -> dict:
    """Snakemake `resources:` of a job from a config `resources` section ({threads, gpus, mem_mb,
    runtime, partition}): `gpus` for local runs, and the names snakemake-executor-plugin-slurm reads
    (`gpu` -> --gpus, `slurm_partition` -> --partition; mem_mb as it is; runtime (minutes): `runtime` where given, a
    number or a callable (wildcards, attempt) -> minutes (the plan's, workflow/rules/common.smk), else res's)."""
    runtime = res["runtime"] if runtime is None else runtime
    resources = {"gpus": res["gpus"], "gpu": res["gpus"], "mem_mb": res["mem_mb"], "runtime": runtime}
    if res.get("partition"):
        resources["slurm_partition"] = res["partition"]
    return resources


def pit_launcher(res: dict) -> str:
    """The command a GPU job runs `pit` with: plain `pit`, or, when the config asks for more than one
    GPU, `torchrun` with one process per GPU (DDP; `pit train` and the checkpoints are unchanged)."""
    if res["gpus"] > 1:
        return "torchrun --standalone --nproc_per_node {resources.gpus} -m pit"
    return "pit"


def job_environment() -> None:
    """Defaults for the jobs' environment: their `pit` is the one of the environment Snakemake runs in (its
    interpreter's folder goes first on PATH, so `.venv/bin/snakemake` needs no activated venv; a job's conda env,
    activated later, still comes first), caches of derived files go to .snakemake/cache/ of the working
    directory, not the user's home, and MLflow sends no telemetry (docs/install.md); a value already set wins."""
    path = os.environ.get("PATH", "").split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), *path])
    cache = Path(".snakemake", "cache").resolve()
    os.environ.setdefault("MPLCONFIGDIR", str(cache / "matplotlib"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "torchinductor"))
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def working_directory_problem(workflow_dir) -> str | None:
    """Why a run from this working directory is refused (one line), else None: a working directory inside
    workflow/ (e.g. `cd workflow && snakemake -s Snakefile`) makes Snakemake plan every path relative to it and
    leave workflow/.snakemake/ behind."""
    cwd, inside = Path.cwd().resolve(), Path(workflow_dir).resolve()
    if cwd == inside or inside in cwd.parents:
        return (
            f"the working directory {cwd} is inside the workflow folder {inside}; run snakemake from the "
            f"checkout root ({inside.parent}), or pass --directory FOLDER"
        )
    return None

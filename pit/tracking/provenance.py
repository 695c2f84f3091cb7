"""Provenance of a run: the code version it ran and the command that made it, as MLflow's standard tags
(`mlflow.source.git.commit`, `mlflow.source.name`, `mlflow.source.type`), which its UI shows on every run."""

from __future__ import annotations

import subprocess
from pathlib import Path

# a run's `stage` tag -> the pit command that makes such runs (the tag `mlflow.source.name`)
STAGE_COMMANDS = {
    "pretrain": "pit train",
    "lora": "pit lora train",
    "evaluate": "pit evaluate",
    "summary": "pit mlflow summary",
}


def git_commit() -> str:
    """HEAD of the git checkout the `pit` package lives in; "unknown" without git or outside a checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (out.stdout.strip() if out.returncode == 0 else "") or "unknown"


def source_tags(stage: str | None) -> dict[str, str]:
    """MLflow's standard source tags of a run of `stage`: the git commit of this checkout and the command."""
    return {
        "mlflow.source.git.commit": git_commit(),
        "mlflow.source.name": STAGE_COMMANDS.get(stage or "", "pit"),
        "mlflow.source.type": "LOCAL",
    }


def with_source_tags(tags: dict | None) -> dict:
    """`tags` with the source tags added where missing (tags recorded earlier, e.g. in run.json, win)."""
    tags = dict(tags or {})
    if all(key in tags for key in ("mlflow.source.git.commit", "mlflow.source.name", "mlflow.source.type")):
        return tags
    return {**source_tags(tags.get("stage")), **tags}

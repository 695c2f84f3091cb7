"""Provenance of a run: the code version it ran (logged as the MLflow param `git_commit`)."""

from __future__ import annotations

import subprocess
from pathlib import Path


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

"""Which checkout's code runs: the guard against a workflow in one clone executing another clone's `pit`.

An editable install points an interpreter at one folder. A second clone whose Snakefile runs with that interpreter
would execute the first clone's `pit/` while Snakemake and DVC record the second clone's files. The workflow
therefore exports its checkout (`PIT_CHECKOUT`, set by workflow/rules/common.smk), and both the workflow and every
`pit` command compare it with the package they imported: the same folder, or a folder holding byte-identical code
(a copy, as the tests' temporary projects are), passes; anything else is refused in one line (docs/install.md).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CHECKOUT_ENV = "PIT_CHECKOUT"
VERSION = "0.1.0"  # the package's version: pit.__version__, and pyproject.toml's (read from here by setuptools)


def package_dir() -> Path:
    """The folder of the imported `pit` package."""
    return Path(__file__).resolve().parent


def code_digest(package: Path) -> str:
    """sha256 over the relative path and bytes of every file of a package folder (caches excluded)."""
    h = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def checkout_mismatch(checkout: str | Path) -> str | None:
    """None when `checkout/pit` is the imported package, holds the same code, or does not exist (a run folder
    that uses an installed `pit`); otherwise the one-line reason to refuse."""
    ours, theirs = package_dir(), (Path(checkout) / "pit").resolve()
    if ours == theirs or not theirs.is_dir() or code_digest(ours) == code_digest(theirs):
        return None
    return (
        f"this workflow's checkout is {Path(checkout).resolve()}, but `pit` is imported from {ours}, whose code "
        f"differs; run the checkout's own environment ({Path(checkout).resolve()}/.venv/bin/snakemake, created by "
        "`bash scripts/setup.sh`) or install it into yours (pip install -e <checkout>)"
    )


def environment_mismatch() -> str | None:
    """checkout_mismatch for the checkout the workflow exported, None outside a workflow."""
    checkout = os.environ.get(CHECKOUT_ENV)
    return checkout_mismatch(checkout) if checkout else None

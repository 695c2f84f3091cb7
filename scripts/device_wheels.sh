#!/usr/bin/env bash
# The wheels a lent GPU machine lacks for running config/study-gpu.yaml's and config/real-gpu.yaml's DAGs (docs/study.md,
# "On one GPU" and "The real teachers on one GPU").
#
#   scripts/device_wheels.sh [DIR]        DIR: default .whl (git-ignored); prints each wheel with its size
#
# That machine has Python 3.12 with torch (CUDA), transformers, peft, tokenizers, tiktoken, safetensors, numpy,
# scipy, pandas, pyarrow and pytest (and what they depend on), no internet, and no snakemake, jsonschema,
# matplotlib, mlflow, datasets, dvc or gguf. The profile needs no mlflow (`mlflow.enabled: false`), no datasets (a local
# corpus) and no dvc. This fills DIR with, for CPython 3.12 on manylinux x86_64, at this venv's versions:
#   - snakemake and jsonschema (the workflow, its config schema) with every dependency the machine lacks, except
#     pulp: without it Snakemake schedules greedily (run it with --scheduler greedy), and its wheel bundles solvers;
#   - matplotlib (pit figure) and markdown-it-py (pit report's HTML page) with theirs;
#   - pit-command, a wheel with no package: only the `pit` console script, running the checkout's `pit` package
#     (put the checkout on PYTHONPATH), so the rules' `pit ...` commands work without installing the project.
# Which packages: the dependency closure of those roots, read from this venv's metadata with the markers evaluated
# for Python 3.12, less the packages the machine has (DEVICE below). A binary wheel comes from the package index;
# a package published only as a source archive (connection-pool) is built here into a py3-none-any wheel.
# On the machine (the tree and DIR copied there, from the checkout root):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
#   python3 -m snakemake --configfile config/study-gpu.yaml --cores 16 --resources gpus=3 --scheduler greedy
# Settings (environment): PYTHON (default .venv/bin/python: the venv whose metadata and versions are read).
set -euo pipefail
cd "$(dirname "$0")/.."

DEST="${1:-.whl}"
PY="${PYTHON:-.venv/bin/python}"
mkdir -p "$DEST"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# name==version of every wheel to bring; an unpinned name where this venv lacks the package
"$PY" - >"$TMP/wanted.txt" <<'EOF'
import importlib.metadata as md
import re
import sys

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOTS = ["snakemake", "jsonschema", "matplotlib", "markdown-it-py", "gguf"]
LEFT_OUT = {"pulp"}  # optional for Snakemake (greedy scheduler), and a large wheel
DEVICE = {  # on the GPU machine: the packages it was set up with, and what each of them requires
    "torch", "filelock", "typing-extensions", "setuptools", "sympy", "mpmath", "networkx", "jinja2", "markupsafe",
    "fsspec", "transformers", "huggingface-hub", "numpy", "packaging", "pyyaml", "regex", "tokenizers",
    "safetensors", "tqdm", "peft", "accelerate", "psutil", "tiktoken", "requests", "urllib3", "idna", "certifi",
    "charset-normalizer", "scipy", "pandas", "python-dateutil", "six", "pyarrow", "pytest", "iniconfig", "pluggy",
    "pygments",
}
ENV = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.0", "extra": ""}


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


dists = {norm(d.metadata["Name"]): d for d in md.distributions()}
seen, stack = set(), [norm(r) for r in ROOTS]
while stack:
    name = stack.pop()
    if name in seen or name in DEVICE or name in LEFT_OUT:
        continue
    seen.add(name)
    for text in dists[name].requires or [] if name in dists else []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(ENV):
            stack.append(norm(req.name))
for name in sorted(seen):
    if name in dists:
        print(f"{name}=={dists[name].version}")
    else:
        print(name)
        print(f"device_wheels: {name} is not installed in {sys.prefix}; taking the index's newest", file=sys.stderr)
EOF

# wheels of the same packages left from an earlier run (another version would make pip refuse the set)
stem() { echo "$1" | tr 'A-Z-.' 'a-z__'; }
while read -r spec; do
    name="${spec%%==*}"
    for old in "$DEST"/*.whl; do
        [[ -e "$old" ]] || continue
        base="$(basename "$old")"
        [[ "$(stem "${base%%-*}")" == "$(stem "$name")" ]] && rm -f "$old"
    done
done < <(cat "$TMP/wanted.txt"; echo "pit-command")

PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
while read -r spec; do
    if ! "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --abi cp312 --abi abi3 --abi none "${PLATFORMS[@]}" -d "$DEST" "$spec" 2>"$TMP/err"; then
        # no wheel for 3.12 on the index: build one here from the source archive (pure Python only, checked below)
        "$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$DEST" "$spec" >/dev/null 2>>"$TMP/err" || {
            cat "$TMP/err" >&2
            echo "device_wheels: no wheel of $spec for CPython 3.12 manylinux x86_64" >&2
            exit 1
        }
    fi
done <"$TMP/wanted.txt"

# pit-command: the `pit` console script alone (the package itself comes from the checkout on PYTHONPATH)
VERSION="$(sed -n 's/^VERSION = "\([^"]*\)".*/\1/p' pit/checkout.py)"  # pyproject's version is dynamic: this one
[[ -n "$VERSION" ]] || { echo "device_wheels: no VERSION = \"...\" line in pit/checkout.py" >&2; exit 1; }
mkdir -p "$TMP/pit-command"
cat >"$TMP/pit-command/pyproject.toml" <<EOF
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "pit-command"
version = "$VERSION"
description = "The pit console script of a pit-repro checkout on PYTHONPATH (scripts/device_wheels.sh)"
requires-python = ">=3.10"

[project.scripts]
pit = "pit.commands:entry"

[tool.setuptools]
packages = []
EOF
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$DEST" "$TMP/pit-command" \
    >/dev/null

# every wheel must install on CPython 3.12, manylinux x86_64
"$PY" - "$DEST" "$TMP/wanted.txt" <<'EOF'
import re
import sys
from pathlib import Path

dest, wanted = Path(sys.argv[1]), Path(sys.argv[2]).read_text().split()
names = {re.sub(r"[-_.]+", "_", w.split("==")[0]).lower() for w in wanted} | {"pit_command"}
bad, total, rows = [], 0, []
for whl in sorted(dest.glob("*.whl")):
    parts = whl.name[:-4].split("-")
    if re.sub(r"[-_.]+", "_", parts[0]).lower() not in names:
        continue  # a wheel of something else in the folder (e.g. scripts/gpu_check.sh's extras)
    py, abi, plat = parts[-3:]
    ok = (abi == "none" and plat == "any" and "py3" in py.split(".")) or (
        abi in ("cp312", "abi3") and "x86_64" in plat and ("manylinux" in plat or "linux" in plat)
    )
    if not ok:
        bad.append(whl.name)
    size = whl.stat().st_size
    total += size
    rows.append(f"{size / 2**20:8.2f} MiB  {whl.name}")
print("\n".join(rows))
print(f"{total / 2**20:8.2f} MiB  in {len(rows)} wheels ({dest})")
if len(rows) != len(names):
    found = {re.sub(r"[-_.]+", "_", w.name.split("-")[0]).lower() for w in dest.glob("*.whl")}
    bad += [f"missing: {n}" for n in sorted(names - found)]
if bad:
    sys.exit("device_wheels: not for CPython 3.12 manylinux x86_64: " + ", ".join(bad))
EOF
# what the `run` tool carries: the tree (tracked and untracked files git does not ignore) and the folder, <= 64 MiB
TREE="$(git ls-files -z --cached --others --exclude-standard | xargs -0 cat 2>/dev/null | wc -c)"
ALL="$(du -sb "$DEST" | cut -f1)"
echo "$(((TREE + ALL) / 1048576)) MiB with the tree ($((TREE / 1048576)) MiB) and all of $DEST"

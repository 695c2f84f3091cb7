#!/usr/bin/env bash
# One-step set-up for a fresh machine: installs the pinned CPU PyTorch first (an unpinned torch
# would pull several GB of CUDA packages), then the project and its pinned dependencies.
# Idempotent: a second run only checks that everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '2.13.0' else 1)" 2>/dev/null; then
    "$PY" -m pip install --quiet "torch==2.13.0"
fi
"$PY" -m pip install --quiet -c constraints.txt -e ".[dev]"

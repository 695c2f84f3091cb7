#!/usr/bin/env bash
# The paper profile at its real shapes, offline, on one machine (config/paper-smoke.yaml; docs/workflow.md):
# writes the fixtures in the hub's formats (`pit fixtures`), then runs the whole paper DAG with them.
#   bash scripts/paper_smoke.sh [WORKDIR] [more snakemake arguments]     (WORKDIR: runs/paper-smoke)
#   EXTRA_CONFIG=config/paper-smoke-cuda.yaml bash scripts/paper_smoke.sh runs/paper-smoke-cuda   (a third overlay)
# Jobs share the machine's memory through Snakemake's mem_mb resource (what is available now, less 1.5 GB), so
# the 1.3B-class jobs run one at a time. Disk: ~60 GB (the 1.3B-class checkpoints are 5 GB each).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-$ROOT/runs/paper-smoke}
shift || true
mkdir -p "$WORK/fixtures"
cd "$WORK"
[ -d fixtures/fineweb-edu ] || pit fixtures fineweb-edu --out fixtures/fineweb-edu
for size in 256m 590m 1.3b; do
    [ -d "fixtures/cerebras-gpt-$size" ] || pit fixtures teacher --model "cerebras-gpt-$size" --out "fixtures/cerebras-gpt-$size"
done
MEM_MB=$(($(awk '/MemAvailable/ {print $2}' /proc/meminfo) / 1024 - 1500))
exec snakemake -s "$ROOT/workflow/Snakefile" --cores all --resources "mem_mb=$MEM_MB" \
    --configfile "$ROOT/config/paper.yaml" "$ROOT/config/paper-smoke.yaml" ${EXTRA_CONFIG:+"$ROOT/$EXTRA_CONFIG"} "$@"

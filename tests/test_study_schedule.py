"""benchmarks/study_schedule.py: a Snakemake log read back into jobs, their DAG rebuilt from files, and the greedy
replay's wall time under another number of GPU slots."""

import importlib.util
import random
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_schedule():
    sys.path.insert(0, str(BENCHMARKS))  # the script imports its sibling `common`
    try:
        spec = importlib.util.spec_from_file_location("study_schedule", BENCHMARKS / "study_schedule.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def job(stamp, rule, jobid, inputs, outputs, gpus):
    return [
        f"[Thu Nov 26 21:{stamp} 2026]",
        f"localrule {rule}:",
        f"    input: {', '.join(inputs)}",
        f"    output: {', '.join(outputs)}",
        f"    jobid: {jobid}",
        "    threads: 2",
        f"    resources: tmpdir=/tmp, gpus={gpus}, mem_mb=1000",
    ]


def done(stamp, jobid):
    return [f"[Thu Nov 26 21:{stamp} 2026]", f"Finished jobid: {jobid} (Rule: x)"]


def test_replay_rebuilds_the_dag_and_schedules_gpu_slots(tmp_path):
    """data (10 s), then two 30-s trainings that need a GPU, then a report (5 s) that reads a file under both
    trainings' output folders: 75 s on one slot, 45 s on two, as logged (the log ran them on two)."""
    lines = job("00:00", "data", 1, ["corpus"], ["d.bin"], 0)
    lines += done("00:10", 1)
    lines += job("00:10", "train", 2, ["d.bin"], ["runs/a"], 1) + job("00:10", "train", 3, ["d.bin"], ["runs/b"], 1)
    lines += done("00:40", 2) + done("00:40", 3)
    lines += job("00:40", "report", 4, ["runs/a/summary.json", "runs/b/summary.json"], ["REPORT.md"], 0)
    lines += done("00:45", 4)
    log = tmp_path / "study.log"
    log.write_text("\n".join(lines) + "\n")
    sched = load_schedule()
    jobs = sched.read_jobs(log)
    assert {jid: (j["rule"], j["gpus"], j["end"] - j["start"]) for jid, j in jobs.items()} == {
        1: ("data", 0, 10),
        2: ("train", 1, 30),
        3: ("train", 1, 30),
        4: ("report", 0, 5),
    }
    deps = sched.dependencies(jobs)
    assert deps == {1: set(), 2: {1}, 3: {1}, 4: {2, 3}}
    walls = {n: sched.replay(jobs, deps, {}, n, 16, random.Random(0)) for n in (1, 2, 3)}
    assert walls == {1: 75.0, 2: 45.0, 3: 45.0}
    assert sched.replay(jobs, deps, {}, 2, 2, random.Random(0)) == 75.0  # 2 cores: one 2-thread job at a time

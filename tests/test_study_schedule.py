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


def test_two_runs_in_one_folder_replay_as_one_run(tmp_path):
    """The seed-0 slice, then the whole study in the same folder: the second run trains only what the first did not
    and remakes the report. Replayed together they are one run: data, both trainings, the second report (the first
    one's is replaced, and its target-only `all` job dropped): 75 s on one slot, 45 s on two."""
    first = job("00:00", "data", 1, ["corpus"], ["d.bin"], 0) + done("00:10", 1)
    first += job("00:10", "train", 2, ["d.bin"], ["runs/a"], 1) + done("00:40", 2)
    first += job("00:40", "report", 3, ["runs/a/summary.json"], ["REPORT.md"], 0) + done("00:45", 3)
    first += job("00:45", "all", 0, ["REPORT.md"], [], 0) + done("00:45", 0)
    second = job("01:00", "train", 1, ["d.bin"], ["runs/b"], 1) + done("01:30", 1)
    second += job("01:30", "report", 2, ["runs/a/summary.json", "runs/b/summary.json"], ["REPORT.md"], 0)
    second += done("01:35", 2) + job("01:35", "all", 0, ["REPORT.md"], [], 0) + done("01:35", 0)
    logs = [tmp_path / "slice.log", tmp_path / "rest.log"]
    for log, lines in zip(logs, (first, second)):
        log.write_text("\n".join(lines) + "\n")
    sched = load_schedule()
    jobs = sched.merge_runs([sched.read_jobs(log) for log in logs])
    assert [(j["rule"], j["end"] - j["start"]) for j in jobs.values()] == [
        ("data", 10),
        ("train", 30),
        ("train", 30),
        ("report", 5),
        ("all", 0),
    ]
    deps = sched.dependencies(jobs)
    assert deps == {1: set(), 2: {1}, 3: {1}, 4: {2, 3}, 5: {4}}
    walls = {n: sched.replay(jobs, deps, {}, n, 16, random.Random(0)) for n in (1, 2)}
    assert walls == {1: 75.0, 2: 45.0}

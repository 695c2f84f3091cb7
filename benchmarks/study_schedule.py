"""Replay a Snakemake run's jobs under another number of GPU slots: what `--resources gpus=N` would change.

    python benchmarks/study_schedule.py SNAKEMAKE_LOG [LOG ...] [--slots 3,4,5] [--cores 16] [--priority RULE=N ...]
                                        [--trials 400] [--json]

The log (Snakemake's own, e.g. `study.log` from scripts/gpu_check.sh) gives every job: its rule, input and output
files, threads, GPU slots (`resources: gpus=`) and its start and end (whole seconds). A job waits for the jobs whose
outputs it reads (an input equal to or under another job's output). The replay is Snakemake's greedy scheduler as a
list schedule: whenever a job ends, the ready jobs start in order of priority (the `priority:` of each rule in
workflow/rules/*.smk, or `--priority`; ties in random order, hence `--trials`) while threads and GPU slots last.
Each job keeps the duration it had in the log. That is the model's one assumption, and it errs on the short side
with more slots: more jobs sharing the GPU makes each one's steps slower. Snakemake's own start (before its first
job) is not in the log and not counted.

Several logs, of runs one after the other in one folder (scripts/gpu_check.sh's seed-0 slice, then the whole study
with GPU_CHECK_SEEDS=0,1,2, which runs only the other seeds' jobs and remakes the tables), are replayed as one run
from scratch: a later log's job replaces an earlier one that made any of the same files, and the earlier runs'
target-only jobs (`all`, no output) are dropped.
"""

from __future__ import annotations

import argparse
import heapq
import random
import re
import statistics
from datetime import datetime
from pathlib import Path

from common import save_result

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\w+):$")
FIELD = re.compile(r"^\s+(input|output|jobid|threads|resources): (.*)$")
DONE = re.compile(r"^Finished jobid: (\d+)")
RULES = Path(__file__).resolve().parent.parent / "workflow" / "rules"


def read_jobs(log: Path) -> dict[int, dict]:
    """{jobid: rule, inputs, outputs, threads, gpus, start, end (s from the first job's start)} of every job that
    finished."""
    jobs, stamp, job = {}, None, None
    for line in log.read_text().splitlines():
        if m := STAMP.match(line):
            stamp = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        elif m := RULE.match(line):
            job = {"rule": m.group(1), "inputs": [], "outputs": [], "threads": 1, "gpus": 0, "start": stamp}
        elif (m := FIELD.match(line)) and job is not None:
            key, value = m.groups()
            if key in ("input", "output"):
                job[key + "s"] = [p.strip() for p in value.split(",") if p.strip()]
            elif key == "threads":
                job["threads"] = int(value)
            elif key == "resources":
                job["gpus"] = int(dict(kv.strip().split("=", 1) for kv in value.split(",")).get("gpus", 0))
            else:
                jobs[int(value)] = job
        elif m := DONE.match(line):
            jobs[int(m.group(1))]["end"] = stamp
    jobs = {k: j for k, j in jobs.items() if "end" in j}  # a job that failed or was killed has no end: left out
    t0 = min(j["start"] for j in jobs.values())
    for j in jobs.values():
        j["start"], j["end"] = (j["start"] - t0).total_seconds(), (j["end"] - t0).total_seconds()
    return jobs


def merge_runs(runs: list[dict[int, dict]]) -> dict[int, dict]:
    """The jobs of several runs' logs (`read_jobs` of each, in order) as one run (module docstring), numbered 1, 2,
    ... in log order."""
    merged: list[dict] = []
    for run in runs:
        jobs = list(run.values())
        made = {out for j in jobs for out in j["outputs"]}
        merged = [j for j in merged if j["outputs"] and not made.intersection(j["outputs"])] + jobs
    return dict(enumerate(merged, 1))


def time_by_rule(jobs: dict[int, dict]) -> dict[str, dict]:
    """Per rule: its jobs, their summed job time (end - start, whole seconds as logged) and that sum's share of all
    job time, largest first: where a run's time went."""
    out: dict[str, dict] = {}
    for j in jobs.values():
        row = out.setdefault(j["rule"], {"jobs": 0, "job_s": 0.0})
        row["jobs"] += 1
        row["job_s"] += j["end"] - j["start"]
    total = sum(r["job_s"] for r in out.values()) or 1.0
    return {k: {**r, "share": r["job_s"] / total} for k, r in sorted(out.items(), key=lambda kv: -kv[1]["job_s"])}


def rule_priorities(rules_dir: Path = RULES) -> dict[str, int]:
    """The `priority:` of each rule in the workflow's rule files (0 where none is set)."""
    out, rule = {}, None
    for path in sorted(rules_dir.glob("*.smk")):
        for line in path.read_text().splitlines():
            if m := re.match(r"^rule (\w+):", line):
                rule = m.group(1)
            elif (m := re.match(r"^\s+priority: (\d+)", line)) and rule:
                out[rule] = int(m.group(1))
    return out


def dependencies(jobs: dict[int, dict]) -> dict[int, set[int]]:
    """Each job's producers: the jobs with an output that one of its inputs equals or lies under."""
    made = [(out.rstrip("/"), jid) for jid, j in jobs.items() for out in j["outputs"]]
    return {
        jid: {src for i in j["inputs"] for out, src in made if src != jid and (i == out or i.startswith(out + "/"))}
        for jid, j in jobs.items()
    }


def replay(jobs, deps, priority, slots: int, cores: int, rng: random.Random) -> float:
    """The wall time of one greedy list schedule (ties in `rng`'s order)."""
    waiting, done, running, t = set(jobs), set(), [], 0.0
    free = {"gpus": slots, "cores": cores}
    while waiting or running:
        ready = [jid for jid in waiting if deps[jid] <= done]
        rng.shuffle(ready)
        for jid in sorted(ready, key=lambda j: -priority.get(jobs[j]["rule"], 0)):
            j = jobs[jid]
            if j["gpus"] <= free["gpus"] and min(j["threads"], cores) <= free["cores"]:
                free["gpus"] -= j["gpus"]
                free["cores"] -= min(j["threads"], cores)
                waiting.discard(jid)
                heapq.heappush(running, (t + j["end"] - j["start"], jid))
        if not running:
            stuck = sorted({jobs[j]["rule"] for j in waiting if deps[j] <= done})
            raise SystemExit(f"jobs of {stuck} cannot start with {slots} GPU slots and {cores} cores")
        t, jid = heapq.heappop(running)
        done.add(jid)
        free["gpus"] += jobs[jid]["gpus"]
        free["cores"] += min(jobs[jid]["threads"], cores)
    return t


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("logs", type=Path, nargs="+", help="Snakemake's log of the run (of each run, in order)")
    ap.add_argument("--slots", default="3,4,5", help="GPU slot counts to replay (comma-separated)")
    ap.add_argument("--cores", type=int, default=16, help="Snakemake's --cores of the replay")
    ap.add_argument("--priority", action="append", default=[], help="RULE=N, over the workflow's (repeatable)")
    ap.add_argument("--trials", type=int, default=400, help="schedules per slot count (random ties)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--by-rule", action="store_true", help="only the job time per rule (where the time went)")
    args = ap.parse_args(argv)
    runs = [read_jobs(log) for log in args.logs]
    jobs = merge_runs(runs)
    if args.by_rule:
        rows = time_by_rule(jobs)
        for rule, r in rows.items():
            print(f"{rule}: {r['jobs']} jobs, {r['job_s'] / 60:.1f} job-minutes ({r['share']:.0%})")
        return
    deps, priority = (
        dependencies(jobs),
        rule_priorities() | {rule: int(n) for rule, n in (p.split("=", 1) for p in args.priority)},
    )
    rng, rows = random.Random(0), {}
    for slots in (int(s) for s in args.slots.split(",")):
        walls = [replay(jobs, deps, priority, slots, args.cores, rng) for _ in range(args.trials)]
        rows[f"slots_{slots}"] = {"min": min(walls), "median": statistics.median(walls), "max": max(walls)}
    logged = sum(max(j["end"] for j in run.values()) for run in runs)
    result = {
        "logs": [str(p) for p in args.logs],
        "jobs": len(jobs),
        "logged_wall_s": logged,
        "priority": priority,
        "replay": rows,
    }
    save_result("study_schedule", result, args.json)
    if not args.json:
        each = ", summed over the logs" if len(args.logs) > 1 else ""
        print(f"{len(jobs)} jobs, {logged:.0f} s logged (first job start to last job end{each})")
        for name, r in rows.items():
            print(f"  {name}: {r['min']:.0f} s to {r['max']:.0f} s, median {r['median']:.0f} s")


if __name__ == "__main__":
    main()

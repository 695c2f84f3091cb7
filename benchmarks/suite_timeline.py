"""Where the test suite's time goes: each test's start and end, per pytest-xdist worker.

As a pytest plugin it appends one JSON line per test (worker, test id, start, end, in seconds since the epoch, and
`cpu_s`: the CPU seconds, user + system, of the worker and of the child processes it waited for during the test) to
the file named by SUITE_TIMELINE (default `suite_timeline.jsonl` in the current folder):

    PYTHONPATH=benchmarks .venv/bin/python -m pytest -q -p suite_timeline
    python benchmarks/suite_timeline.py suite_timeline.jsonl

As a script it prints each worker's span and busy time, the time by test file, the longest tests, and the same by
CPU seconds. A suite whose workers end together and whose cores are saturated (`vmstat 5` beside it) gets shorter
only by doing less work; one whose workers end apart gets shorter by scheduling (benchmarks/RESULTS.md, section 22).
On a saturated machine a test's wall time grows with the load around it; its CPU seconds do not, so the tests that
cost the suite most are the first ones by CPU (section 29). A process a test started but did not wait for (a daemon)
is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections import Counter

import pytest


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have been waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start, cpu = time.time(), cpu_seconds()
    yield
    # xdist gives each worker's config a `workerinput`; the PYTEST_XDIST_WORKER variable would also be inherited by
    # a pytest started from inside a worker, which is not itself a worker
    worker = getattr(item.config, "workerinput", {}).get("workerid", "main")
    row = {"worker": worker, "test": item.nodeid, "start": start}
    with open(os.environ.get("SUITE_TIMELINE", "suite_timeline.jsonl"), "a") as f:
        f.write(json.dumps(row | {"end": time.time(), "cpu_s": cpu_seconds() - cpu}) + "\n")


def summary(rows: list[dict], longest: int = 10) -> dict:
    """Per worker: first start and last end (seconds from the suite's first start) and the summed test time; per
    test file: the summed test time, largest first; the `longest` tests."""
    t0 = min(r["start"] for r in rows)
    workers = {}
    for w in sorted({r["worker"] for r in rows}):
        mine = [r for r in rows if r["worker"] == w]
        workers[w] = {
            "tests": len(mine),
            "first_start_s": min(r["start"] for r in mine) - t0,
            "last_end_s": max(r["end"] for r in mine) - t0,
            "busy_s": sum(r["end"] - r["start"] for r in mine),
        }
    files, cpu = Counter(), Counter()
    for r in rows:
        name = r["test"].split("::")[0]
        files[name] += r["end"] - r["start"]
        cpu[name] += r.get("cpu_s", 0.0)
    tests = sorted(rows, key=lambda r: r["end"] - r["start"], reverse=True)[:longest]
    by_cpu = sorted(rows, key=lambda r: r.get("cpu_s", 0.0), reverse=True)[:longest]
    return {
        "workers": workers,
        "files": dict(files.most_common()),
        "longest": [(r["test"], r["end"] - r["start"]) for r in tests],
        "files_cpu": dict(cpu.most_common()),
        "most_cpu": [(r["test"], r.get("cpu_s", 0.0)) for r in by_cpu],
    }


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("timeline", help="the JSON-lines file the plugin wrote")
    parser.add_argument("--files", type=int, default=15, help="how many test files to list")
    args = parser.parse_args()
    with open(args.timeline) as f:
        s = summary([json.loads(line) for line in f if line.strip()])
    for w, v in s["workers"].items():
        print(f"{w}: {v['tests']} tests, {v['first_start_s']:.1f} -> {v['last_end_s']:.1f} s, busy {v['busy_s']:.1f} s")
    for what, files, tests, ranked in (
        ("test time", "files", "longest", "longest tests"),
        ("CPU time (user + system, the workers and the children they waited for)", "files_cpu", "most_cpu", "most CPU"),
    ):
        print(f"\nsummed {what} {sum(s[files].values()):.1f} s; by file:")
        for name, seconds in list(s[files].items())[: args.files]:
            print(f"  {seconds:8.1f} s  {name}")
        print(f"\n{ranked}:")
        for name, seconds in s[tests]:
            print(f"  {seconds:8.1f} s  {name}")


if __name__ == "__main__":
    main()

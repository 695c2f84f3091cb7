"""benchmarks/suite_timeline.py: the plugin records every test of a real pytest run, and the summary adds the time
up by worker and by file (without xdist, one worker: `main`; under xdist, gw0, gw1, ...)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run_with_timeline(folder, files, *args):
    """Write `files` (name: source) into `folder`, its own pytest root, run pytest there with the plugin and `args`,
    and return the timeline's rows."""
    (folder / "pytest.ini").write_text("[pytest]\n")  # this folder is the run's root: not the project's settings
    for name, source in files.items():
        (folder / name).write_text(source)
    timeline = folder / "timeline.jsonl"
    env = os.environ | {"PYTHONPATH": str(BENCHMARKS), "SUITE_TIMELINE": str(timeline)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "suite_timeline", "-p", "no:cacheprovider", *args],
        cwd=folder, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return [json.loads(line) for line in timeline.read_text().splitlines()]


def test_plugin_records_each_test_per_worker_and_the_summary_adds_them_up(tmp_path):
    sleeps = "import time\nimport pytest\n\n@pytest.mark.parametrize('i', range(3))\ndef test_sleep(i):\n"
    busy = "import subprocess, sys\n\ndef test_child_works():\n    code = 'x = 0\\nfor i in range(3 * 10**6): x += i'\n"
    busy += "    subprocess.run([sys.executable, '-c', code], check=True)\n"
    files = {"test_a.py": sleeps + "    time.sleep(0.2)\n", "test_b.py": busy}
    rows = run_with_timeline(tmp_path, files, "-p", "no:xdist")
    assert sorted(r["test"] for r in rows) == [
        *(f"test_a.py::test_sleep[{i}]" for i in range(3)),
        "test_b.py::test_child_works",
    ]
    assert {r["worker"] for r in rows} == {"main"} and all(r["end"] >= r["start"] for r in rows)
    # CPU seconds: a sleeping test spends (almost) none; the child's loop is counted for the test that waited for it
    cpu = {r["test"]: r["cpu_s"] for r in rows}
    assert all(cpu[f"test_a.py::test_sleep[{i}]"] < 0.05 for i in range(3)), cpu
    assert cpu["test_b.py::test_child_works"] > 0.1, cpu

    sys.path.insert(0, str(BENCHMARKS))
    try:
        from suite_timeline import summary
    finally:
        sys.path.remove(str(BENCHMARKS))
    s = summary(rows, longest=2)
    main = s["workers"]["main"]
    assert list(s["workers"]) == ["main"] and main["tests"] == 4
    assert main["busy_s"] == pytest.approx(sum(s["files"].values()))
    assert set(s["files"]) == {"test_a.py", "test_b.py"} and s["files"]["test_a.py"] >= 0.6  # 3 x 0.2 s asleep
    durations = sorted((r["end"] - r["start"] for r in rows), reverse=True)
    assert [seconds for _, seconds in s["longest"]] == durations[:2]  # the two longest, longest first
    assert 0 == main["first_start_s"] < main["busy_s"] <= main["last_end_s"]
    assert s["files_cpu"] == {name: pytest.approx(sum(r["cpu_s"] for r in rows if r["test"].startswith(name)))
                              for name in ("test_b.py", "test_a.py")}  # fmt: skip
    assert list(s["files_cpu"]) == ["test_b.py", "test_a.py"] and s["most_cpu"][0][0] == "test_b.py::test_child_works"


def test_under_xdist_each_row_names_the_worker_that_ran_it(tmp_path):
    """Under xdist the plugin reads the worker's id from xdist's `workerinput` (gw0, gw1); the first test checks that
    a pytest started from inside one of this suite's workers, which inherits PYTEST_XDIST_WORKER, still says `main`."""
    source = "import pytest\n\n@pytest.mark.parametrize('i', range(4))\ndef test_c(i):\n    pass\n"
    rows = run_with_timeline(tmp_path, {"test_c.py": source}, "-n", "2")
    assert len(rows) == 4 and {r["worker"] for r in rows} <= {"gw0", "gw1"}

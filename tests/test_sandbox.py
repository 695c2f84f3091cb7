"""The sandbox contains hostile samples: each is scored a failure, the evaluator keeps going, nothing lingers."""

import os
import socket
from pathlib import Path

import pytest

from pit.evaluation.sandbox import (
    Limits,
    Result,
    _uid_processes,
    isolated,
    run_many,
    run_python,
    sandbox_mode,
    sandbox_uid,
)

LIMITS = Limits(timeout=3.0)
needs_bwrap = pytest.mark.skipif(not isolated(), reason="namespaces need bubblewrap")
needs_root = pytest.mark.skipif(
    sandbox_mode(allow_weak=True) != "bwrap-root", reason="the uid switch and RLIMIT_NPROC need root"
)


def no_strays() -> bool:
    return not any(_uid_processes(sandbox_uid(slot)) for slot in range(4))


def assert_contained(source: str, statuses=("failed", "timeout")):
    result = run_python(source, LIMITS)
    assert result.status in statuses, result
    assert not result.passed
    assert run_python("assert sum(range(10)) == 45", LIMITS).passed  # the next sample still evaluates
    assert no_strays()
    return result


def test_passing_and_failing_programs():
    assert run_python("import math, re, collections\nassert math.gcd(12, 18) == 6").status == "passed"
    result = run_python("assert 1 + 1 == 3, 'arithmetic'")
    assert result.status == "failed" and "AssertionError: arithmetic" in result.detail
    exited = "the program exited before its tests finished"
    assert run_python("raise SystemExit(3)") == Result("failed", f"SystemExit(3): {exited}")
    assert run_python("raise SystemExit(200)") == Result("failed", f"SystemExit(200): {exited}")
    assert run_python("import os\nos._exit(3)") == Result("failed", "exit status 3")
    assert run_python("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)") == Result(
        "failed", "killed by SIGSEGV"
    )
    assert run_python("def f(:\n  pass").status == "failed"


def test_infinite_loop_times_out():
    result = assert_contained("while True:\n    pass", statuses=("timeout",))
    assert "3 s" in result.detail


def test_huge_allocation_fails():
    result = assert_contained("x = bytearray(10 * 2**30)")
    assert "MemoryError" in result.detail


@needs_root
def test_fork_bomb_is_contained():
    source = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    assert_contained(source, statuses=("timeout",))


@needs_root
def test_fork_bomb_does_not_starve_the_other_worker():
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    results = run_many([bomb, "pass", "pass", "assert False", "pass"], LIMITS, workers=2)
    assert [r.status for r in results] == ["timeout", "passed", "passed", "failed", "passed"]
    assert no_strays()


@needs_bwrap
def test_detached_children_are_killed():
    # a child that leaves the process group and outlives its parent
    source = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
    assert run_python(source, LIMITS).status == "passed"
    assert no_strays()


@needs_bwrap
def test_writes_outside_the_sandbox_fail(tmp_path):
    keep = tmp_path / "keep.txt"
    keep.write_text("untouched")
    for target in (keep, tmp_path / "new.txt", "/etc/passwd", "/root/pit-sandbox-escape"):
        assert_contained(f"with open({str(target)!r}, 'a') as f:\n    f.write('pwned')\n")
    assert keep.read_text() == "untouched"
    assert not (tmp_path / "new.txt").exists() and not os.path.exists("/root/pit-sandbox-escape")
    assert "pwned" not in Path("/etc/passwd").read_text()
    # its own directory (and a private /tmp) are writable, and vanish afterwards
    assert run_python("open('out.txt', 'w').write('x')\nopen('/tmp/y', 'w').write('y')").passed


def test_no_network():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        result = assert_contained(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n")
        assert any(why in result.detail for why in ("unreachable", "refused", "network access is disabled"))
        with pytest.raises(socket.timeout):
            server.accept()


def test_cannot_kill_the_evaluator():
    assert_contained(f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)\n")
    # its own group and "every process it may signal": neither reaches the evaluator (or the launcher)
    assert_contained("import os, signal\nos.killpg(0, signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)\nassert False\n")


def test_output_flood_is_cut():
    # RLIMIT_FSIZE: the write past 16 MiB fails (Python ignores SIGXFSZ and raises "File too large")
    assert_contained("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", statuses=("failed",))


@needs_root
def test_runs_as_an_unprivileged_uid_with_a_minimal_environment():
    source = (
        f"import os\nassert os.getuid() == {sandbox_uid(0)} and os.getuid() != 0\n"
        "assert set(os.environ) <= {'PATH', 'HOME', 'TMPDIR', 'LANG', 'LD_LIBRARY_PATH', 'LC_CTYPE'}, "
        "os.environ\n"
        "assert os.getcwd() == '/tmp/work'\n"
    )
    assert run_python(source).passed

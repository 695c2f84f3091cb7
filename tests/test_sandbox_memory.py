"""A sample's memory and processes are bounded as a whole, fork children included (a cgroup per sample; where
none can be made, the sample may not fork), and in the weaker mode a sample run by a root evaluator cannot touch
the evaluator: it runs as an unprivileged uid of its own.

The memory sample forks 4 children that each write 400 MiB and then hold it; under a 512 MiB limit at most one may
hold its share at a time (per-process RLIMIT_AS alone let all 4 live: 1.6 GiB under "512 MiB"). The test itself
never holds more than that."""

import json
import os
import resource
import stat
import tempfile

import pytest

from pit.evaluation import sandbox
from pit.evaluation.sandbox import Limits, run_python

MODES = [None, "weak"]  # bubblewrap (where it runs; else the weaker mode) and the weaker mode
HOLD = """
import os, select
r, w = os.pipe()
pids = []
for _ in range({children}):
    try:
        pid = os.fork()
    except Exception:  # no fork at all (no cgroup): RLIMIT_NPROC = 1, or the guard refuses it
        break
    if pid == 0:
        os.close(r)
        block = b"\\x01" * ({mib} << 20)  # written: every page is touched
        os.write(w, b"%8d" % os.getpid())  # holding its share now
        select.select([], [], [])  # hold it until the sandbox ends
    pids.append(pid)
os.close(w)
# No clock: wait until every child either holds its share (said so on the pipe) or is dead (killed for memory).
holding, dead = set(), set()
while set(pids) - holding - dead:
    if select.select([r], [], [], 0.05)[0]:
        data = os.read(r, 8 * len(pids))
        holding.update(int(data[i : i + 8]) for i in range(0, len(data), 8))
    dead.update(pid for pid in set(pids) - dead if os.waitpid(pid, os.WNOHANG) != (0, 0))
alive = [pid for pid in pids if pid not in dead and os.waitpid(pid, os.WNOHANG) == (0, 0)]
raise SystemExit("report=" + __import__("json").dumps({{"forked": len(pids), "alive": len(alive)}}))
"""


def report(result) -> dict:
    """The JSON a sample raised in SystemExit("report=...")."""
    assert result.status == "failed" and "report=" in result.detail, result
    return json.loads(result.detail.split("report=", 1)[1].split("'", 1)[0])


@pytest.mark.parametrize("mode", MODES)
def test_forked_children_share_one_memory_limit(mode):
    result = run_python(HOLD.format(children=4, mib=400), Limits(timeout=20, memory_mb=512), mode=mode)
    counts = report(result)
    assert counts["alive"] * 400 <= 512, counts  # at most one child holds its 400 MiB
    if sandbox._cgroup_bases() is not None:
        assert counts["forked"] == 4, counts  # the cgroup bounds the total; forking itself is allowed


@pytest.mark.parametrize("mode", MODES)
def test_the_process_count_is_bounded_as_a_whole(mode):
    source = (
        "import os, time\nn = 0\nfor _ in range(20):\n    try:\n        pid = os.fork()\n    except Exception:\n"
        "        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\n"
        "raise SystemExit('report=' + __import__('json').dumps({'forked': n}))\n"
    )
    counts = report(run_python(source, Limits(timeout=10, nproc=8), mode=mode))
    assert counts["forked"] < 8, counts  # the sample's own process counts too (and bwrap's, in bubblewrap)


@pytest.mark.parametrize("mode", MODES)
def test_without_a_cgroup_the_sample_cannot_fork(monkeypatch, mode):
    """The fallback where no cgroup can be made: RLIMIT_NPROC = 1 on the private uid (a root evaluator), or the
    guard refuses fork (no private uid); RLIMIT_AS = memory_mb then bounds the whole sample."""
    monkeypatch.setattr(sandbox, "_make_group", lambda limits, slot: None)
    fork = "import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\n"
    for uid in ("private", None):
        if uid is None:
            monkeypatch.setattr(sandbox, "_private_uid", lambda slot: None)
        if uid is None and mode is None and sandbox.sandbox_mode(allow_weak=True) == "bwrap-root":
            continue  # bwrap-root needs its private uid (the harness drops to it)
        result = run_python(fork, Limits(timeout=10), mode=mode)
        assert result.status == "failed", (uid, result)
        assert "Resource temporarily unavailable" in result.detail or "os.fork is not allowed" in result.detail
    counts = report(run_python(HOLD.format(children=4, mib=400), Limits(timeout=20, memory_mb=512), mode=mode))
    assert counts == {"forked": 0, "alive": 0}


def test_a_weak_mode_sample_cannot_touch_a_root_evaluator(tmp_path):
    """Weak mode (no namespaces) with a root evaluator: the sample runs as its slot's private uid, so the kernel
    refuses to let it signal the evaluator (also through a pidfd, which the guard does not see), change the
    evaluator's rlimits, or write into root's directories."""
    uid = run_python("import os\nraise SystemExit(f'report={{\"uid\": {os.getuid()}}}')", Limits(), mode="weak")
    assert report(uid)["uid"] not in (0, os.geteuid()), "weak mode runs samples as the evaluator's uid (not root?)"
    evaluator, before = os.getpid(), resource.getrlimit(resource.RLIMIT_NOFILE)
    rootdir = tempfile.mkdtemp()  # root's, 0755: readable and searchable by others, not writable
    os.chmod(rootdir, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    attack = f"""
import json, os, resource, signal
outcome = {{}}
def attempt(name, action):
    try:
        action()
        outcome[name] = "done"
    except Exception as err:
        outcome[name] = type(err).__name__
attempt("kill", lambda: os.kill({evaluator}, signal.SIGKILL))
attempt("pidfd", lambda: signal.pidfd_send_signal(os.pidfd_open({evaluator}), signal.SIGKILL))
attempt("prlimit", lambda: resource.prlimit({evaluator}, resource.RLIMIT_NOFILE, (3, 3)))
attempt("write", lambda: open({os.path.join(rootdir, "pwned")!r}, "w").write("x"))
attempt("home", lambda: open("/root/pit-pwned", "w").write("x"))
raise SystemExit("report=" + json.dumps(outcome))
"""
    try:
        outcome = report(run_python(attack, Limits(), mode="weak"))
        assert set(outcome.values()) <= {"PermissionError", "RuntimeError"}, outcome  # RuntimeError: the guard
        assert outcome["pidfd"] == outcome["prlimit"] == outcome["write"] == "PermissionError", outcome
        assert os.getpid() == evaluator and resource.getrlimit(resource.RLIMIT_NOFILE) == before
        assert os.listdir(rootdir) == [] and not os.path.exists("/root/pit-pwned")
    finally:
        os.rmdir(rootdir)


def test_the_limits_go_to_the_files_of_either_cgroup_version(tmp_path):
    """v2 (one folder: memory.max, memory.swap.max, pids.max) and v1 (a memory and a pids folder); a missing
    required file is an error, a missing swap file is not. (This machine has v1 only: v2 is checked on files.)"""
    v2 = tmp_path / "v2"
    v2.mkdir()
    for name in ("memory.max", "memory.swap.max", "pids.max"):
        (v2 / name).write_text("max")
    sandbox._write_limits((str(v2),), "v2", 512 << 20, 8)
    assert [(v2 / n).read_text() for n in ("memory.max", "memory.swap.max", "pids.max")] == [str(512 << 20), "0", "8"]
    memory, pids = tmp_path / "memory", tmp_path / "pids"
    memory.mkdir()
    pids.mkdir()
    (memory / "memory.limit_in_bytes").write_text("0")
    (pids / "pids.max").write_text("max")
    sandbox._write_limits((str(memory), str(pids)), "v1", 512 << 20, 8)
    assert (memory / "memory.limit_in_bytes").read_text() == str(512 << 20) and (pids / "pids.max").read_text() == "8"
    with pytest.raises(OSError, match="pids.max"):
        sandbox._write_limits((str(memory),), "v1", 512 << 20, 8)
    assert sandbox._cgroup_dir(("/sys/fs/cgroup/memory", "/"), "/a/b") == "/sys/fs/cgroup/memory/a/b"
    assert sandbox._cgroup_dir(("/sys/fs/cgroup", "/docker/x"), "/docker/x/y") == "/sys/fs/cgroup/y"
    assert sandbox._cgroup_dir(("/sys/fs/cgroup", "/"), "/") == "/sys/fs/cgroup"

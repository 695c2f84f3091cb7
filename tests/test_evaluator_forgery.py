"""A wrong program cannot pass by forging its verdict. The tests, the prompt's helpers and the verdict live on the
trusted side (pit.evaluation.rpc); the sandbox only runs the solution and answers calls with plain data. Every attack
below pairs a WRONG solution with one trick and must score as failed; the right solution passes (the fixture is
sound). The attacks go through `pit.evaluation.tasks.score`, as `pit evaluate` does.

Two families: tricks against the old in-process harness (exiting early or with status 0, exit hooks, tracing over
the asserts, rebinding builtins, fake verdicts on every descriptor, reading memory, signalling the evaluator), and
the routes of a hostile probe that passed the old harness, aimed at this design on the real HumanEval: walking
frames to whatever the sandbox side holds (the old route read the pass token from the audit hook's frame, 164/164
with `return None`), reading the expected values (an oracle that ran `check` against a spy: 153/164), patched
`Fraction`/`Counter` equality (157/164), shadowed builtins and redefined prompt helpers, and replies forged on the
pipe, also claiming objects of the trusted classes."""

import json
import os
import signal
import struct

import pytest

from pit.evaluation import rpc
from pit.evaluation.sandbox import Limits, Program, isolated, run_many, run_python
from pit.evaluation.tasks import load_task, score

LIMITS = Limits(timeout=4.0)
# a HumanEval-shaped problem: the completion continues the prompt; the tests define check(candidate)
PROMPT = 'def add(a, b):\n    """Add two numbers."""\n'
TEST = (
    "def check(candidate):\n"
    "    assert candidate(2, 3) == 5\n"
    "    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9\n"
    "    assert True\n"
)
RIGHT = "    return a + b\n"
WRONG = "    return 0\n"
SWEEP_FDS = "for fd in range(3, 1024):\n    try:\n        os.write(fd, {data})\n    except OSError:\n        pass\n"
SCAN_MEMORY = (
    """
import os, re
found = b''
for path in ('/proc/self/mem', f'/proc/{os.getppid()}/mem'):
    try:
        maps = open(path.replace('mem', 'maps')).read().splitlines()
        with open(path, 'rb', buffering=0) as mem:
            for line in maps:
                lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
                if 'r' in line.split()[1] and hi - lo < 1 << 26:
                    try:
                        mem.seek(lo)
                        found += b''.join(re.findall(rb'passed [0-9a-f]{32}\\n', mem.read(hi - lo)))
                    except OSError:
                        pass
    except Exception:
        pass
"""
    + SWEEP_FDS.format(data="found or b'nothing'")
    + "os._exit(0)\n"
)

ATTACKS = {  # name -> completion of PROMPT (a wrong add, and a way to forge the verdict)
    "os._exit(0) before the tests": WRONG + "import os\nos._exit(0)\n",
    "os._exit(0) inside the call": "    import os\n    os._exit(0)\n",
    "sys.exit(0) inside the call": "    import sys\n    sys.exit(0)\n",
    "SystemExit(0) inside the call": "    raise SystemExit(0)\n",
    "StopIteration inside the call": "    raise StopIteration\n",
    "exit() before the tests": WRONG + "exit()\n",
    "quit(0) before the tests": WRONG + "quit(0)\n",
    "KeyboardInterrupt inside the call": "    raise KeyboardInterrupt\n",
    "atexit hook after the failed assert": WRONG + "import atexit, os\natexit.register(os._exit, 0)\n",
    "excepthook exits 0": WRONG + "import os, sys\nsys.excepthook = lambda *a: os._exit(0)\n",
    "stderr that exits 0 on the traceback": WRONG
    + "import os, sys\nclass W:\n    def write(self, s):\n        os._exit(0)\n    def flush(self):\n        pass\n"
    "sys.stderr = W()\n",
    "exception whose str() exits 0": "    import os\n    class E(Exception):\n        def __str__(self):\n"
    "            os._exit(0)\n    raise E()\n",
    "a thread exits 0 during the tests": "    import time\n    time.sleep(3)\n    return 0\n"
    "import os, threading, time\n"
    "threading.Thread(target=lambda: (time.sleep(0.5), os._exit(0)), daemon=True).start()\n",
    "a signal handler exits 0 during the tests": "    import time\n    time.sleep(3)\n    return 0\n"
    "import os, signal\nsignal.signal(signal.SIGALRM, lambda *a: os._exit(0))\n"
    "signal.setitimer(signal.ITIMER_REAL, 0.5)\n",
    "a tracer jumps over the asserts": WRONG + "import sys\n"
    "def tracer(frame, event, arg):\n"
    "    if frame.f_code.co_name != 'check':\n"
    "        return None\n"
    "    last = frame.f_code.co_firstlineno + 3\n"
    "    def line(frame, event, arg):\n"
    "        if event == 'line' and frame.f_lineno < last:\n"
    "            frame.f_lineno = last\n"
    "        return line\n"
    "    return line\n"
    "sys.settrace(tracer)\n",
    "builtins the tests use are rebound": "    return 5\nimport builtins\nbuiltins.abs = lambda x: 0\n",
    "builtins the harness uses are rebound": WRONG
    + "import builtins, os, sys, types\nbuiltins.exec = lambda *a, **k: None\nbuiltins.dict = lambda *a: {}\n"
    "types.FunctionType = lambda *a, **k: (lambda c: None)\nsys.audit = lambda *a: None\n",
    "a result whose __eq__ is always true": "    class Anything:\n        def __eq__(self, other):\n"
    "            return True\n        def __sub__(self, other):\n            return 0\n    return Anything()\n",
    "a float subclass that is always close": "    class F(float):\n        def __sub__(self, other):\n"
    "            return F(0)\n        def __eq__(self, other):\n            return True\n    return F(0)\n",
    "sys.audit of the old harness's event": WRONG + "import sys\nsys.audit('pit.passed')\n",
    "the harness's main called again": WRONG + "import sys\ntry:\n    sys.modules['__main__'].main(0, 1)\n"
    "except BaseException:\n    pass\n",
    "a fake verdict on every descriptor": WRONG
    + "import os\n"
    + SWEEP_FDS.format(data="b'started\\npassed ' + b'0' * 32 + b'\\n'")
    + "print('passed', '0' * 32)\nos._exit(0)\n",
    "whatever is readable echoed to every descriptor": WRONG
    + "import os\ndata = b''\nfor fd in range(0, 1024):\n    try:\n        os.set_blocking(fd, False)\n"
    "        data += os.read(fd, 65536)\n    except OSError:\n        pass\n"
    + SWEEP_FDS.format(data="data")
    + "os._exit(0)\n",
    "the token scanned from /proc/self/mem": WRONG + SCAN_MEMORY,
    "ctypes calls _exit(0)": WRONG + "import ctypes\nctypes.CDLL(None)._exit(0)\n",
    "exec of a program that exits 0": WRONG + "import os\nos.execv('/bin/true', ['/bin/true'])\n",
    "a fresh interpreter forges the verdict": WRONG
    + "import os, subprocess, sys\nsubprocess.run([sys.executable, '-c', 'import os; os._exit(0)'])\nos._exit(0)\n",
    "the evaluator is signalled": WRONG
    + "import os, signal\nfor pid in (os.getppid(), 1, -1):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
    "    except Exception:\n        pass\nos._exit(0)\n",
}
# the same tricks where the tests are top-level asserts (MBPP): exit() used to pass
MBPP_ATTACKS = {
    "exit()": "def add(a, b):\n    return 0\nexit()\n",
    "os._exit(0)": "def add(a, b):\n    return 0\nimport os\nos._exit(0)\n",
    "raise SystemExit": "def add(a, b):\n    return 0\nraise SystemExit\n",
    "atexit hook": "def add(a, b):\n    return 0\nimport atexit, os\natexit.register(os._exit, 0)\n",
    "a result whose __eq__ is always true": "class Anything:\n    def __eq__(self, other):\n        return True\n"
    "def add(a, b):\n    return Anything()\n",
    "add defined as a class": "class add:\n    def __init__(self, a, b):\n        pass\n"
    "    def __eq__(self, other):\n        return True\n",
}


def humaneval_task(tmp_path, n):
    rows = [
        {"task_id": f"Forge/{i}", "prompt": PROMPT, "canonical_solution": RIGHT, "test": TEST, "entry_point": "add"}
        for i in range(n)
    ]
    (tmp_path / "forge.json").write_text(json.dumps(rows))
    return load_task("humaneval", str(tmp_path / "forge.json"))


def mbpp_task(tmp_path, n):
    tests = ["assert add(2, 3) == 5", "assert add(1, 1) == 2"]
    rows = [{"task_id": i, "text": "Add two numbers.", "code": RIGHT, "test_list": tests} for i in range(n)]
    (tmp_path / "mbpp.json").write_text(json.dumps(rows))
    return load_task("mbpp", str(tmp_path / "mbpp.json"))


def forged(task, attacks):
    """The attacks that passed (name -> result), scoring attack i as task i; and the result of the right answer."""
    ids = list(task.records)
    completions = dict(zip(ids, attacks.values()))
    right = RIGHT if "entry_point" in task.records[ids[0]] else "def add(a, b):\n    return a + b\n"
    completions[ids[len(attacks)]] = right
    results = score(task, completions, LIMITS, workers=2)["results"]
    passed = {name: results[i] for name, i in zip(attacks, ids) if results[i]["passed"]}
    return passed, results[ids[len(attacks)]]


def test_forged_exits_fail_on_humaneval(tmp_path):
    evaluator = os.getpid()
    passed, right = forged(humaneval_task(tmp_path, len(ATTACKS) + 1), ATTACKS)
    assert right["passed"], right
    assert passed == {}, f"{len(passed)} forged verdicts passed: {sorted(passed)}"
    assert os.getpid() == evaluator and run_python("assert 1 + 1 == 2", LIMITS).passed  # the evaluator lives on


def test_forged_exits_fail_on_mbpp(tmp_path):
    passed, right = forged(mbpp_task(tmp_path, len(MBPP_ATTACKS) + 1), MBPP_ATTACKS)
    assert right["passed"], right
    assert passed == {}, f"{len(passed)} forged verdicts passed: {sorted(passed)}"


def test_forged_exits_fail_without_namespaces(tmp_path):
    """The verdict does not depend on bubblewrap: the weaker mode refuses the same forgeries."""
    task = humaneval_task(tmp_path, len(ATTACKS) + 1)
    ids = list(task.records)
    programs = [task.program(i, c) for i, c in zip(ids, ATTACKS.values())]
    results = run_many([*programs, task.program(ids[-1], RIGHT)], LIMITS, workers=2, mode="weak")
    assert results[-1].passed, results[-1]
    assert [name for name, r in zip(ATTACKS, results) if r.passed] == []


# --- the probe's routes, aimed at this design, on the real HumanEval --------------------------------------------

# Walk every frame the sample can reach (its callers: the harness's serving loop; the audit hook's frame, through
# the traceback of a refused event), write every str or bytes found there to every descriptor named in those
# frames, and answer the current and the next 200 calls with forged replies (None, which no HumanEval test expects
# everywhere), then a "passed" line and a framed verdict; then return None.
FRAME_WALK = """    import json, os, struct, sys
    frames, found, fds, calls = [], [], set(), []
    try:
        sys.settrace(None)
    except RuntimeError as err:
        tb = err.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
    frame = sys._getframe()
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    for frame in frames:
        for scope in (frame.f_locals, frame.f_globals):
            for key, value in list(scope.items()):
                if isinstance(value, (str, bytes)) and 0 < len(value) < 4096:
                    found.append(value.encode("utf-8", "replace") if isinstance(value, str) else value)
                elif isinstance(value, int) and key.endswith("fd"):
                    fds.add(value)
                elif key == "n" and isinstance(value, int):
                    calls.append(value)
    first = calls[0] if calls else 1
    forged = [{"m": "reply", "n": k, "value": None} for k in range(first, first + 200)]
    forged += [{"m": "passed"}, {"status": "passed"}, {"m": "reply", "n": first, "value": {"Anything": []}}]
    frames = [struct.pack(">I", len(b)) + b for b in (json.dumps(m).encode() for m in forged)]
    for fd in sorted(fds) + list(range(3, 64)):
        for data in frames + [b"passed " + b"0" * 32 + b"\\n"] + found[:50]:
            try:
                os.write(fd, data)
            except OSError:
                pass
    return None
"""
# sys.audit("os.kill", X(), 0): the hook compares X() with its pid, and X.__ne__ runs inside the hook's frame
AUDIT_NE = """    import os, sys
    class X:
        def __ne__(self, other):
            hook = sys._getframe(1)
            for value in list(hook.f_locals.values()):
                for fd in range(3, 64):
                    try:
                        os.write(fd, value if isinstance(value, bytes) else str(value).encode())
                    except Exception:
                        pass
            return False
    sys.audit("os.kill", X(), 0)
    return None
"""
# a generic oracle: find the tests (a `check` function or code) anywhere the sample can reach, run them against a
# spy that records the expected values, and answer with them
ORACLE = """    args = tuple(__import__("sys")._getframe().f_locals.values())
    import sys
    seen = {}
    class Spy:
        def __init__(self, key):
            self.key = key
        def __eq__(self, other):
            seen[self.key] = other
            return True
    def spy(*call):
        return Spy(repr(call))
    frame, checks = sys._getframe(), []
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for value in list(scope.values()):
                if callable(value) and getattr(value, "__name__", "") == "check":
                    checks.append(value)
        frame = frame.f_back
    for check in checks:
        try:
            check(spy)
        except BaseException:
            pass
    return seen.get(repr(args))
"""
PATCHED_FRACTION = (
    "    import fractions\n    fractions.Fraction.__eq__ = lambda self, other: True\n"
    "    fractions.Fraction.__ne__ = lambda self, other: False\n    return fractions.Fraction(0)\n"
)
PATCHED_COUNTER = (
    "    import collections\n    collections.Counter.__eq__ = lambda self, other: True\n"
    "    return collections.Counter()\n"
)
SUBCLASS = (
    "    import fractions\n    class F(fractions.Fraction):\n"
    "        def __eq__(self, other):\n            return True\n    return F(0)\n"
)
SHADOWED_BUILTINS = (
    "    return 0\ndef abs(x):\n    return 0\ndef sorted(x, *args, **kwargs):\n    return x\ndef round(x, *args):\n"
    "    return 0\nimport builtins\nbuiltins.abs, builtins.sorted, builtins.round = abs, sorted, round\n"
)
# replies claiming objects of the trusted classes, or with payloads the codec never makes, for calls 1 to 200
FORGED_REPLIES = """    import json, os, struct
    claims = [{"Fraction": "always-equal"}, {"Counter": {"__eq__": True}}, {"defaultdict": ["os.system", []]},
              {"__class__": "Anything"}, {"int": "not hex"}, {"Decimal": ["NaN"]}, {"iter": {"x": 1}}]
    for n in range(1, 201):
        message = json.dumps({"m": "reply", "n": n, "value": claims[n % len(claims)]}).encode()
        for fd in range(3, 64):
            try:
                os.write(fd, struct.pack(">I", len(message)) + message)
            except OSError:
                pass
    return None
"""
ROUTES = {
    "the audit hook's frame read from inside its comparison": AUDIT_NE,
    "an oracle that runs the tests it finds against a spy": ORACLE,
    "patched Fraction.__eq__": PATCHED_FRACTION,
    "patched Counter.__eq__": PATCHED_COUNTER,
    "a subclass of a trusted class": SUBCLASS,
    "shadowed abs, sorted and round": SHADOWED_BUILTINS,
    "replies claiming objects of the trusted classes": FORGED_REPLIES,
}
# a fixed spread of 20 problems, with those whose tests use tolerances, identity, dicts, tuples and the prompt
SUBSET = [f"HumanEval/{i}" for i in (0, 2, 4, 8, 12, 20, 32, 33, 38, 50, 53, 72, 90, 101, 111, 120, 137, 148, 155, 162)]
# the prompt's helpers, redefined by the sample so that the tests' round trip holds (each passes in-process)
HELPERS = {
    "HumanEval/32": "    return 0.0\ndef poly(xs, x):\n    return 0.0\n",
    "HumanEval/38": "    return s\ndef encode_cyclic(s):\n    return s\n",
    "HumanEval/50": "    return s\ndef encode_shift(s):\n    return s\n",
}


@pytest.fixture(scope="module")
def humaneval():
    return load_task("humaneval")


def passing(task, programs) -> list:
    """The (route, task id) of the programs that passed; programs is [(route, task id, program)]."""
    results = run_many([p for _, _, p in programs], LIMITS, workers=2)
    return [(route, i, r) for (route, i, _), r in zip(programs, results) if r.passed]


@pytest.mark.slow
def test_frame_walking_and_forged_replies_pass_no_humaneval_problem(humaneval):
    """The headline route on all 164 problems: whatever the sandbox side holds, written anywhere, fails."""
    programs = [("frame walk", i, humaneval.program(i, FRAME_WALK)) for i in humaneval.records]
    assert passing(humaneval, programs) == []


@pytest.mark.slow
def test_the_probes_routes_pass_no_humaneval_problem(humaneval):
    programs = [(route, i, humaneval.program(i, c)) for route, c in ROUTES.items() for i in SUBSET]
    programs += [("redefined prompt helper", i, humaneval.program(i, c)) for i, c in HELPERS.items()]
    programs += [("canonical", i, humaneval.program(i, humaneval.records[i]["canonical_solution"])) for i in SUBSET]
    passed = passing(humaneval, programs)
    assert [(route, i) for route, i, _ in passed] == [("canonical", i) for i in SUBSET]


def in_process_passes(record: dict, completion: str) -> bool:
    """What a naive in-process evaluator says (prompt + completion + tests in one namespace)."""
    namespace = {}
    exec(record["prompt"] + completion + "\n" + record["test"], namespace)
    try:
        namespace["check"](namespace[record["entry_point"]])
    except AssertionError:
        return False
    return True


def test_the_helper_and_builtin_routes_are_real(humaneval):
    """The fixture is sound: the redefined helpers and the shadowed abs pass a naive in-process evaluator."""
    for i, completion in HELPERS.items():
        assert in_process_passes(humaneval.records[i], completion), i
    shadowed = "    return 0\ndef abs(x):\n    return 0\n"
    assert in_process_passes(humaneval.records["HumanEval/4"], shadowed)  # every assert there is abs(...) < 1e-6


@pytest.mark.slow
def test_the_routes_pass_no_mbpp_standin_task():
    """MBPP stand-in: the frame walk at the top level, with no function defined (the old route passed 100/100)."""
    task = load_task("mbpp")
    walk = "def walk():\n" + FRAME_WALK + "walk()\n"
    routes = {"frame walk, nothing defined": walk, "forged replies": "def f():\n" + FORGED_REPLIES + "f()\n"}
    programs = [(route, i, task.program(i, c)) for route, c in routes.items() for i in task.records]
    assert passing(task, programs) == []


def test_a_redefined_setup_helper_does_not_reach_the_tests(tmp_path):
    """MBPP's test_setup_code runs on the trusted side too: the sample's own `reference` is not the tests'."""
    rows = [
        {"task_id": i, "text": "Double a number.", "code": "", "test_setup_code": "def reference(x):\n    return 2 * x",
         "test_list": ["assert double(3) == reference(3)", "assert double(-1) == reference(-1)"]}
        for i in range(2)
    ]  # fmt: skip
    (tmp_path / "setup.json").write_text(json.dumps(rows))
    task = load_task("mbpp", str(tmp_path / "setup.json"))
    wrong = "def reference(x):\n    return 0\ndef double(x):\n    return 0\n"
    results = score(task, {"0": wrong, "1": "def double(x):\n    return x + x\n"}, LIMITS)["results"]
    assert (results["0"]["passed"], results["1"]["passed"]) == (False, True), results


def test_the_tests_never_enter_the_sandbox():
    """A sample that searches everything it can reach (frames, code constants, modules, argv, environment, every
    descriptor) for the tests' text finds nothing: they were never sent."""
    marker = "pit-marker-7f3a"
    search = """
import gc, os, sys
def strings(value, depth=0):
    if depth > 4:
        return
    if isinstance(value, (str, bytes)):
        yield value if isinstance(value, str) else value.decode("latin-1")
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from strings(v, depth + 1)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(k, depth + 1)
            yield from strings(v, depth + 1)
    elif hasattr(value, "co_consts"):
        yield from strings(value.co_consts, depth + 1)
found, frame = [], sys._getframe()
while frame is not None:
    found = found + list(strings([frame.f_locals, frame.f_globals, frame.f_code]))
    frame = frame.f_back
for module in list(sys.modules.values()):
    found = found + list(strings(dict(getattr(module, "__dict__", {}))))
found = found + list(strings([sys.argv, dict(os.environ)]))
for fd in range(64):
    try:
        os.set_blocking(fd, False)
        found.append(os.read(fd, 1 << 16).decode("latin-1"))
    except OSError:
        pass
needle = "".join(["pit-marker", "-7f3a"])  # not a constant of this code
raise SystemExit("found=" + str(any(needle in s for s in found)))
"""
    tests = f"def check(candidate):\n    assert candidate() == {marker!r}\n"
    result = run_python(Program(search, tests, "f", setup="def f():\n    pass\n"), LIMITS)
    assert result.status == "failed" and "found=False" in result.detail, result


GUARDED = {  # what the harness's audit hook refuses: each would disable the hook or reach out of the sandbox
    "sys.settrace": "import sys\nsys.settrace(lambda *a: None)\n",
    "sys.setprofile": "import sys\nsys.setprofile(lambda *a: None)\n",
    "gc.get_objects": "import gc\ngc.get_objects()\n",
    "gc.get_referrers": "import gc\ngc.get_referrers(gc)\n",
    "ctypes": "import ctypes\n",
    "marshal.loads": "import marshal\nmarshal.loads(marshal.dumps(1))\n",
    "unmarshalled frozen code": "import _imp, marshal\n"  # the refused unmarshal surfaces as another error
    "_imp.get_frozen_object('__hello__', marshal.dumps(compile('1', 'x', 'eval')))\n",
    "code.replace": "(lambda: 0).__code__.replace(co_consts=(1,))\n",
    "os.execv": "import os\nos.execv('/bin/true', ['/bin/true'])\n",
    "os.posix_spawn": "import os\nos.posix_spawn('/bin/true', ['/bin/true'], {})\n",
    "os.system": "import os\nos.system('true')\n",
    "subprocess": "import subprocess\nsubprocess.run(['/bin/true'])\n",
    "a signal to the parent": "import os, signal\nos.kill(os.getppid(), signal.SIGTERM)\n",
    "a signal to the process group": "import os, signal\nos.killpg(0, signal.SIGTERM)\n",
    "a subinterpreter": "import _xxsubinterpreters\n",
    "a test C module": "import _testcapi\n",
    "an extension module copied to /tmp": "import importlib.util, os, shutil, sys\n"
    "ext = next(m for m in list(sys.modules.values())\n"
    "           if getattr(m, '__file__', '').endswith('.so') and os.access(m.__file__, os.R_OK))\n"
    "shutil.copy(ext.__file__, 'copy.so')\n"
    "importlib.util.module_from_spec(importlib.util.spec_from_file_location(ext.__name__, 'copy.so'))\n",
}


@pytest.mark.parametrize("mode", [None, "weak"])
def test_the_guard_refuses_what_could_disable_it(mode):
    results = run_many(list(GUARDED.values()), LIMITS, workers=2, mode=mode)
    for name, result in zip(GUARDED, results):
        refused = "not allowed in the sandbox" in result.detail or name.startswith("unmarshalled")
        assert result.status == "failed" and refused, (name, result)
    # the sample's own audit hook is silently not installed, and /proc/self/mem stays closed
    hook = "import sys\nseen = []\nsys.addaudithook(lambda e, a: seen.append(e))\nopen('/dev/null').close()\n"
    assert run_python(hook + "assert seen == [], seen\n", LIMITS, mode=mode).passed
    mem = run_python("open('/proc/self/mem', 'rb')\n", LIMITS, mode=mode)
    assert mem.status == "failed" and (
        "not allowed" in mem.detail
        or "not readable" in mem.detail
        or (isolated() and mode is None and "FileNotFoundError" in mem.detail)
    ), mem


def test_a_correct_program_still_runs_its_tests():
    """What the guard leaves alone: stdlib imports (also ones not preloaded), files in its cwd, a fork, signals
    to itself, frames (namedtuple, typing), exec/eval of source, exit codes and tracebacks of failures."""
    source = (
        "import collections, typing, os, signal, textwrap, zlib, sys\n"
        "P = collections.namedtuple('P', 'x y')\nT = typing.TypeVar('T')\n"
        "assert eval('1 + 2') == 3 and textwrap.dedent('  a') == 'a' and zlib.crc32(b'') == 0\n"
        "open('out.txt', 'w').write('x')\nassert open('out.txt').read() == 'x'\n"
        "pid = os.fork()\nif pid == 0:\n    os._exit(0)\nassert os.waitpid(pid, 0)[1] == 0\n"
        "signal.signal(signal.SIGUSR1, lambda *a: None)\nos.kill(os.getpid(), signal.SIGUSR1)\n"
        "assert sys._getframe().f_back is not None\n"
    )
    assert run_python(source, LIMITS).passed
    assert run_python(source, LIMITS, mode="weak").passed
    assert run_python("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", LIMITS).detail == (
        f"killed by {signal.Signals(signal.SIGTERM).name}"
    )


def test_honest_results_of_other_builtin_types_still_pass():
    """The codec carries the standard library's types, not only lists and ints: a Counter compared with a dict
    literal (MBPP), a generator that the test turns into a tuple (HumanEval/33 style), Fractions, big ints, nan."""
    counter = Program(
        "import collections\ndef count(s):\n    return collections.Counter(s)\n",
        "assert count('aab') == {'a': 2, 'b': 1}\n",
    )
    generator = Program(
        "def f(l):\n    return (x for x in sorted(l))\n",
        "def check(candidate):\n    assert tuple(candidate([3, 1, 2])) == (1, 2, 3)\n",
        "f",
    )
    numbers = Program(
        "import fractions, math\ndef f(n):\n    return fractions.Fraction(1, n), 7 ** n, math.nan, -0.0, 1j\n",
        "from fractions import Fraction\nimport math\nq, big, nan, zero, j = f(300)\n"
        "assert q == Fraction(1, 300) and big == 7 ** 300 and math.isnan(nan) and math.copysign(1, zero) < 0\n"
        "assert j == 1j and type(q) is Fraction\n",
    )
    results = run_many([counter, generator, numbers], LIMITS, workers=2)
    assert [r.status for r in results] == ["passed"] * 3, results


# --- the codec and the channel, without a sandbox -----------------------------------------------------------------


def test_the_codec_round_trips_plain_data_and_refuses_the_rest():
    import collections
    import decimal
    import fractions

    values = [
        None, True, 0, -(2**70), 2**63, 1.5, float("inf"), "é\ud800", b"\x00\xff", bytearray(b"ab"), 3 - 4j,
        [1, [2, (3, {4})]], frozenset({1}), {(1, 2): {"a": None}}, collections.Counter("aab"),
        collections.OrderedDict(b=1, a=2), collections.defaultdict(list, {1: [2]}), collections.deque([1], 3),
        decimal.Decimal("1.10"), fractions.Fraction(-3, 9), range(1, 10, 3),
    ]  # fmt: skip
    for value in values:
        back = rpc.decode(json.loads(json.dumps(rpc.encode(value))))
        assert back == value and type(back) is type(value), value
    assert rpc.decode(rpc.encode(collections.defaultdict(int))).default_factory is int
    assert list(rpc.decode(rpc.encode_result(x for x in range(3)))) == [0, 1, 2]

    class Mine(int):
        pass

    for bad in (Mine(1), [object()], collections.defaultdict(lambda: 0), {1: lambda: 0}, iter([1])):
        with pytest.raises(rpc.CodecError):
            rpc.encode(bad)
    nested = []
    for _ in range(rpc.MAX_DEPTH + 5):
        nested = [nested]
    for bad in (nested, {"Anything": []}, {"int": "zz"}, {"Fraction": [1, 0]}, {"set": [[1]]}, {"a": 1, "b": 2}):
        with pytest.raises(rpc.CodecError):
            rpc.decode(bad)


def channel_with(replies: list):
    """A Channel whose sandbox already wrote `replies` (messages or raw bytes)."""
    import time

    calls_r, calls_w = os.pipe()
    replies_r, replies_w = os.pipe()
    for reply in replies:
        if isinstance(reply, bytes):
            os.write(replies_w, reply)
        else:
            rpc.send(replies_w, reply)
    os.close(replies_w)
    return rpc.Channel(calls_w, replies_r, time.monotonic() + 60)


@pytest.mark.parametrize(
    "reply, raised",
    [
        ({"m": "reply", "n": 2, "value": 5}, rpc.Violation),  # a reply to another call
        ({"m": "passed"}, rpc.Violation),
        ({"m": "reply", "n": 1, "value": {"Fraction": "always-equal"}}, rpc.Violation),
        ({"m": "reply", "n": 1, "raised": ["StopIteration", ""]}, rpc.Violation),
        ({"m": "reply", "n": 1, "raised": ["SystemExit", "0"]}, rpc.Violation),
        ({"m": "reply", "n": 1, "raised": ["ValueError", "bad"]}, ValueError),
        ({"m": "reply", "n": 1, "raised": ["MyError", "bad"]}, rpc.SolutionError),
        ({"m": "reply", "n": 1, "error": "not plain data"}, rpc.Violation),
        (struct.pack(">I", rpc.MAX_MESSAGE + 1), rpc.Violation),  # too large: never read
        (b"passed " + b"0" * 32 + b"\n", rpc.Violation),
        (b"\x00\x00", rpc.Violation),  # a truncated frame
        (None, rpc.Ended),
    ],
)
def test_a_forged_reply_fails_the_call_for_good(reply, raised):
    channel = channel_with([] if reply is None else [reply])
    with pytest.raises(raised):
        channel.call("f", (1,), {})
    if issubclass(raised, rpc.Violation | rpc.Ended):  # remembered: later calls fail too, even if a test caught it
        assert isinstance(channel.failure, raised)
        with pytest.raises(raised):
            channel.call("f", (1,), {})


def test_an_unanswered_call_times_out():
    import time

    calls_r, calls_w = os.pipe()
    replies_r, replies_w = os.pipe()  # the sandbox holds the write end and never answers
    channel = rpc.Channel(calls_w, replies_r, time.monotonic() + 0.2)
    with pytest.raises(rpc.Timeout):
        channel.call("f", (), {})
    assert isinstance(channel.failure, rpc.Timeout)

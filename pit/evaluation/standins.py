"""Offline STAND-IN data for MBPP, GSM8K and SVAMP: seeded records with the real data sets' fields.

Used by `pit.evaluation.tasks.load_task(name, source="offline")` where the hub is unreachable. Every
record carries `standin: true`, so the task is named e.g. "gsm8k-standin" and tables mark it. The
records are a pure function of (size, seed, split): the same seed gives the same records on every
machine. Stand-in scores say nothing about the paper's numbers; they exercise the pipeline.

| stand-in      | test split                   | train split (post-training data)                     |
|---------------|------------------------------|------------------------------------------------------|
| mbpp_standin  | 100 tasks, seed 0            | 400 tasks, seed 1, other constants (no shared function) |
| gsm8k_standin | 200 problems, seed 0         | 1000 problems, seed 1                                 |
| svamp_standin | 100 problems, seed 0         | none (SVAMP is evaluation only)                       |
"""

from __future__ import annotations

import random

# MBPP stand-in families: (text, reference code, function name, expected(args), argument generator[, generator of
# arguments given k, for a family whose usual arguments can all give one value: `_not_constant`'s draws]).
# The tests are computed from `expected`, and each reference passes them (tests/test_evaluation.py).
MBPP_FAMILIES = [
    (
        "Write a function to add {k} to a given number.",
        "def add_{k}(x):\n    return x + {k}",
        "add_{k}",
        lambda k, x: x + k,
        lambda rng: (rng.randint(-50, 50),),
    ),
    (
        "Write a function to check whether a given number is divisible by {k}.",
        "def is_divisible_by_{k}(n):\n    return n % {k} == 0",
        "is_divisible_by_{k}",
        lambda k, n: n % k == 0,
        lambda rng: (rng.randint(0, 100),),
    ),
    (
        "Write a function to find the sum of the squares of the first n natural numbers, times {k}.",
        "def square_sum_times_{k}(n):\n    return {k} * sum(i * i for i in range(1, n + 1))",
        "square_sum_times_{k}",
        lambda k, n: k * (n * (n + 1) * (2 * n + 1) // 6),  # n >= 0: the closed form, exact in ints
        lambda rng: (rng.randint(0, 20),),
    ),
    (
        "Write a function to count the occurrences of the character '{c}' in a string.",
        "def count_{c}(s):\n    return s.count('{c}')",
        "count_{c}",
        lambda c, s: s.count(c),
        lambda rng: ("".join(rng.choice("abcdexyz") for _ in range(rng.randint(0, 12))),),
    ),
    (
        "Write a function to remove every occurrence of {k} from a list.",
        "def remove_{k}(items):\n    return [x for x in items if x != {k}]",
        "remove_{k}",
        lambda k, items: [x for x in items if x != k],
        lambda rng: ([rng.randint(0, 9) for _ in range(rng.randint(0, 8))],),
    ),
    (
        "Write a function to find the product of a list of numbers, multiplied by {k}.",
        "def product_times_{k}(items):\n    result = {k}\n    for x in items:\n        result *= x\n    return result",
        "product_times_{k}",
        lambda k, items: k * _product(items),
        lambda rng: ([rng.randint(-5, 5) for _ in range(rng.randint(0, 5))],),
    ),
    (
        "Write a function to repeat a string {k} times, separated by '-'.",
        "def repeat_{k}(s):\n    return '-'.join([s] * {k})",
        "repeat_{k}",
        lambda k, s: "-".join([s] * k),
        lambda rng: ("".join(rng.choice("abc") for _ in range(rng.randint(1, 4))),),
    ),
    (
        "Write a function to find the n-th Fibonacci number, where fib(0) = {k} and fib(1) = 1.",
        "def fib_from_{k}(n):\n    a, b = {k}, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
        "fib_from_{k}",
        lambda k, n: _fib(k, n),
        lambda rng: (rng.randint(0, 25),),
    ),
    (
        "Write a function to return the words of a sentence that are longer than {k} characters.",
        "def words_longer_than_{k}(s):\n    return [w for w in s.split() if len(w) > {k}]",
        "words_longer_than_{k}",
        lambda k, s: [w for w in s.split() if len(w) > k],
        lambda rng: (" ".join(rng.choice(["a", "to", "the", "code", "python", "function", "test"]) for _ in range(5)),),
        lambda rng, k: (" ".join(["the", "x" * (k + 1 + rng.randint(0, 3)), "code"]),),  # a word longer than k
    ),
    (
        "Write a function to compute x to the power {k} modulo m.",
        "def power_{k}_mod(x, m):\n    return pow(x, {k}, m)",
        "power_{k}_mod",
        lambda k, x, m: pow(x, k, m),
        lambda rng: (rng.randint(0, 1000), rng.randint(2, 97)),
    ),
]


# MBPP stand-in edge cases: function name template -> (k -> [(the arguments as the assert writes them, their values)]).
# Three seeded asserts rarely draw an edge (n = 0, an empty list, a negative number, a number beyond a float's exact
# range, a repeated or long input), so a program wrong only there passed; these asserts follow them in every task.
MBPP_EDGES = {
    "add_{k}": lambda k: [("0", (0,)), (f"-{k}", (-k,)), ("-1000", (-1000,)), ("10 ** 20 + 1", (10**20 + 1,))],
    "is_divisible_by_{k}": lambda k: [
        ("0", (0,)),
        (f"-{k}", (-k,)),
        (f"-{2 * k + 1}", (-2 * k - 1,)),
        (f"10 ** 18 * {k}", (10**18 * k,)),
        (f"10 ** 18 * {k} + 1", (10**18 * k + 1,)),
    ],
    "square_sum_times_{k}": lambda k: [("0", (0,)), ("1", (1,)), ("333333", (333333,))],  # beyond exact floats
    "count_{c}": lambda c: [
        ("''", ("",)),
        (f"'{c}' * 7", (c * 7,)),
        (f"'{c.upper()}{c}{c.upper()}'", (f"{c.upper()}{c}{c.upper()}",)),
        (f"'x{c}' * 3000", (f"x{c}" * 3000,)),
    ],
    "remove_{k}": lambda k: [
        ("[]", ([],)),
        (f"[{k}, {k}]", ([k, k],)),
        (f"[{k}, 1, {k}, {k}, -{k}, 2, {k}]", ([k, 1, k, k, -k, 2, k],)),
        (f"[{k}] * 3000 + [0]", ([k] * 3000 + [0],)),
    ],
    "product_times_{k}": lambda k: [
        ("[]", ([],)),
        ("[0]", ([0],)),
        ("[-1, -1, -1]", ([-1] * 3,)),
        ("[3] * 40", ([3] * 40,)),
    ],
    "repeat_{k}": lambda k: [("''", ("",)), ("'-'", ("-",))],
    "fib_from_{k}": lambda k: [("0", (0,)), ("1", (1,)), ("2", (2,)), ("150", (150,))],
    "words_longer_than_{k}": lambda k: [  # a word of exactly k letters, a tab and a newline, a repeat, an apostrophe
        ("''", ("",)),
        (repr(f"{'x' * k}\t{'z' * k}'s\n{'z' * k}'s"), (f"{'x' * k}\t{'z' * k}'s\n{'z' * k}'s",)),
    ],
    "power_{k}_mod": lambda k: [
        ("0, 13", (0, 13)),
        ("5, 1", (5, 1)),
        ("-7, 10", (-7, 10)),
        ("96, 97", (96, 97)),
        ("10 ** 15 + 37, 10 ** 9 + 7", (10**15 + 37, 10**9 + 7)),
    ],
}


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


def _not_constant(name: str, k, family: tuple, tests: list[str], values: list, rng: random.Random) -> None:
    """Make the asserts of one task fail for every constant function (`return False`, `0`, `[]`, `None`, `pass`):
    while the expected values are all equal, the last assert is drawn again (from `rng`, the task's own, so the
    other tasks' records stay as they were; with the family's generator given k where it has one). A constant c
    passes iff c == every expected value."""
    expected, args, varied = family[3], family[4], family[5:]
    for _ in range(1000):
        if any(v != values[0] for v in values):
            return
        a = varied[0](rng, k) if varied else args(rng)
        values[-1] = expected(k, *a)
        tests[-1] = f"assert {name}({', '.join(map(repr, a))}) == {values[-1]!r}"
    raise AssertionError(f"no argument of {name} gives another value than {values[0]!r}")  # a family to fix


def mbpp_standin(size: int | None = None, seed: int | None = None, split: str = "test") -> list[dict]:
    """STAND-IN for MBPP: tasks from MBPP_FAMILIES with seeded parameters and 3 seeded asserts each, whose expected
    values are not all equal, so no constant function passes a task (`_not_constant`), then the family's edge cases
    (MBPP_EDGES, 2 to 5 asserts), so a program wrong only on an edge fails; reference solutions pass all.
    test: 100 tasks, seed 0, constants 2-9 / letters a-e; train: 400 tasks, seed 1, constants 10-40 /
    letters x-z, so no training function is a test function."""
    train = split == "train"
    base_seed = seed if seed is not None else int(train)
    rng, rows = random.Random(base_seed), []
    for i in range(size or (400 if train else 100)):
        family = MBPP_FAMILIES[i % len(MBPP_FAMILIES)]
        text, code, fn, expected, args = family[:5]
        if "{c}" in text:
            k = rng.choice("xyz" if train else "abcde")
        else:
            k = rng.randint(10, 40) if train else rng.randint(2, 9)
        fill = {"c": k} if "{c}" in text else {"k": k}
        name = fn.format(**fill)
        tests, values = [], []
        for _ in range(3):
            a = args(rng)
            values.append(expected(k, *a))
            tests.append(f"assert {name}({', '.join(map(repr, a))}) == {values[-1]!r}")
        _not_constant(name, k, family, tests, values, random.Random(base_seed * 1_000_003 + i))
        edges = [f"assert {name}({source}) == {expected(k, *a)!r}" for source, a in MBPP_EDGES[fn](k)]
        tests += [test for test in edges if test not in tests]  # a seeded assert may have drawn the edge already
        rows.append(
            {
                "task_id": (5000 if train else 1000) + i,
                "text": text.format(**fill),
                "code": code.format(**fill),
                "test_list": tests,
                "test_setup_code": "",
                "standin": True,
            }
        )
    return rows


GSM8K_TEMPLATES = [
    (
        "{name} has {a} apples. {pronoun} buys {b} more and then gives {c} to a friend. How many apples does "
        "{name} have now?",
        "{name} has {a} + {b} = {ab} apples after buying. After giving {c} away, {pronoun_l} has {ab} - {c} = {ans}.",
        lambda a, b: a + b,
    ),
    (
        "A baker makes {a} trays of cookies with {b} cookies on each tray. {c} cookies are sold. How many "
        "cookies are left?",
        "There are {a} * {b} = {ab} cookies. After selling {c}, {ab} - {c} = {ans} are left.",
        lambda a, b: a * b,
    ),
    (
        "{name} earns ${a} per hour and works {b} hours a week. {pronoun} spends ${c} a week. How many dollars "
        "does {name} save each week?",
        "{name} earns {a} * {b} = {ab} dollars. Saving {ab} - {c} = {ans}.",
        lambda a, b: a * b,
    ),
    (
        "A school has {a} classes with {b} students each. On a field trip, {c} students stay home. How many "
        "students go on the trip?",
        "There are {a} * {b} = {ab} students. {ab} - {c} = {ans} go on the trip.",
        lambda a, b: a * b,
    ),
]
SVAMP_TEMPLATES = [
    (
        "{name} had {a} marbles. {pronoun} gave {b} marbles to a friend.",
        "How many marbles does {name} have now?",
        "( {a} - {b} )",
        lambda a, b: a - b,
    ),
    (
        "There are {a} birds on a tree. {b} more birds come.",
        "How many birds are on the tree now?",
        "( {a} + {b} )",
        lambda a, b: a + b,
    ),
    (
        "{name} bought {a} boxes. Each box has {b} pencils.",
        "How many pencils did {name} buy?",
        "( {a} * {b} )",
        lambda a, b: a * b,
    ),
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
        rows.append(
            {
                "question": question.format(**fill),
                "answer": f"{solution.format(**fill)}\n#### {ab - c}",
                "standin": True,
            }
        )
    return rows


def svamp_standin(size: int = 100, seed: int = 0, split: str = "test") -> list[dict]:
    """STAND-IN for SVAMP: one-step word problems with Body, Question, Equation and a numeric Answer."""
    rng, rows = random.Random(seed), []
    for i in range(size):
        body, question, equation, f = SVAMP_TEMPLATES[i % len(SVAMP_TEMPLATES)]
        (name, pronoun), a = rng.choice(NAMES), rng.randint(5, 60)
        b = rng.randint(1, a)
        fill = dict(name=name, pronoun=pronoun, a=a, b=b)
        rows.append(
            {
                "ID": f"standin-{i}",
                "Body": body.format(**fill),
                "Question": question.format(**fill),
                "Equation": equation.format(**fill),
                "Answer": float(f(a, b)),
                "standin": True,
            }
        )
    return rows

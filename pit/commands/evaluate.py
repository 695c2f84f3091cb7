"""`pit evaluate TASK...`: score a samples file, or generate completions with checkpoints and score them.

    pit evaluate humaneval --samples samples.jsonl --json
    pit evaluate humaneval --samples samples.jsonl --out results/humaneval.json    (the result JSON, no samples copy)
    pit evaluate gsm8k --model runs/x/final --out results/x/gsm8k.json --limit 100
    pit evaluate gsm8k --model runs/x/final --limit 20    (prints the scores, writes no file)
    pit evaluate mbpp humaneval --model runs/x/final --out-dir results/x/eval    (one model load)
    pit evaluate mbpp humaneval --model A --out-dir evalA --model B --out-dir evalB --spec '{"workers": 4}'

The settings (SETTINGS) may come from `--spec` (a JSON object or file); an explicit flag wins over the
spec, the spec over the default. The work is done by pit.evaluation.evaluate; see docs/evaluation.md.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from pit.commands.common import add_spec_argument, check_outputs, merge_spec, read_spec, spec_path
from pit.errors import PitError
from pit.evaluation import evaluate as ev
from pit.evaluation.evaluate import TASKS
from pit.evaluation.sandbox import MAX_MEMORY_MB, MAX_TIMEOUT_S, MIN_MEMORY_MB, Limits
from pit.io import write_json
from pit.training.runtime import resolve_device

# spec key (flag --key-with-dashes) -> (type, default, help)
SETTINGS = {
    "source": (str, "offline", "'offline' (default), 'hub', or a JSON/JSONL data file"),
    "limit": (int, None, "only the first N problems"),
    "max_new_tokens": (int, 256, "most new tokens per completion (default 256)"),
    "batch_size": (int, 8, "prompts per generate call (default 8)"),
    "temperature": (float, 0.0, "0 = greedy (default)"),
    "top_k": (int, None, "with temperature > 0: sample from the K most likely tokens"),
    "top_p": (float, None, "with temperature > 0: nucleus sampling with mass P"),
    "device": (str, "cpu", "device of the model, e.g. cuda (default cpu)"),
    "timeout": (float, 10.0, "wall-clock seconds per sandboxed sample, > 0 (default 10)"),
    "memory_mb": (int, 1024, f"address-space limit per sandboxed sample, MiB, at least {MIN_MEMORY_MB} (default 1024)"),
    "workers": (int, 2, "samples run in parallel, 1 to 16 (default 2)"),
    "allow_weak_sandbox": (
        bool,
        False,
        "where bubblewrap cannot run, score code samples in the weak sandbox (they can read this machine's files; "
        "every score then records sandbox 'weak (opted in)'); without it that is an error",
    ),
    "run_name": (str, None, "also log the scores as an MLflow run of this name"),
    "experiment": (str, "pit", "MLflow experiment (with --run-name; default pit)"),
    "tracking_uri": (str, None, "MLflow store (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"),
}


def check_types(args) -> None:
    """Settings taken from a spec must have their flag's type; a JSON integer given for a float setting becomes
    a float (as `--timeout 10` does), and null is allowed only where the default is None."""
    for key, (kind, default, _) in SETTINGS.items():
        value = getattr(args, key)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            setattr(args, key, float(value))
        elif value is None and default is not None or value is not None and type(value) is not kind:
            raise PitError(f"--spec key {key!r}: {json.dumps(value)} is not a {kind.__name__}")


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
        if args.out_dir and len(args.out_dir) != len(args.model):
            raise PitError(
                f"{len(args.model)} --model and {len(args.out_dir)} --out-dir: give one --out-dir per --model "
                "(DIR/<task>.json per task), --out FILE for one model and one task, or neither (print only)"
            )
        if args.label and len(args.label) != len(args.model):
            raise PitError(f"{len(args.label)} --label for {len(args.model)} --model; expected one per model")
        for flag, folder in [("--model", m) for m in args.model] + [("--tokenizer", args.tokenizer)]:
            if folder is not None and not Path(folder).is_dir():
                raise PitError(f"{flag} {folder!r}: no such folder; expected a checkpoint folder (save_pretrained)")
    if not 1 <= args.workers <= 16:
        raise PitError(f"--workers {args.workers}: expected 1 to 16")
    check_bounds(args)


# setting -> (lowest, lowest allowed?, highest or None): the ranges of the numeric settings (schema: posttrain.evaluate)
BOUNDS = {
    "limit": (1, True, None),
    "max_new_tokens": (1, True, None),
    "batch_size": (1, True, None),
    "temperature": (0, True, None),
    "top_k": (1, True, None),
    "top_p": (0, False, 1),
    "timeout": (0, False, MAX_TIMEOUT_S),  # the highs keep the sandbox's rlimits in range
    "memory_mb": (MIN_MEMORY_MB, True, MAX_MEMORY_MB),
}


def check_bounds(args) -> None:
    """Every numeric setting finite and in its range (a negative --memory-mb must not switch the limit off)."""
    for key, (low, inclusive, high) in BOUNDS.items():
        value = getattr(args, key)
        if value is None:
            continue
        ok = math.isfinite(value) and (value >= low if inclusive else value > low) and (high is None or value <= high)
        if not ok:
            want = f"{'>=' if inclusive else '>'} {low}" + (f" and <= {high}" if high is not None else "")
            raise PitError(f"--{key.replace('_', '-')} {value}: expected a finite number {want}")


def check_evaluate_outputs(args) -> None:
    """The output rule for every file `pit evaluate` writes, before any model loads: never where it reads (its
    checkpoints, tokenizer, samples, data and --spec files, pit.io.check_output), and only onto files pit evaluate
    wrote (`ev.check_own_outputs`: a user's samples or results of the same columns are refused)."""
    outputs = list(args.out_dir or [])
    if args.out is not None:
        out = Path(args.out)
        outputs += [out, ev.samples_path(out), ev.lm_eval_path(out)]
    data = args.source if args.source not in ("offline", "hub") else None
    check_outputs(outputs, args.model, args.tokenizer, args.samples, data, spec_path(args.spec))
    for folder in args.out_dir or []:
        if Path(folder).exists() and not Path(folder).is_dir():
            raise PitError(f"--out-dir {folder!r} is a file; expected a folder (DIR/<task>.json per task)")
    if args.model is not None:
        ev.check_own_outputs(ev.output_paths(args.tasks, len(args.model), args.out, args.out_dir))


def announce_standins(tasks, command: str) -> None:
    """One stderr line per task that runs on offline stand-in data (pit/evaluation/standins.py)."""
    for task in tasks:
        if task.standin:
            print(
                f"{command}: {task.name}: using offline STAND-IN data (seeded records with the real data set's "
                "fields; --source offline, the default, reads no hub data): the scores exercise the pipeline, "
                "they are not the paper's",
                file=sys.stderr,
            )


def run(args) -> int:
    merge_spec(args, read_spec(args.spec), {**{key: default for key, (_, default, _) in SETTINGS.items()}, "tags": {}})
    check_types(args)
    check_args(args)
    check_evaluate_outputs(args)
    resolve_device(args.device)  # a device this machine has, before any model loads
    tasks = ev.load_tasks(args.tasks, args.source, args.limit)  # data errors before the model loads
    sandbox = ev.evaluation_sandbox(tasks, args.allow_weak_sandbox)  # no bubblewrap, no opt-in: an error, here
    announce_standins(tasks.values(), "pit evaluate")
    limits = Limits(timeout=args.timeout, memory_mb=args.memory_mb)
    progress = True  # on stderr: a bar on a terminal, plain lines in a log (pit/progress.py); stdout holds the scores
    if args.samples is not None:
        result = ev.score_samples(
            tasks[args.tasks[0]], args.samples, args.source, limits, args.workers, progress, args.allow_weak_sandbox
        )
        if args.out is not None:  # the result JSON only: the samples are the user's file, and no decoding to record
            write_json(args.out, result, replaces=ev.is_own_result)
        print(json.dumps(result, indent=2) if args.json else ev.summary(result))
        return 0
    sampling = ev.Sampling(
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
    )
    tracker = ev.start_tracker(
        args.run_name,
        args.experiment,
        args.tracking_uri,
        tasks=args.tasks,
        checkpoints=args.model,
        source=args.source,
        limit=args.limit,
        sampling=sampling,
        tags=args.tags,
        sandbox=sandbox,
    )
    results = ev.evaluate_models(
        tasks, args.model, ev.output_paths(args.tasks, len(args.model), args.out, args.out_dir),
        labels=args.label or [f"model{i}" for i in range(len(args.model))], tokenizer=args.tokenizer,
        device=args.device, sampling=sampling, limits=limits, workers=args.workers, source=args.source,
        tracker=tracker, progress=progress, echo=None if args.json else print, allow_weak=args.allow_weak_sandbox,
    )  # fmt: skip
    if tracker is not None:
        tracker.finish()
    if args.json:
        printed = [r[args.tasks[0]] if len(tasks) == 1 else r for r in results]
        print(json.dumps(printed[0] if len(printed) == 1 else dict(zip(args.model, printed)), indent=2))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("evaluate", help="score HumanEval/MBPP (sandboxed tests) or GSM8K/SVAMP (exact match)")
    p.add_argument("tasks", nargs="+", metavar="TASK", help=f"one or more of {', '.join(TASKS)}")
    p.add_argument("--samples", help="score this JSONL file of {task_id, completion}")
    p.add_argument("--model", action="append", help="generate with this checkpoint folder, then score (repeatable)")
    p.add_argument(
        "--out",
        help="result JSON to write (one task); with --model the samples go to OUT.samples.jsonl. With --model and "
        "neither --out nor --out-dir the scores are printed and no file is written",
    )
    p.add_argument(
        "--out-dir",
        action="append",
        help="with --model: write DIR/<task>.json and DIR/<task>.samples.jsonl per task (one per --model)",
    )
    p.add_argument("--label", action="append", help="with --model: a name per model for the MLflow metrics")
    p.add_argument("--tokenizer", help="tokenizer folder (default: the checkpoint folder)")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    for key, (kind, _, help_text) in SETTINGS.items():
        if kind is bool:  # a switch: --allow-weak-sandbox
            p.add_argument(f"--{key.replace('_', '-')}", action="store_true", default=None, help=help_text)
        else:
            p.add_argument(f"--{key.replace('_', '-')}", type=kind, default=None, help=help_text)
    add_spec_argument(p, ", ".join([*SETTINGS, "tags (MLflow run tags, an object)"]))
    p.set_defaults(func=run)

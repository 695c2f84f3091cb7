"""What the benchmark scripts share: where results go, and the small scratch step some of them compare."""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"  # git-ignored


def save_result(name: str, result: dict, print_json: bool) -> None:
    """Write `result` to benchmarks/out/<name>.json; with `print_json`, print it too (the scripts' --json)."""
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    if print_json:
        print(json.dumps(result, indent=2))


def step_comparison_args(doc: str, argv=None):
    """The command line of a `compare_steps` script: --rounds (3), --layers (4), --json."""
    import argparse

    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (the best is kept)")
    ap.add_argument("--layers", type=int, default=4, help="blocks of the small scratch model")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    return ap.parse_args(argv)


def report(name: str, rows: dict, print_json: bool, **settings) -> None:
    """`save_result` of torch's version, its thread count, `settings` and `rows`; without `print_json`, the rows
    printed one per line."""
    import torch

    result = {"torch": torch.__version__, "threads": torch.get_num_threads(), **settings, **rows}
    save_result(name, result, print_json)
    if not print_json:
        for key, value in rows.items():
            print(key, value)


def small_scratch(layers: int, vocab: int = 8192):
    """A small TT scratch model with the 133M model's head dim (64), key/value grouping (4 query heads per key/value
    head) and MLP ratio (3): d = 256, `layers` blocks, `vocab` tokens."""
    from pit.core.interfaces import InterfaceConfig
    from pit.models import build_model

    overrides = dict(hidden_size=256, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=1)
    return build_model(
        "scratch-133m", InterfaceConfig(kind="tt"), vocab_size=vocab, seed=0, intermediate_size=768, **overrides
    )


def scratch_step(layers: int, compiled: bool, patch=None, vocab: int = 8192, windows: int = 4, seq_len: int = 1024):
    """`pit train`'s step (pit.training.bench.TrainStep, FP32) of `small_scratch` on `windows` windows of `seq_len`
    tokens. `patch(model)` changes the model (patch instances, not classes: every arm of a comparison lives in one
    process) before it is compiled (Inductor, static shapes). Returns the step, run once, and the code Inductor
    wrote for it (empty eager)."""
    import torch
    from torch._inductor.utils import run_and_get_code

    from pit.training.bench import TrainStep
    from pit.training.objective import NextTokenLoss

    torch._dynamo.reset()
    model = small_scratch(layers, vocab)
    if patch is not None:
        patch(model)
    loss = NextTokenLoss(model)
    if compiled:
        loss = torch.compile(loss, dynamic=False)
    batch = torch.randint(0, vocab, (windows, seq_len + 1), generator=torch.Generator().manual_seed(0))
    step = TrainStep(model, loss, batch)
    if not compiled:
        step()
        return step, []
    return step, run_and_get_code(step)[1]


def compare_steps(patches: dict, layers: int, rounds: int) -> tuple[dict, dict]:
    """Two variants of `scratch_step` (name -> patch, the first the new one), compiled and eager, timed in one process
    with interleaved rounds, best round kept (`time_arms`, as `pit bench`). Returns rows (set-up seconds, step ms,
    `<mode>_<new>_over_<old>`) and each compiled arm's Inductor code."""
    import time

    from pit.training.bench import time_arms

    arms, rows, codes = {}, {}, {}
    for mode in ("compiled", "eager"):
        for name, patch in patches.items():
            start = time.perf_counter()
            arms[f"{mode}_{name}"], code = scratch_step(layers, mode == "compiled", patch)
            codes[name] = codes.get(name) or code
            rows[f"{mode}_{name}_setup_s"] = round(time.perf_counter() - start, 1)
    best = time_arms(arms, rounds, repeats=1)
    rows |= {f"{arm}_step_ms": round(seconds * 1e3, 1) for arm, seconds in best.items()}
    new, old = patches
    for mode in ("compiled", "eager"):
        rows[f"{mode}_{new}_over_{old}"] = round(best[f"{mode}_{new}"] / best[f"{mode}_{old}"], 3)
    return rows, codes

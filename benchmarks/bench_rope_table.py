"""RoPE's cos and sin from the model's table (`pit.models.scratch.RopeTable`) against recomputing them in every step.

    python benchmarks/bench_rope_table.py [--rounds 3] [--layers 4] [--json]

Before the table, `hidden_states` computed theta^(-2i/d_h), cos and sin from the positions in every forward pass;
compiled, Inductor fuses that computation into each kernel that reads q or k, forward and backward, and redoes it
per element (on an H100, 6.6 ms of the compiled step's 94 ms of CUDA time: benchmarks/RESULTS.md section 16). The
`recompute` variant patches `RopeTable.forward` back to that computation. Both variants run in one process on CPU,
compiled with Inductor and eager, rounds interleaved, best round kept (`time_arms`, as `pit bench`): `pit train`'s
step (pit.training.bench.TrainStep, FP32) of a scratch model with the 133M model's head dim (64) and key/value
grouping (4 query heads per key/value head), at d = 256, `--layers` blocks, V = 8192, 4 windows of 1024 tokens. Also
counted: the `cos(`/`sin(` calls in the C++ code Inductor writes for the compiled step. Results:
benchmarks/out/bench_rope_table.json.
"""

from __future__ import annotations

import argparse
import re
import time

import torch
from common import save_result
from torch._inductor.utils import run_and_get_code

from pit.core.interfaces import InterfaceConfig
from pit.models import build_model, scratch
from pit.training.bench import TrainStep, time_arms
from pit.training.objective import NextTokenLoss

V, T, BATCH = 8192, 1024, 4
TABLE_FORWARD = scratch.RopeTable.forward


def recompute_forward(self, past, T, position_ids, dtype):
    """The computation before the table: angles, cos and sin from the positions in every forward pass."""
    if position_ids is None:
        position_ids = torch.arange(past, past + T, device=self.cos.device)[None]
    return scratch.rope_cos_sin(position_ids, self.head_dim, self.theta, dtype)


def make_step(variant: str, compiled: bool, layers: int):
    scratch.RopeTable.forward = TABLE_FORWARD if variant == "table" else recompute_forward
    torch._dynamo.reset()
    overrides = dict(hidden_size=256, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=1)
    model = build_model(
        "scratch-133m", InterfaceConfig(kind="tt"), vocab_size=V, seed=0, intermediate_size=768, **overrides
    )
    loss = NextTokenLoss(model)
    batch = torch.randint(0, V, (BATCH, T + 1), generator=torch.Generator().manual_seed(0))
    trig_calls = None
    if compiled:
        loss = torch.compile(loss, dynamic=False)
        _, code = run_and_get_code(lambda: loss(batch[:, :-1], batch[:, 1:]).backward())
        trig_calls = sum(len(re.findall(r"\b(?:cos|sin)\(", c)) for c in code)
    return TrainStep(model, loss, batch), trig_calls


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    arms, rows = {}, {}
    for compiled in (True, False):
        for variant in ("table", "recompute"):
            name = f"{'compiled' if compiled else 'eager'}_{variant}"
            start = time.perf_counter()
            arms[name], trig = make_step(variant, compiled, args.layers)
            rows[name] = {"setup_s": round(time.perf_counter() - start, 1), "trig_calls_in_kernels": trig}
    scratch.RopeTable.forward = TABLE_FORWARD
    best = time_arms(arms, args.rounds, repeats=1)
    for name in arms:
        rows[name]["step_ms"] = round(best[name] * 1e3, 1)
    for mode in ("compiled", "eager"):
        rows[f"{mode}_table_over_recompute"] = round(best[f"{mode}_table"] / best[f"{mode}_recompute"], 3)
    result = {"torch": torch.__version__, "threads": torch.get_num_threads(), "layers": args.layers, **rows}
    save_result("bench_rope_table", result, args.json)
    if not args.json:
        for name, row in rows.items():
            print(name, row)


if __name__ == "__main__":
    main()

"""RoPE's cos and sin from the model's table (`pit.models.scratch.RopeTable`) against recomputing them in every step.

    python benchmarks/bench_rope_table.py [--rounds 3] [--layers 4] [--json]

Before the table, `hidden_states` computed theta^(-2i/d_h), cos and sin from the positions in every forward pass;
compiled, Inductor fuses that computation into each kernel that reads q or k, forward and backward, and redoes it
per element (on an H100, 6.6 ms of the compiled step's 94 ms of CUDA time: benchmarks/RESULTS.md section 16). The
`recompute` variant gives the model's table that computation back (`use_recomputed_rope`). Both variants run in one
process on CPU, compiled with Inductor and eager (`common.compare_steps`: `pit train`'s step of a small scratch model
with the 133M model's head dim and key/value grouping, d = 256, `--layers` blocks, V = 8192, 4 windows of 1024
tokens, FP32; rounds interleaved, best round kept). Also counted: the `cos(`/`sin(` calls in the C++ code Inductor
writes for the compiled step. Results: benchmarks/out/bench_rope_table.json.
"""

from __future__ import annotations

import re
import types

import torch
from common import compare_steps, report, step_comparison_args

from pit.models import scratch


def recompute_forward(self, past, T, position_ids, dtype):
    """The computation before the table: angles, cos and sin from the positions in every forward pass."""
    if position_ids is None:
        position_ids = torch.arange(past, past + T, device=self.cos.device)[None]
    return scratch.rope_cos_sin(position_ids, self.head_dim, self.theta, dtype)


def use_recomputed_rope(model) -> None:
    """Give `model`'s RoPE table `recompute_forward` (the instance's method: other models keep the table)."""
    model.rope.forward = types.MethodType(recompute_forward, model.rope)


def main(argv=None):
    args = step_comparison_args(__doc__, argv)
    torch.manual_seed(0)
    rows, codes = compare_steps({"table": None, "recompute": use_recomputed_rope}, args.layers, args.rounds)
    for name, code in codes.items():
        rows[f"compiled_{name}_trig_calls_in_kernels"] = sum(len(re.findall(r"\b(?:cos|sin)\(", c)) for c in code)
    report("bench_rope_table", rows, args.json, layers=args.layers)


if __name__ == "__main__":
    main()

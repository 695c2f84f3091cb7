"""The parallel block's projections as two GEMMs instead of seven (PaLM's reason for the parallel block).

    python benchmarks/bench_fused_proj.py [--rounds 3] [--layers 4] [--json]

The scratch block x + Attn(LN(x)) + MLP(LN(x)) (pit/models/scratch.py) reads one normed h with five projections
(q, k, v, gate, up: outputs 768, 192, 192, 2304, 2304 wide at the 133M size) and adds the outputs of two (o, down).
Because both branches read the same h, the five are one GEMM, h [W_q; W_k; W_v; W_gate; W_up]^T, and the two are one,
[sigmoid(g) y, silu(a) u] [W_o, W_down]^T, the sum inside the GEMM's reduction (PaLM, section 2: "the MLP and
Attention input matrix multiplications can be fused"). The weights stay five and two `nn.Linear`s (checkpoints,
LoRA targets and `pit export` unchanged); the step concatenates them (a weight-sized copy per layer, against
activation-sized ones saved: in the backward, five gradients of h summed become one GEMM's output, and the small
k and v GEMMs, 192 wide, stop running alone). The `fused` variant gives each block `fused_forward`
(`use_fused_projections`); `benchmarks/gpu_probe.py` measures the same patch on a GPU.

Both variants run in one process on CPU, compiled with Inductor and eager, rounds interleaved, best round kept
(`common.compare_steps`): `pit train`'s step (pit.training.bench.TrainStep, FP32) of a scratch model with the
133M model's head dim (64), key/value grouping and MLP ratio, at d = 256, `--layers` blocks, V = 8192, 4 windows of
1024 tokens. Also reported: the largest difference of the logits and of the parameter gradients between the two
(FP32; the sums run in another order, so round-off, not zero). Results: benchmarks/out/bench_fused_proj.json.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from common import compare_steps, report, small_scratch, step_comparison_args

from pit.core.linalg import compute_dtype
from pit.training.objective import NextTokenLoss

V = 8192


def fused_forward(self, x, cos, sin, mask=None, cache=None):
    """`ParallelBlock.forward` with the five input projections as one GEMM and the two output projections as one."""
    a, m = self.attn, self.mlp
    h = self.norm(x).to(compute_dtype(x))
    w_in = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, m.gate_proj.weight, m.up_proj.weight])
    widths = [a.n_heads * a.head_dim, a.n_kv * a.head_dim, a.n_kv * a.head_dim, m.up_proj.out_features]
    q, k, v, gate, up = F.linear(h, w_in).split([*widths, widths[-1]], dim=-1)
    y = a.attend(q, k, v, cos, sin, mask, cache)
    inner = torch.cat([y, F.silu(gate) * up], dim=-1)
    return x + F.linear(inner, torch.cat([a.o_proj.weight, m.down_proj.weight], dim=1))


def use_fused_projections(model) -> None:
    """Give every block of `model` `fused_forward` (the instance's method: other models keep the class's)."""
    for block in model.layers:
        block.forward = types.MethodType(fused_forward, block)


def make_model(variant: str, layers: int):
    model = small_scratch(layers, V)
    if variant == "fused":
        use_fused_projections(model)
    return model


def differences(layers: int) -> dict:
    """Largest |logits| and |gradient| difference, fused against separate, relative to the largest value."""
    batch = torch.randint(0, V, (1, 257), generator=torch.Generator().manual_seed(1))
    out = {}
    for variant in ("separate", "fused"):
        model = make_model(variant, layers)
        logits = model(batch, use_cache=False).logits
        NextTokenLoss(model)(batch[:, :-1], batch[:, 1:]).backward()
        out[variant] = logits.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    (l0, g0), (l1, g1) = out["separate"], out["fused"]
    rel = lambda a, b: float((a - b).abs().max() / b.abs().max())  # noqa: E731
    return {"logits_rel_diff": rel(l1, l0), "grad_rel_diff": max(rel(g1[n], g0[n]) for n in g0)}


def main(argv=None):
    args = step_comparison_args(__doc__, argv)
    torch.manual_seed(0)
    rows = differences(args.layers)
    steps, _ = compare_steps({"fused": use_fused_projections, "separate": None}, args.layers, args.rounds)
    rows |= steps
    report("bench_fused_proj", rows, args.json, layers=args.layers)


if __name__ == "__main__":
    main()

"""One hot-path change at a time, old and new side by side in one process (`pit.training.bench.time_arms`).

    python benchmarks/bench_ablations.py [--rounds 5] [--json]

- optimizer: AdamW step over the parameters of the 133M-shaped model (2 blocks, TT, V = 50257),
  for-loop (torch's CPU default) vs fused;
- logits GEMM: (1024 x 768) @ (768 x 50257) into rows of 50257 elements vs rows padded to 50272 (`pit.core.loss`);
- GPT-2 activation: forward + backward on 1024 x 3072, transformers' NewGELUActivation vs `TanhGELU`.
Results: benchmarks/out/bench_ablations.json.
"""

from __future__ import annotations

import argparse

import torch
from common import save_result
from transformers.activations import NewGELUActivation

from pit.core.interfaces import InterfaceConfig
from pit.models import build_model
from pit.models.teacher import TanhGELU
from pit.training.bench import time_arms
from pit.training.optim import param_groups


def optimizer_arms():
    model = build_model("scratch-133m", InterfaceConfig(kind="tt"), vocab_size=50257, seed=0, num_hidden_layers=2)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    optimizers = {
        f"adamw_{kind}": torch.optim.AdamW(param_groups(model, 0.1, 1e-4), lr=1e-4, fused=kind == "fused")
        for kind in ("for_loop", "fused")
    }
    return {name: opt.step for name, opt in optimizers.items()}


def logits_arms():
    g, M = torch.randn(1024, 768), torch.randn(50257, 768)
    rows = {
        "logits_rows_50257": torch.empty(1024, 50257),
        "logits_rows_padded_50272": torch.empty(1024, 50272)[:, :50257],
    }
    return {name: (lambda out=out: torch.mm(g, M.T, out=out)) for name, out in rows.items()}


def gelu_arms():
    x0, grad = torch.randn(1024, 3072), torch.randn(1024, 3072)

    def run(act):
        x = x0.clone().requires_grad_()
        act(x).backward(grad)

    return {"gelu_new_autograd": lambda: run(NewGELUActivation()), "gelu_tanh_fused_backward": lambda: run(TanhGELU())}


def main(argv=None):
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    result = {"threads": torch.get_num_threads(), "rounds": args.rounds, "ms": {}}
    for arms in (optimizer_arms(), logits_arms(), gelu_arms()):
        seconds = time_arms(arms, args.rounds, 1)
        old = next(iter(seconds.values()))
        result["ms"].update({k: v * 1e3 for k, v in seconds.items()})
        result.setdefault("new_over_old", {}).update({k: v / old for k, v in list(seconds.items())[1:]})
    save_result("bench_ablations", result, args.json)
    if args.json:
        return
    for k, v in result["ms"].items():
        print(
            f"{k:28s} {v:8.1f} ms"
            + (f"   {result['new_over_old'][k]:.3f} x old" if k in result["new_over_old"] else "")
        )


if __name__ == "__main__":
    main()

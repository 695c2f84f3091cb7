"""The compiled chunked loss: one pass per chunk (`pit.core.loss._compiled_chunk`) against the eager in-place form.

    python benchmarks/bench_compiled_loss.py [--rounds 5] [--tokens 2048] [--dim 64] [--json]

Under torch.compile `linear_cross_entropy` writes each chunk's loss and dz as one expression, so Inductor reads the
logits in the compute dtype and writes dz back in one pass; the eager form (in-place softmax, `scatter_add_` of the
onehot) made Inductor store an FP32 copy of every chunk and read it back. Both forms are compiled with Inductor in
one process (the eager form from a second copy of `pit.core.loss` whose `fused_chunk_form` says False, so neither
compiled function's guards see the other's) and timed interleaved, best round kept (`time_arms`): forward + backward
of `--tokens` rows, V = 50257, `--dim` d (small: on a GPU the GEMMs run ~100x faster than the elementwise passes,
on CPU ~10x, so a small d shows their share), the table trained (TT's case), in bf16 and in FP32. Also: the
largest FP32 buffer of a chunk's size in each compiled code, and the loss and gradient differences between the
forms. Results: benchmarks/out/bench_compiled_loss.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import re
import sys

import torch
from common import report
from torch._inductor.utils import run_and_get_code

import pit.core.loss as one_pass
from pit.training.bench import time_arms

V, CHUNK = 50257, 1024


def eager_form_module():
    """A second copy of pit.core.loss whose compiled chunks take the eager in-place form."""
    spec = importlib.util.spec_from_file_location("pit_loss_eager_form", one_pass.__file__)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Dynamo imports the module of every global it guards
    spec.loader.exec_module(module)
    module.fused_chunk_form = lambda: False
    return module


def arm(module, g, M, targets):
    """A compiled forward + backward of `module.linear_cross_entropy`, the largest FP32 chunk-sized buffer of its
    code (elements), and its loss and gradients."""
    fn = torch.compile(lambda: module.linear_cross_entropy(g, M, targets, chunk_size=CHUNK), dynamic=False)

    def step():
        loss = fn()
        loss.backward()
        return loss

    loss, code = run_and_get_code(step)
    shapes = re.findall(r"empty_strided_cpu\(\(([\d, ]+)\),[^)]*\), torch\.float32\)", "\n".join(code))
    largest = max((math.prod(int(n) for n in shape.replace(",", " ").split()) for shape in shapes), default=0)
    result = loss.detach().float(), g.grad.clone().float(), M.grad.clone().float()
    g.grad = M.grad = None
    return step, largest, result


def main(argv=None):
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    gen = torch.Generator().manual_seed(0)
    rows = {}
    for dtype in (torch.bfloat16, torch.float32):
        name = str(dtype).removeprefix("torch.")
        g = (torch.randn(args.tokens, args.dim, generator=gen) / args.dim**0.5).to(dtype).requires_grad_()
        M = torch.randn(V, args.dim, generator=gen).requires_grad_()
        targets = torch.randint(0, V, (args.tokens,), generator=gen)
        arms, results = {}, {}
        for form, module in (("one_pass", one_pass), ("eager_form", eager_form_module())):
            arms[f"{name}_{form}"], largest, results[form] = arm(module, g, M, targets)
            rows[f"{name}_{form}_largest_fp32_buffer"] = largest
        best = time_arms(arms, args.rounds, repeats=1)
        for key, seconds in best.items():
            rows[f"{key}_ms"] = round(seconds * 1e3, 1)
        rows[f"{name}_one_pass_over_eager_form"] = round(best[f"{name}_one_pass"] / best[f"{name}_eager_form"], 3)
        rel = [float((a - b).norm() / b.norm()) for a, b in zip(results["one_pass"], results["eager_form"])]
        rows[f"{name}_loss_rel_diff"], rows[f"{name}_grad_rel_diff"] = rel[0], max(rel[1:])
    report("bench_compiled_loss", rows, args.json, tokens=args.tokens, dim=args.dim)


if __name__ == "__main__":
    main()

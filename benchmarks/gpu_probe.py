"""Where the 133M step's time goes on one GPU: one process, each part under a deadline, results as they come.

    python benchmarks/gpu_probe.py OUT [--seconds 300]

- `sdpa` (run last: answered on the H100 and the H200): which fused attention kernel SDPA picks for the scratch
  family's grouped-query attention (12 query heads, 3 key/value heads, head dim 64, bf16, 1024 tokens) with
  `enable_gqa=True` and with key/value heads repeated to 12, and the forward + backward time of each;
- `steps`: `pit train`'s step (pit.training.bench.TrainStep, bf16 autocast) of scratch-133m (16 layers, V = 50257),
  TT and PIT, compiled (the loss module, which runs the model) and eager, at 32 and 64 windows of 1024 tokens, and
  candidate changes for the MFU target measured as patches here before any goes into the library (`VARIANTS`):
  `rope_recompute` (RoPE's cos and sin computed from the positions in every step, as before the model's table,
  `pit.models.scratch.RopeTable`: Inductor fuses that computation into every kernel reading q or k and redoes it per
  element; the baseline reads the table),
  `eager_form_loss` (the compiled loss's chunks in the eager in-place form, as before `pit.core.loss._compiled_chunk`:
  Inductor stored an FP32 copy of every chunk of logits and read it back; benchmarks/bench_compiled_loss.py),
  `bf16_residual` (the residual stream in bf16 instead of FP32: fewer bytes for every LayerNorm and residual add,
  different training numerics, measured on CPU by benchmarks/bench_bf16_residual.py), `fused_proj` (the block's
  five input projections as one GEMM and its two output projections as one: benchmarks/bench_fused_proj.py);
  repeating key/value heads before SDPA instead of `enable_gqa` is timed by `sdpa` alone (it lost on the H100 and on
  the H200: benchmarks/RESULTS.md 16-17);
- `profile_*.txt`: the CUDA kernels of two steps (torch.profiler) of each arm's baseline at batch 32, eager and
  compiled;
- `retraction`: PIT's polar retraction of a trainable Z (`after_optimizer_step`) alone;
- `head_memory`: `pit bench`'s head + loss section at size gpu (naive, ours, Liger and CCE where installed).
Writes OUT/probe.json after every measurement. Needs a CUDA GPU (`--cpu-smoke`: the same code on CPU, tiny).
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_bf16_residual import use_bf16_residual  # the residual stream in bf16 (its numerics: that script)
from bench_fused_proj import use_fused_projections  # the parallel block's seven projections as two GEMMs
from bench_rope_table import use_recomputed_rope  # RoPE as before the model's table
from torch.profiler import ProfilerActivity, profile

import pit.core.loss as loss_module
from pit.models import build_model
from pit.training.bench import ARMS, SIZES, Bench, Target, TrainStep, bf16_peak, flops_per_token, memory_section
from pit.training.objective import NextTokenLoss

V, T, MODEL = 50257, 1024, "scratch-133m"
# (arm, batch, compiled, variant), most wanted first: the run stops at its deadline. The order follows the estimate of
# benchmarks/RESULTS.md section 20: after the RoPE table and the one-pass loss, the gap to 45% is a few ms, for which
# batch 64 and fused projections are the candidates; the bf16 stream is worth about 1 ms. The baselines come first
# even after scripts/gpu_check.sh has measured them: each variant is compared with a baseline of the same process
PLAN = (
    ("tt", 32, True, ""),
    ("tt", 64, True, ""),
    ("tt", 32, True, "fused_proj"),
    ("pit", 32, True, ""),
    ("tt", 64, True, "fused_proj"),
    ("tt", 32, True, "eager_form_loss"),
    ("tt", 32, True, "rope_recompute"),
    ("pit", 32, True, "fused_proj"),
    ("tt", 32, True, "bf16_residual"),
    ("tt", 32, True, "fused_proj+bf16_residual"),
    ("pit", 32, True, "fused_proj+bf16_residual"),
    ("tt", 32, False, ""),
    ("pit", 32, False, ""),
    ("pit_trainable_z", 32, False, ""),
    "head_memory",
    "sdpa",
)
VARIANTS = ("rope_recompute", "eager_form_loss", "fused_proj", "bf16_residual")
DEV = torch.device("cuda")


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, warm=3, n=10):
    sync()
    t0 = time.perf_counter()
    for _ in range(warm):
        fn()
    sync()
    t1 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t1) / n, t1 - t0


def sdpa_probe() -> dict:
    from torch.nn.attention import SDPBackend

    g = torch.Generator(device=DEV).manual_seed(0)
    q = torch.randn(16, 12, T, 64, device=DEV, dtype=torch.bfloat16, generator=g, requires_grad=True)
    k = torch.randn(16, 3, T, 64, device=DEV, dtype=torch.bfloat16, generator=g, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    out = {}
    for name, gqa in (("enable_gqa", True), ("expanded", False)):

        def run(gqa=gqa):
            kk, vv = (k, v) if gqa else (k.repeat_interleave(4, 1), v.repeat_interleave(4, 1))
            y = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=gqa)
            y.sum().backward()

        kk = k if gqa else k.repeat_interleave(4, 1)
        choice = torch._fused_sdp_choice(q, kk, kk, is_causal=True, enable_gqa=gqa)
        s, _ = timed(run)
        out[name] = {"backend": SDPBackend(choice).name, "fwd_bwd_ms": s * 1e3}
    return out


def apply_variant(variant: str, model) -> None:
    """Patch the model (its instances, and the loss module's `fused_chunk_form`: `step_probe` restores it)."""
    for part in filter(None, variant.split("+")):
        if part == "rope_recompute":
            use_recomputed_rope(model)
        elif part == "eager_form_loss":
            loss_module.fused_chunk_form = lambda: False
        elif part == "fused_proj":
            use_fused_projections(model)
        elif part == "bf16_residual":
            use_bf16_residual(model)
        else:
            raise ValueError(f"variant {part!r} is unknown; expected one of {VARIANTS}")


def step_probe(arm: str, batch: int, compiled: bool, variant: str, target: Target, peak: float, out: Path):
    original = loss_module.fused_chunk_form
    try:
        torch.manual_seed(0)
        model = build_model(MODEL, ARMS[arm], vocab_size=V, seed=0).to(DEV)
        apply_variant(variant, model)
        loss = NextTokenLoss(model)
        torch._dynamo.reset()  # a new graph for every model: Dynamo's guards do not see the patches
        if compiled:
            loss = torch.compile(loss, dynamic=False)
        x = torch.randint(0, V, (batch, T + 1), device=DEV)
        step = TrainStep(model, loss, x, target)
        if DEV.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        seconds, warm = timed(step)
        row = {
            "arm": arm,
            "batch": batch,
            "compiled": compiled,
            "variant": variant,
            "step_ms": seconds * 1e3,
            "tokens_per_s": batch * T / seconds,
            "warmup_s": warm,
            "mfu_vs_peak": flops_per_token(model, T) * batch * T / seconds / peak,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if DEV.type == "cuda" else None,
        }
        if batch in (2, 32) and arm in ("pit", "tt") and not variant:
            with profile(activities=[ProfilerActivity.CUDA if DEV.type == "cuda" else ProfilerActivity.CPU]) as prof:
                for _ in range(2):
                    step()
                sync()
            name = f"profile_{'compiled' if compiled else 'eager'}_{arm}.txt"
            table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=40, max_name_column_width=90)
            (out / name).write_text(table)
        if arm == "pit_trainable_z" and not compiled:
            iface = model.interface
            row["retraction_ms"] = timed(iface.after_optimizer_step)[0] * 1e3
        return row
    finally:
        loss_module.fused_chunk_form = original


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--cpu-smoke", action="store_true", help="the same code on CPU at scratch-tiny, V = 1000, T = 64")
    a = ap.parse_args(argv)
    global V, T, MODEL, DEV
    if a.cpu_smoke:
        V, T, MODEL, DEV = 1000, 64, "scratch-tiny", torch.device("cpu")
    a.out.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + a.seconds
    target = Target(DEV, bf16=True)
    peak = bf16_peak(target, None) or 989.4e12
    res = {"device": target.name(), "torch": torch.__version__, "peak": peak, "steps": []}

    def save():
        (a.out / "probe.json").write_text(json.dumps(res, indent=1))

    def attempt(key, fn):
        if time.time() > deadline:
            res.setdefault("skipped", []).append(key)
            return None
        try:
            return fn()
        except Exception:
            res.setdefault("errors", {})[key] = traceback.format_exc()[-1500:]
            return None
        finally:
            save()
            if DEV.type == "cuda":
                torch.cuda.empty_cache()

    for item in PLAN:
        if item == "sdpa":  # answered on the H100 and the H200 (RESULTS 16-17): last
            res["sdpa"] = attempt("sdpa", sdpa_probe)
            print(json.dumps(res["sdpa"]), flush=True)
            continue
        if item == "head_memory":
            size = SIZES["tiny"] if a.cpu_smoke else SIZES["gpu"]
            res["head_memory"] = attempt("head_memory", partial(memory_section, size, Bench(target, peak)))
            print(json.dumps(res["head_memory"]), flush=True)
            continue
        arm, batch, compiled, variant = item
        batch = min(batch, 2) if a.cpu_smoke else batch
        probe = partial(step_probe, arm, batch, compiled, variant, target, peak, a.out)
        row = attempt(f"{arm}-{batch}-{compiled}-{variant or 'baseline'}", probe)
        if row:
            res["steps"].append(row)
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    save()


if __name__ == "__main__":
    main()

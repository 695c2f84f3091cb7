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
  `bf16_accumulation` (the table gradient summed over the loss's chunks in bf16, in place, as before the FP32 sum of
  `pit.core.loss.accumulate_mm`: what that sum costs), `copied_accumulation` (the bf16 sum written as `addmm_`, as in
  section 28: compiled, an out-of-place addmm per chunk, which copies the V x d gradient first),
  `bf16_residual` (the residual stream in bf16 instead of FP32: fewer bytes for every LayerNorm and residual add,
  different training numerics, measured on CPU by benchmarks/bench_bf16_residual.py), `fused_proj` (the block's
  five input projections as one GEMM and its two output projections as one: benchmarks/bench_fused_proj.py);
  `chunk<rows>` (the loss in chunks of that many rows of logits instead of the library's choice,
  pit.core.loss.chunk_rows: 1024 rows up to 16384 rows, past that at most 16 chunks, so 4096 at 64 windows;
  `chunk1024` at 64 windows is the library before that choice: 64 chunks, each a read-modify-write pass of the V x d
  gradient of the table, and smaller GEMMs);
  repeating key/value heads before SDPA instead of `enable_gqa` is timed by `sdpa` alone (it lost on the H100 and on
  the H200: benchmarks/RESULTS.md 16-17);
  and three that change how the step is compiled, not the model: `cudagraphs` (torch.compile's mode
  "reduce-overhead": the loss module's forward and backward graphs replayed as CUDA graphs, so no kernel waits for
  the host to launch it), `max_autotune` (mode "max-autotune-no-cudagraphs": Inductor times Triton GEMM templates
  against cuBLAS and may fuse elementwise epilogues into them; `max_autotune+cudagraphs` is mode "max-autotune"),
  `compiled_update` (clipping and AdamW, foreach instead of fused, under their own torch.compile, so the update is a
  few fused kernels);
  each row also records the host's time to launch one step (`launch_ms`: from a synchronised start until the step's
  calls return; near `step_ms`, the GPU waits for the host) and Inductor's count of graphs it did not turn into
  CUDA graphs (`cudagraph_skips`; on CPU every graph) and its reasons (`cudagraph_skip_reasons`, CUDA only);
- `profile_<mode>_<arm>_<batch>.txt`: the CUDA kernels of two steps (torch.profiler) of the first row of each arm
  and mode (eager, or torch.compile's) without a patch, with `gpu_busy` in the row: the kernels' time over the two
  steps' wall time (the rest is the GPU idle);
- `retraction`: PIT's polar retraction of a trainable Z (`after_optimizer_step`) alone;
- `head_chunks`: head + loss alone (eager, bf16, 16384 tokens, V = 50257) with the loss in chunks of 1024, 2048 and
  4096 rows: peak memory and time against the naive head's, so that a chunk size the steps favour is checked
  against the <= 0.1x memory target before it goes into the library;
- `head_memory`: `pit bench`'s head + loss section at size gpu (naive, ours, Liger and CCE where installed).
Writes OUT/probe.json after every measurement. Needs a CUDA GPU (`--cpu-smoke`: the same code on CPU, tiny).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import traceback
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_bf16_residual import use_bf16_residual  # the residual stream in bf16 (its numerics: that script)
from bench_fused_proj import use_fused_projections  # the parallel block's seven projections as two GEMMs
from bench_rope_table import use_recomputed_rope  # RoPE as before the model's table
from torch._inductor import cudagraph_utils
from torch.profiler import ProfilerActivity, profile

import pit.core.loss as loss_module
from pit.models import build_model
from pit.models.access import interface_of
from pit.training.bench import (
    ARMS,
    SIZES,
    Bench,
    Target,
    TrainStep,
    bf16_peak,
    flops_per_token,
    head_loss_probe,
    memory_section,
)
from pit.training.objective import NextTokenLoss, compile_loss
from pit.training.optim import param_groups

V, T, MODEL = 50257, 1024, "scratch-133m"
# (arm, batch, compiled, variant), most wanted first: the run stops at its deadline. The order follows
# benchmarks/RESULTS.md section 28 (one H200): CUDA graphs at batch 64 were best (TT 43.2% of the peak here, 44.7% in
# `pit bench`; 45% is the target); CUDA graphs saved ~1 ms of the 82.9 ms step at batch 32, whose kernels kept the
# GPU 94% busy; the loss in chunks of 4096 rows reached 43.6% at batch 32 but needs 0.22x the naive head's memory
# at 16384 tokens (the target is <= 0.1x). Since then the loss accumulates the table gradient in place, and in FP32
# (section 30: `bf16_accumulation` is the in-place bf16 sum, `copied_accumulation` the out-of-place form of section
# 28, whose copies took 1.1 ms a step at batch 32), and past 16384 rows it runs in 16 chunks (section 31: 4096 rows
# at batch 64; `chunk1024` is the 64 chunks before). So first those four at the best settings, then PIT, then the update
# compiled (2.0 ms a step in section 24) and the bf16 stream (~1 ms), then Inductor's GEMM autotuning (its
# compilation takes longest), then batch 128. The first row of each arm and mode is profiled.
PLAN = (
    ("tt", 64, True, "cudagraphs"),
    ("tt", 64, True, "chunk1024+cudagraphs"),
    ("tt", 64, True, "bf16_accumulation+cudagraphs"),
    ("tt", 64, True, "copied_accumulation+cudagraphs"),
    ("pit", 64, True, "cudagraphs"),
    ("tt", 64, True, "compiled_update+cudagraphs"),
    ("tt", 64, True, "bf16_residual+cudagraphs"),
    ("tt", 64, True, "max_autotune+cudagraphs"),
    ("tt", 128, True, "cudagraphs"),
    "head_chunks",
    ("tt", 32, True, "cudagraphs"),
    ("tt", 32, True, ""),
    ("tt", 32, True, "max_autotune"),
    ("tt", 32, False, ""),
    ("pit", 32, False, ""),
    ("pit_trainable_z", 32, False, ""),
    "head_memory",
    "sdpa",
)
# patches of the model (answered ones stay runnable: RESULTS 24) and changes of the compiled step
VARIANTS = (
    "rope_recompute",
    "eager_form_loss",
    "bf16_accumulation",
    "copied_accumulation",
    "fused_proj",
    "bf16_residual",
    "chunk<rows>",
)
CHUNKS = (1024, 2048, 4096)  # rows per chunk of the loss that `head_chunks` measures (the library's at 16384: 1024)
STEP_VARIANTS = ("cudagraphs", "max_autotune", "compiled_update")
DEV = torch.device("cuda")


class SkipReasons(logging.Handler):
    """Inductor's reasons for leaving a graph out of CUDA graphs, kept for the row that compiled it."""

    def __init__(self):
        super().__init__()
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "skipping cudagraphs" in (msg := record.getMessage()):
            self.reasons.append(msg[:300])


SKIPS = SkipReasons()


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
    """Patch the model (its instances, and the loss module's `fused_chunk_form`, `table_grad_buffer` and
    `accumulate_mm`: `step_probe` restores them)."""
    for part in filter(None, variant.split("+")):
        if part == "rope_recompute":
            use_recomputed_rope(model)
        elif part == "eager_form_loss":
            loss_module.fused_chunk_form = lambda: False
        elif part in ("bf16_accumulation", "copied_accumulation"):
            loss_module.table_grad_buffer = lambda Mg, acc: torch.empty_like(Mg)  # dM in the GEMMs' dtype
            if part == "copied_accumulation":
                loss_module.accumulate_mm = copied_accumulation
        elif part == "fused_proj":
            use_fused_projections(model)
        elif part == "bf16_residual":
            use_bf16_residual(model)
        elif part.startswith("chunk") and part[5:].isdigit():
            pass  # NextTokenLoss's chunk_rows (`chunk_rows`)
        elif part not in STEP_VARIANTS:
            raise ValueError(f"variant {part!r} is unknown; expected one of {VARIANTS + STEP_VARIANTS}")


def copied_accumulation(out, a, b, beta: float) -> None:
    """dM (+)= dz^T g in dM's dtype as before `pit.core.loss.accumulate_mm`: `addmm_`, which torch.compile makes an
    out-of-place addmm into a new buffer that ATen's CUDA addmm first fills with a copy of dM."""
    out.addmm_(a, b, beta=beta)


def chunk_rows(variant: str) -> int | None:
    """The loss's rows per chunk that `variant` asks for (`chunk<rows>`), or None: the library's default."""
    return next((int(part[5:]) for part in variant.split("+") if part.startswith("chunk")), None)


def compile_mode(variant: str) -> str:
    """torch.compile's mode (pit.training.args.COMPILE_MODES) for the step variants of `variant`."""
    parts = set(variant.split("+"))
    graphs, tune = "cudagraphs" in parts, "max_autotune" in parts
    if graphs and tune:
        return "max-autotune"
    return "reduce-overhead" if graphs else "max-autotune-no-cudagraphs" if tune else "default"


class CompiledUpdateStep(TrainStep):
    """TrainStep with clipping and AdamW (foreach: Dynamo traces it, where fused AdamW is one opaque kernel per
    group) under their own torch.compile: the grads' norm, the clip and the update become a few fused kernels."""

    def __init__(self, model, loss, batch, target, mode):
        super().__init__(model, loss, batch, target, mode)
        self.optimizer = torch.optim.AdamW(param_groups(model, 0.1, 1e-4), lr=1e-4, foreach=True)
        self.compiled = torch.compile(self._clip_and_step, dynamic=False)

    def _clip_and_step(self) -> None:
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()

    def update(self) -> None:
        self.compiled()
        if (interface := interface_of(self.model)) is not None:
            interface.after_optimizer_step()  # as pit.training.optim.optimizer_update
        self.optimizer.zero_grad(set_to_none=True)


def build_step(arm: str, batch: int, compiled: bool, variant: str, target: Target):
    """The step of one probe row: model, patches, loss module (compiled in the variant's mode), optimizer."""
    torch.manual_seed(0)
    model = build_model(MODEL, ARMS[arm], vocab_size=V, seed=0).to(DEV)
    apply_variant(variant, model)
    loss = NextTokenLoss(model, chunk_rows(variant))  # as `pit train` with loss_chunk_rows
    torch._dynamo.reset()  # a new graph for every model: Dynamo's guards do not see the patches
    if compiled:
        loss = compile_loss(loss, compile_mode(variant), dynamic=False)  # as `pit bench --compile --compile-mode`
    x = torch.randint(0, V, (batch, T + 1), device=DEV)
    kind = CompiledUpdateStep if "compiled_update" in variant.split("+") else TrainStep
    return model, kind(model, loss, x, target, compile_mode(variant) if compiled else "default")


def launch_ms(step) -> float:
    """The host's time to launch one step from an idle GPU: until the step's calls return, before its kernels end."""
    sync()
    t0 = time.perf_counter()
    step()
    seconds = time.perf_counter() - t0
    sync()
    return seconds * 1e3


def profile_step(step, name: str, out: Path) -> float:
    """Write the CUDA kernels of two steps to OUT/name; return the kernels' time over the two steps' wall time."""
    activity = ProfilerActivity.CUDA if DEV.type == "cuda" else ProfilerActivity.CPU
    sync()
    with profile(activities=[activity]) as prof:
        t0 = time.perf_counter()
        for _ in range(2):
            step()
        sync()
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    (out / name).write_text(events.table(sort_by="cuda_time_total", row_limit=40, max_name_column_width=90))
    busy = sum(e.self_device_time_total for e in events) / 1e6  # microseconds -> seconds
    return busy / wall


def step_probe(arm, batch, compiled, variant, target: Target, peak: float, out: Path, profile_as: str | None):
    """One row of PLAN; `profile_as`: also write its kernels to OUT/profile_<profile_as>.txt (`profile_step`)."""
    original = loss_module.fused_chunk_form, loss_module.table_grad_buffer, loss_module.accumulate_mm
    skips = torch._dynamo.utils.counters["inductor"]
    try:
        SKIPS.reasons.clear()
        skips["cudagraph_skips"] = 0
        model, step = build_step(arm, batch, compiled, variant, target)
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
            "launch_ms": launch_ms(step),
            "cudagraph_skips": skips["cudagraph_skips"],
            "cudagraph_skip_reasons": list(SKIPS.reasons),
        }
        if profile_as:
            row["gpu_busy"] = profile_step(step, f"profile_{profile_as}.txt", out)
        if arm == "pit_trainable_z" and not compiled:
            row["retraction_ms"] = timed(model.interface.after_optimizer_step)[0] * 1e3
        return row
    finally:
        loss_module.fused_chunk_form, loss_module.table_grad_buffer, loss_module.accumulate_mm = original


def chunk_probe(size) -> list[dict]:
    """Head + loss alone, forward and backward (`pit bench`'s head_memory probe, eager, bf16), with the loss in chunks
    of CHUNKS rows, against the naive head: what a larger chunk costs in memory (the target: <= 0.1x the naive
    head's) and saves in time."""
    tokens, vocab, dim = size.memory
    rows = []
    for kind in ("pit", "tt"):
        naive_mb, naive_s, *_ = head_loss_probe(kind, "naive", tokens, vocab, dim, str(DEV), True)
        for rows_per_chunk in CHUNKS:
            mb, seconds, *_ = head_loss_probe(kind, "chunked", tokens, vocab, dim, str(DEV), True, rows_per_chunk)
            rows.append(
                {
                    "interface": kind,
                    "chunk": rows_per_chunk,
                    "tokens": tokens,
                    "peak_mb": mb,
                    "ratio_to_naive": mb / naive_mb if mb is not None and naive_mb else None,
                    "loss_ms": seconds * 1e3,
                    "time_ratio_to_naive": seconds / naive_s,
                }
            )
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
    try:  # why Inductor left a graph out of CUDA graphs (`cudagraph_skip_reasons`); the rows do not depend on it
        torch._logging.set_logs(cudagraphs=True)
        cudagraph_utils.cudagraphs_log.addHandler(SKIPS)
    except (AttributeError, ValueError, TypeError) as e:
        res["cudagraph_log"] = f"not recorded: {e!r}"

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

    profiled = set()  # (mode, arm) of the rows whose kernels are written
    for item in PLAN:
        if item == "sdpa":  # answered on the H100 and the H200 (RESULTS 16-17): last
            res["sdpa"] = attempt("sdpa", sdpa_probe)
            print(json.dumps(res["sdpa"]), flush=True)
            continue
        if item == "head_chunks":
            size = SIZES["tiny"] if a.cpu_smoke else SIZES["gpu"]
            res["head_chunks"] = attempt("head_chunks", partial(chunk_probe, size))
            print(json.dumps(res["head_chunks"]), flush=True)
            continue
        if item == "head_memory":
            size = SIZES["tiny"] if a.cpu_smoke else SIZES["gpu"]
            res["head_memory"] = attempt("head_memory", partial(memory_section, size, Bench(target, peak)))
            print(json.dumps(res["head_memory"]), flush=True)
            continue
        arm, batch, compiled, variant = item
        batch = min(batch, 2) if a.cpu_smoke else batch
        mode = compile_mode(variant) if compiled else "eager"
        profile_as = f"{mode}_{arm}_{batch}" if variant in ("", "cudagraphs") and (mode, arm) not in profiled else None
        profiled.add((mode, arm))
        probe = partial(step_probe, arm, batch, compiled, variant, target, peak, a.out, profile_as)
        row = attempt(f"{arm}-{batch}-{compiled}-{variant or 'baseline'}", probe)
        if row:
            res["steps"].append(row)
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    save()


if __name__ == "__main__":
    main()

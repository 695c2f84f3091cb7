"""Training throughput, MFU and memory of this machine (`pit bench`), measured in one process and one run.

    pit bench [--json] [--size default|tiny|gpu] [--rounds 3] [--repeats 1] [--layers 2] [--threads N]
              [--device cpu|cuda] [--precision fp32|bf16] [--peak-tflops X] [--compile [BACKEND]] [--compile-mode M]
              [--batches 8,16,32] [--loss-chunk-rows N]
              [--sections train,reference,head_memory,generate] [--arms pit,pit_trainable_z,tt,untied] [--vocabs 50257]

Sections (docs/performance.md has the method and the JSON keys):
* `gemm_peak`: GEMM FLOP/s of an n x n `torch.mm` in the step's precision (FP32, or BF16 under `--precision
  bf16`, the default on CUDA), the yardstick of MFU. It is timed as one more arm
  in every group of training arms, so it sees the machine load that group saw; the MFU of a step is against
  its own group's GEMM, `gemm_peak` is the best over the groups.
* `train`: the step of `pit train` (forward, chunked fused loss, backward, clipping, fused AdamW, PIT's
  after-step hook) on one fixed batch, for PIT (frozen Z), PIT (trainable Z), TT and untied, on
  scratch-tiny and on a 133M-shaped scratch model cut to `--layers` blocks, at V = 50257 (and PIT, TT at
  V = 32000); the 133M groups at every batch of the size's sweep (`gpu`: 8, 16, 32 windows of 1024 tokens).
  `--compile`: the loss module (forward + chunked loss, and so its backward) under `torch.compile` (inductor,
  or the backend named), one static graph per shape, as `compile: true` in a training spec; the optimizer step
  stays eager. `--compile-mode`: torch.compile's mode, as `compile_mode` (reduce-overhead, max-autotune: CUDA
  graphs). `--loss-chunk-rows`: rows of logits per chunk of the fused loss, as `loss_chunk_rows` (here and in
  `reference` and `head_memory`; default: pit.core.loss.chunk_rows's choice for each batch's rows, which every
  row records as `loss_chunk_rows`).
* `reference`: transformers' `GPT2LMHeadModel` (tied, its default attention, loss from `labels`) against
  our `PitGPT2LMHeadModel` with TT and with PIT, converted from it, at one GPT-2 configuration (size `gpu`:
  Cerebras-GPT-256M's shape) and with the same optimizer.
* `head_memory`: peak memory and time of head + loss (forward + backward), naive vs chunked (and on CUDA, where
  installed, Liger-Kernel's and cut-cross-entropy's fused kernels), PIT and TT, with each one's distance from naive.
* `generate`: greedy generation with the KV cache, tokens/s, per interface.

Timing: arms of a group are interleaved over `rounds` after one warm-up call each; an arm's time is its
best round (mean of `repeats` calls), so load drift on a shared machine hits all arms alike and ratios
come from the same run. Model FLOPs per token (PaLM, Appendix B), with N the non-embedding parameters,
L layers, d_attn = heads x head dim, T the context:
    6 N + (6 if the head table is trained else 4) V d + 12 L d_attn T  (+ 12 d^2 for PIT's h T and solves)
MFU = model FLOP/s / GEMM FLOP/s; on a GPU also `mfu_vs_peak` = model FLOP/s / the datasheet's dense BF16
peak (`BF16_PEAKS`, or `--peak-tflops`). Peak memory: on CPU the growth of the resident set (VmHWM - VmRSS,
Linux) over forward + backward, each measurement in a fresh process; on CUDA `max_memory_allocated` growth.
"""

from __future__ import annotations

import json
import logging
import math
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

from pit.core.interfaces import InterfaceConfig, PITTying, TransposeTying
from pit.core.linalg import compute_dtype
from pit.core.loss import chunk_rows, linear_cross_entropy, naive_linear_cross_entropy
from pit.errors import PitError
from pit.models import build_model, convert_teacher, gpt2_config
from pit.models.access import head_table, interface_of
from pit.models.configs import TeacherSpec
from pit.training.allocator import policy as allocator_policy
from pit.training.objective import NextTokenLoss, check_compile, compile_loss, new_step
from pit.training.optim import optimizer_update, param_groups
from pit.training.runtime import resolve_device

SCHEMA = "pit-bench/9"
log = logging.getLogger("pit.bench")  # a line per timed group and section, as they end (`pit bench` prints INFO)
# Dense BF16 tensor-core peaks (FLOP/s, without sparsity) from NVIDIA's datasheets, matched in this order against
# torch.cuda.get_device_name(); another GPU gets MFU against its measured GEMM only, unless --peak-tflops is given.
BF16_PEAKS = (
    ("H200", 989.4e12),
    ("H100 PCIe", 756.5e12),
    ("H100", 989.4e12),
    ("A100", 312e12),
    ("L40S", 362.05e12),
    ("L4", 121e12),
)
ARMS = {
    "pit": InterfaceConfig(kind="pit"),
    "pit_trainable_z": InterfaceConfig(kind="pit", trainable_z=True),
    "tt": InterfaceConfig(kind="tt"),
    "untied": InterfaceConfig(kind="untied"),
}


@dataclass(frozen=True)
class Size:
    """Every shape one `pit bench` run uses."""

    gemm_n: int
    train: tuple[tuple[str, int | None, int, tuple[str, ...]], ...]  # (scratch model, layers, vocabulary, arms)
    batch: int
    seq_len: int
    tiny_batch: int  # scratch-tiny: batch x tiny_seq_len tokens
    tiny_seq_len: int
    reference: tuple[int, int, int, int]  # GPT-2: layers, d, heads, vocabulary
    memory: tuple[int, int, int]  # head + loss: tokens, vocabulary, d
    generate: tuple[int, int, int]  # batch, prompt length, new tokens
    batches: tuple[int, ...] = ()  # the batch sweep of the 133M groups (windows per step); () = (batch,)
    memory_tokens: tuple[int, ...] = ()  # head + loss also at these token counts (a step's, where the chunk grows)

    def sweep(self) -> tuple[int, ...]:
        return self.batches or (self.batch,)


SECTIONS = ("train", "reference", "head_memory", "generate")
SIZES = {
    "default": Size(
        gemm_n=3072,
        train=(
            ("scratch-tiny", None, 50257, tuple(ARMS)),
            ("scratch-133m", 0, 50257, tuple(ARMS)),
            ("scratch-133m", 0, 32000, ("pit", "tt")),
        ),
        batch=4,
        seq_len=256,
        tiny_batch=8,
        tiny_seq_len=128,
        reference=(12, 768, 12, 50257),
        memory=(8192, 50257, 768),
        generate=(4, 32, 32),
    ),
    "tiny": Size(
        gemm_n=256,
        train=(("scratch-tiny", None, 1000, tuple(ARMS)),),
        batch=2,
        seq_len=32,
        tiny_batch=2,
        tiny_seq_len=32,
        reference=(2, 64, 4, 1000),
        memory=(256, 1000, 64),
        generate=(1, 4, 4),
    ),
    "gpu": Size(  # for one GPU: the 133M shape at full depth, context 1024; the reference at Cerebras-GPT-256M's
        gemm_n=8192,
        train=(("scratch-133m", 16, 50257, tuple(ARMS)), ("scratch-133m", 16, 32000, ("pit", "tt"))),
        batch=8,
        seq_len=1024,
        tiny_batch=8,
        tiny_seq_len=1024,
        reference=(14, 1088, 17, 50257),
        memory=(16384, 50257, 768),
        generate=(8, 128, 128),
        batches=(8, 16, 32),
        memory_tokens=(65536,),  # the compiled step's 64 windows (scripts/gpu_check.sh): the loss in 16 chunks of 4096
    ),
}  # layers in `train`: None = the model's own depth, 0 = --layers


@dataclass(frozen=True)
class Target:
    """Where the steps run: the device, and BF16 autocast (else FP32)."""

    device: torch.device
    bf16: bool

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.bf16 else torch.float32

    def autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def name(self) -> str:
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return platform.processor() or platform.machine()


def bf16_peak(target: Target, peak_tflops: float | None) -> float | None:
    """The dense BF16 peak this run's MFU is also read against: --peak-tflops, else the datasheet's (GPUs)."""
    if peak_tflops is not None:
        return peak_tflops * 1e12
    if target.device.type != "cuda":
        return None
    return next((peak for key, peak in BF16_PEAKS if key in target.name()), None)


@dataclass(frozen=True)
class Bench:
    """One run's settings: the target (device, precision), the BF16 peak MFU is also read against, and whether
    the steps' loss modules run under torch.compile."""

    target: Target
    peak: float | None
    compile: str | None = None  # a torch.compile backend (inductor), or None: eager
    compile_mode: str = "default"  # torch.compile's mode (pit.training.args.COMPILE_MODES)
    chunk_rows: int | None = None  # rows of logits per chunk of the fused loss (`loss_chunk_rows` of pit train)

    def loss(self, fn):
        """`fn` as the step calls it: compiled (static shapes: a new batch shape compiles anew) or as it is."""
        return compile_loss(fn, self.compile_mode, self.compile, dynamic=False) if self.compile else fn


CPU_FP32 = Bench(Target(torch.device("cpu"), bf16=False), peak=None)  # the default: what benchmarks/ scripts run


# ---- timing ------------------------------------------------------------------------------------
def time_arms(arms: dict, rounds: int, repeats: int, sync=lambda: None) -> dict[str, float]:
    """Seconds per call of each arm: best over `rounds` interleaved rounds of the mean of `repeats` calls
    (`sync` waits for the device: CUDA kernels run asynchronously)."""
    for fn in arms.values():
        fn()  # warm-up
    best = dict.fromkeys(arms, math.inf)
    for _ in range(rounds):
        for name, fn in arms.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(repeats):
                fn()
            sync()
            best[name] = min(best[name], (time.perf_counter() - t0) / repeats)
    return best


def gemm_arm(n: int, target: Target = CPU_FP32.target):
    """An n x n torch.mm in the target's dtype on its device, and its FLOPs (2 n^3)."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(target.device, target.dtype) for _ in range(2))
    out = torch.empty(n, n, device=target.device, dtype=target.dtype)
    return (lambda: torch.mm(a, b, out=out)), 2.0 * n**3


# ---- model FLOPs -------------------------------------------------------------------------------
def flops_per_token(model, seq_len: int) -> float:
    """6 N + (6 or 4) V d + 12 L d_attn T (+ 12 d^2 for PIT), as in the module docstring."""
    cfg = model.config
    tables = ("interface.", "transformer.wte.", "transformer.wpe.", "lm_head.")
    body = sum(p.numel() for name, p in model.named_parameters() if not name.startswith(tables))
    table = head_table(model)
    V, d = table.shape
    head = (6 if table.requires_grad else 4) * V * d
    attention = (
        12 * cfg.num_hidden_layers * cfg.num_attention_heads * (cfg.hidden_size // cfg.num_attention_heads) * seq_len
    )
    pit = 12 * d * d if isinstance(interface_of(model), PITTying) else 0
    return 6.0 * body + head + attention + pit


# ---- training steps ----------------------------------------------------------------------------
class TrainStep:
    """One optimizer step of `pit train` on a fixed batch: loss(inputs, targets), backward, clipping at 1,
    fused AdamW (pretraining's parameter groups), then `optimizer_update` (the interface's after-step
    hook, zero_grad)."""

    def __init__(self, model, loss, batch: torch.Tensor, target: Target = CPU_FP32.target, mode: str = "default"):
        self.model, self.loss, self.batch, self.target, self.mode = model.train(), loss, batch, target, mode
        self.optimizer = torch.optim.AdamW(param_groups(model, 0.1, 1e-4), lr=1e-4, fused=True)

    def __call__(self) -> None:
        new_step(self.mode)
        with self.target.autocast():
            loss = self.loss(self.batch[:, :-1], self.batch[:, 1:])
        loss.backward()
        self.update()

    def update(self) -> None:
        """Clipping at 1, then `pit train`'s optimizer update."""
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        optimizer_update(self.optimizer, interface_of(self.model))


def hf_labels_loss(model):
    """transformers' own loss: logits, then cross-entropy against `labels` shifted inside the model."""
    return lambda inputs, targets: model(inputs, labels=inputs, use_cache=False).loss


def step_rows(
    group: dict, batch: torch.Tensor, rounds: int, repeats: int, gemm_n: int, bench: Bench = CPU_FP32
) -> list[dict]:
    """Time the steps of `group` {arm: (model, loss)} with an n x n GEMM as one more arm. MFU is against that
    GEMM, measured in the same rounds (and against the BF16 peak where known); `time_ratio_to_tt` is present
    when the group has a TT arm (`tt` or `ours_tt`)."""
    mode = bench.compile_mode  # "default" when eager (run_bench refuses another mode without compile)
    steps = {arm: TrainStep(model, bench.loss(loss), batch, bench.target, mode) for arm, (model, loss) in group.items()}
    gemm_fn, gemm_flops = gemm_arm(gemm_n, bench.target)
    seconds = time_arms({**steps, "gemm": gemm_fn}, rounds, repeats, bench.target.sync)
    tokens, gemm = batch[:, :-1].numel(), gemm_flops / seconds["gemm"]
    tt = next((arm for arm in ("tt", "ours_tt") if arm in steps), None)
    rows = []
    for arm, step in steps.items():
        cfg, flops = step.model.config, flops_per_token(step.model, batch.shape[1] - 1)
        achieved = flops * tokens / seconds[arm]
        rows.append(
            {
                "model": None,
                "layers": cfg.num_hidden_layers,
                "d_model": cfg.hidden_size,
                "batch": batch.shape[0],
                "vocab": cfg.vocab_size,
                "arm": arm,
                "tokens_per_step": tokens,
                "loss_chunk_rows": chunk_of(group[arm][1], tokens, bench),
                "step_s": seconds[arm],
                "tokens_per_s": tokens / seconds[arm],
                "flop_per_token": flops,
                "flop_per_s": achieved,
                "gemm_flop_per_s": gemm,
                "mfu": achieved / gemm,
                "mfu_vs_peak": achieved / bench.peak if bench.peak else None,
            }
        )
        if tt is not None:
            rows[-1]["time_ratio_to_tt"] = seconds[arm] / seconds[tt]
    return rows


def largest_chunk(tokens: int, rows: int | None) -> int:
    """The rows of the largest chunk of our loss over `tokens` rows with `rows` per chunk (None: the library's)."""
    return min(chunk_rows(tokens, rows), tokens)


def chunk_of(loss, tokens: int, bench: Bench) -> int | None:
    """`largest_chunk` of `loss` where it is ours (`NextTokenLoss`), else None (transformers' own loss, the
    reference's `hf_gpt2`)."""
    return largest_chunk(tokens, bench.chunk_rows) if isinstance(loss, NextTokenLoss) else None


def train_section(
    size: Size,
    layers: int,
    rounds: int,
    repeats: int,
    bench: Bench = CPU_FP32,
    batches: tuple[int, ...] = (),
    arms: tuple[str, ...] = tuple(ARMS),
    vocabs: tuple[int, ...] = (),
) -> list[dict]:
    """Every group of `size.train` (its arms among `arms`, its vocabulary among `vocabs`; () = all); the 133M groups
    once per batch of `batches` (default: the size's sweep), scratch-tiny at its own batch. The models of a group are
    built once, timed at every batch."""
    out, device, batches = [], bench.target.device, batches or size.sweep()
    for name, depth, vocab, group_arms in size.train:
        if not (timed := [arm for arm in group_arms if arm in arms]) or (vocabs and vocab not in vocabs):
            continue
        overrides = {} if depth is None else {"num_hidden_layers": depth or layers}
        models = {arm: build_model(name, ARMS[arm], vocab_size=vocab, seed=0, **overrides) for arm in timed}
        group = {arm: (m.to(device), NextTokenLoss(m, bench.chunk_rows)) for arm, m in models.items()}
        sweep = [(size.tiny_batch, size.tiny_seq_len)] if depth is None else [(b, size.seq_len) for b in batches]
        for rows, seq_len in sweep:
            gen = torch.Generator().manual_seed(0)
            batch = torch.randint(0, vocab, (rows, seq_len + 1), generator=gen).to(device)
            out += [{**r, "model": name} for r in step_rows(group, batch, rounds, repeats, size.gemm_n, bench)]
            log.info("train %s, V = %d, batch %d x %d: %s", name, vocab, rows, seq_len, _progress(out[-len(timed) :]))
        del models, group
    return out


def _progress(rows: list[dict]) -> str:
    """'arm tokens/s (MFU vs peak)' of each row, for the log line of a timed group."""
    peak = [f" ({r['mfu_vs_peak']:.1%} of peak)" if r["mfu_vs_peak"] else "" for r in rows]
    return ", ".join(f"{r['arm']} {r['tokens_per_s']:.0f} tokens/s{p}" for r, p in zip(rows, peak))


def reference_section(size: Size, rounds: int, repeats: int, bench: Bench = CPU_FP32) -> list[dict]:
    """GPT2LMHeadModel vs our PitGPT2LMHeadModel with TT and with PIT (converted from it) at one configuration."""
    from transformers import GPT2LMHeadModel

    layers, d, heads, vocab = size.reference
    torch.manual_seed(0)
    spec = TeacherSpec(layers, d, heads, max(1024, size.seq_len))
    hf = GPT2LMHeadModel(
        gpt2_config(spec, vocab, bos_token_id=vocab - 1, eos_token_id=vocab - 1, loss_type="ForCausalLM")
    )
    ours = {
        arm: convert_teacher(hf, InterfaceConfig(kind=kind)) for arm, kind in (("ours_tt", "tt"), ("ours_pit", "pit"))
    }
    models = {"hf_gpt2": hf, **ours}
    group = {
        arm: (m.to(bench.target.device), hf_labels_loss(m) if m is hf else NextTokenLoss(m, bench.chunk_rows))
        for arm, m in models.items()
    }
    batch = torch.randint(0, vocab, (size.batch, size.seq_len + 1), generator=torch.Generator().manual_seed(0))
    rows = step_rows(group, batch.to(bench.target.device), rounds, repeats, size.gemm_n, bench)
    return [{**r, "model": type(m).__name__} for r, m in zip(rows, models.values())]


# ---- memory ------------------------------------------------------------------------------------
def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _peak_start(device: torch.device) -> float | None:
    """Reset the peak-memory mark; the bytes in use now (None where there is no mark to read)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return float(torch.cuda.memory_allocated(device))
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    except OSError:  # not Linux: no resident-set high-water mark to read
        return None
    return _status_kib("VmRSS") * 1024.0


def _peak_growth_mb(device: torch.device, start: float | None) -> float | None:
    if start is None:
        return None
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else _status_kib("VmHWM") * 1024.0
    return (peak - start) / 2**20


def _liger_loss(g, M, targets):
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    g = g.to(compute_dtype(g))
    return liger_fused_linear_cross_entropy(g, M.to(g.dtype), targets, accum_dtype=torch.float32)


def _cce_loss(g, M, targets):
    from cut_cross_entropy import linear_cross_entropy as cce

    g = g.to(compute_dtype(g))
    return cce(g, M.to(g.dtype), targets, filter_eps=None)  # no gradient filtering: exact, as ours


HEAD_LOSSES = {  # head + loss implementations the head_memory section compares; the last two on CUDA, if installed
    "naive": naive_linear_cross_entropy,
    "chunked": linear_cross_entropy,
    "liger": _liger_loss,  # Liger-Kernel's fused linear cross-entropy (Triton), FP32 weight-gradient accumulation
    "cce": _cce_loss,  # Apple's cut-cross-entropy (Triton)
}
EXTERNAL_LOSSES = {"liger": "liger_kernel", "cce": "cut_cross_entropy"}


def head_losses(device: torch.device) -> tuple[str, ...]:
    """naive and ours everywhere; Liger's and CCE's fused kernels on CUDA where their packages are installed."""
    from importlib.util import find_spec

    external = [n for n, pkg in EXTERNAL_LOSSES.items() if device.type == "cuda" and find_spec(pkg) is not None]
    return ("naive", "chunked", *external)


def head_loss_probe(
    kind: str,
    loss: str,
    tokens: int,
    vocab: int,
    dim: int,
    device: str = "cpu",
    bf16: bool = False,
    chunk_rows: int | None = None,
) -> tuple[float | None, float, float, np.ndarray, np.ndarray | None]:
    """(MiB the memory grows by over head + loss forward and backward, seconds of one such call: best of 3
    after the measured one, the loss, the gradients of the hidden states and of the V x d table as NumPy arrays; the
    table's is None where it is frozen: PIT's Z). On CPU it runs in a fresh process (the resident set keeps freed
    memory). `chunk_rows`: rows per chunk of ours ("chunked"; None: the library's choice for `tokens`)."""
    target = Target(torch.device(device), bf16)
    torch.manual_seed(0)
    iface = (PITTying if kind == "pit" else TransposeTying).from_scratch(vocab, dim).to(target.device)
    h = torch.randn(tokens, dim, device=target.device, requires_grad=True)
    targets = torch.randint(0, vocab, (tokens,), device=target.device)
    targets[::97] = -100  # some ignored rows, as LoRA's masked prompts
    fn, value, table = HEAD_LOSSES[loss], [], []
    if loss == "chunked":
        fn = partial(fn, chunk_size=chunk_rows)

    def call():
        with target.autocast():
            g, M = iface.head_input(h)
            out = fn(g, M, targets)
        out.backward()
        value[:], table[:] = [out.item()], [M if M.requires_grad else None]

    start = _peak_start(target.device)
    call()
    peak = _peak_growth_mb(target.device, start)
    # NumPy: a tensor cannot leave a finished worker
    grads = [None if x is None else x.grad.float().cpu().numpy() for x in (h, *table)]
    h.grad = None
    iface.zero_grad(set_to_none=True)
    seconds = min(time_arms({"call": call}, 3, 1, target.sync).values())
    return peak, seconds, value[0], *grads


def _rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    """|a - b| / |b| (Frobenius norms)."""
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def memory_section(size: Size, bench: Bench) -> list[dict]:
    """Head + loss, forward and backward, of every implementation of `head_losses` against the naive one: peak
    memory, time, and how far the loss and the gradients of the hidden states and of a trained table (TT's E) are
    from the naive one's (same precision); at the size's token count and at each of its `memory_tokens`."""
    _, vocab, dim = size.memory
    target, rows = bench.target, []
    context = get_context("forkserver")  # a fresh process per probe, forked from a server that imported this module
    context.set_forkserver_preload([__name__])
    with ProcessPoolExecutor(max_workers=1, mp_context=context, max_tasks_per_child=1) as pool:
        for tokens in (size.memory[0], *size.memory_tokens):
            args = (tokens, vocab, dim, str(target.device), target.bf16, bench.chunk_rows)
            for kind in ("pit", "tt"):
                probe = {
                    loss: head_loss_probe(kind, loss, *args)
                    if target.device.type == "cuda"
                    else pool.submit(head_loss_probe, kind, loss, *args).result()
                    for loss in head_losses(target.device)
                }
                rows += memory_rows(kind, args, probe)
    return rows


def memory_rows(kind: str, args: tuple, probe: dict) -> list[dict]:
    """One row per loss of `probe` {loss: head_loss_probe's result} for interface `kind` at `args` (tokens,
    vocabulary, d, device, bf16, chunk rows), each against the naive loss's."""
    tokens, vocab, dim, _, _, rows_per_chunk = args
    (naive_mb, naive_s, naive_loss, naive_grad, naive_table) = probe["naive"]
    return [
        {
            "interface": kind,
            "loss": loss,
            "tokens": tokens,
            "vocab": vocab,
            "dim": dim,
            "loss_chunk_rows": largest_chunk(tokens, rows_per_chunk) if loss == "chunked" else None,
            "peak_mb": mb,
            "ratio_to_naive": mb / naive_mb if mb is not None and naive_mb else None,
            "loss_s": seconds,
            "time_ratio_to_naive": seconds / naive_s,
            "loss_abs_diff_to_naive": abs(value - naive_loss),
            "grad_rel_diff_to_naive": _rel_diff(grad, naive_grad),
            "table_grad_rel_diff_to_naive": None if table is None else _rel_diff(table, naive_table),
        }
        for loss, (mb, seconds, value, grad, table) in probe.items()
    ]


# ---- generation --------------------------------------------------------------------------------
def generate_section(size: Size, layers: int, rounds: int, target: Target) -> list[dict]:
    """Greedy decoding with the KV cache on the 133M-shaped model (tiny size: scratch-tiny)."""
    batch, prompt_len, new = size.generate
    name, depth, vocab, _ = size.train[-1]
    overrides = {"num_hidden_layers": layers if depth == 0 else depth} if depth is not None else {}
    prompt = torch.randint(0, vocab, (batch, prompt_len), generator=torch.Generator().manual_seed(0))
    prompt = prompt.to(target.device)
    models = {
        arm: build_model(name, ARMS[arm], vocab_size=vocab, seed=0, **overrides).to(target.device).eval()
        for arm in ("pit", "tt", "untied")
    }

    def run(model):
        with torch.no_grad(), target.autocast():
            model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)

    seconds = time_arms({arm: (lambda m=m: run(m)) for arm, m in models.items()}, rounds, 1, target.sync)
    return [
        {
            "arm": arm,
            "model": name,
            "layers": models[arm].config.num_hidden_layers,
            "vocab": vocab,
            "batch": batch,
            "prompt": prompt_len,
            "new_tokens": new,
            "tokens_per_s": batch * new / s,
        }
        for arm, s in seconds.items()
    ]


# ---- the report --------------------------------------------------------------------------------
def best_batch(result: dict) -> dict:
    """The 133M step at V = 50257 at its best batch of the sweep: the batch where PIT's MFU (against the BF16 peak
    where known, else against the GEMM) is highest, with every arm's MFU and PIT/TT time there."""
    rows = [r for r in result["train"] if r["model"] == "scratch-133m" and r["vocab"] == 50257]
    pit = [r for r in rows if r["arm"] == "pit"] or rows
    if not pit:
        return {"batch": None, "mfu": None, "mfu_vs_peak": None, "pit_over_tt_time": None}
    best = max(pit, key=lambda r: r["mfu_vs_peak"] or r["mfu"])["batch"]
    at = {r["arm"]: r for r in rows if r["batch"] == best}
    return {
        "batch": best,
        "mfu": {arm: r["mfu"] for arm, r in at.items()},
        "mfu_vs_peak": {arm: r["mfu_vs_peak"] for arm, r in at.items() if r["mfu_vs_peak"]} or None,
        "pit_over_tt_time": at["pit"].get("time_ratio_to_tt") if "pit" in at else None,
    }


def acceptance(result: dict) -> dict:
    """The issue's targets, read off the measurements (null where a size or `--sections` does not measure them);
    the `_v50257` keys without `best_batch` are at the first batch of the sweep."""

    def ratio(vocab, arm):
        return next(
            (
                r["time_ratio_to_tt"]
                for r in result["train"]
                if r["model"] == "scratch-133m" and r["vocab"] == vocab and r["arm"] == arm
            ),
            None,
        )

    ref = {r["arm"]: r for r in result["reference"]}
    first = next((r["batch"] for r in result["train"] if r["model"] == "scratch-133m"), None)
    big = [r for r in result["train"] if r["model"] == "scratch-133m" and r["vocab"] == 50257 and r["batch"] == first]
    chunked = [r for r in result["head_memory"] if r["loss"] == "chunked"]
    mem = [r["ratio_to_naive"] for r in chunked if r["ratio_to_naive"]]
    best = best_batch(result)
    return {
        "pit_over_tt_time_v50257": ratio(50257, "pit"),
        "pit_over_tt_time_v32000": ratio(32000, "pit"),
        "pit_trainable_z_over_tt_time_v50257": ratio(50257, "pit_trainable_z"),
        "ours_tt_over_hf_gpt2_tokens_per_s": ref["ours_tt"]["tokens_per_s"] / ref["hf_gpt2"]["tokens_per_s"]
        if ref
        else None,
        "ours_pit_over_ours_tt_time_reference": ref["ours_pit"]["time_ratio_to_tt"] if ref else None,
        "mfu_133m_v50257": {r["arm"]: r["mfu"] for r in big} or None,
        "mfu_vs_peak_133m_v50257": {r["arm"]: r["mfu_vs_peak"] for r in big if r["mfu_vs_peak"]} or None,
        "mfu_vs_peak_reference": {a: r["mfu_vs_peak"] for a, r in ref.items() if r["mfu_vs_peak"]} or None,
        "chunked_over_naive_head_memory": max(mem) if mem else None,
        "chunked_over_naive_head_time": max((r["time_ratio_to_naive"] for r in chunked), default=None),
        "best_batch_133m_v50257": best["batch"],
        "mfu_best_batch_133m_v50257": best["mfu"],
        "mfu_vs_peak_best_batch_133m_v50257": best["mfu_vs_peak"],
        "pit_over_tt_time_best_batch_v50257": best["pit_over_tt_time"],
    }


def _check_settings(size, rounds, repeats, layers, precision, peak_tflops, batches, sections, arms, vocabs) -> None:
    """Each setting of `run_bench` against what it accepts, before any work (the compile settings: `check_compile`)."""
    if size not in SIZES:
        raise PitError(f"bench size {size!r} is unknown; expected one of {sorted(SIZES)}")
    known = sorted({vocab for _, _, vocab, _ in SIZES[size].train})
    if set(vocabs) - set(known):
        raise PitError(f"bench vocabs {list(vocabs)}; expected some of {known} (the vocabularies of size {size!r})")
    for key, value in (("rounds", rounds), ("repeats", repeats), ("layers", layers)):
        if value < 1:
            raise PitError(f"bench {key} {value}; expected an integer >= 1")
    if precision not in (None, "fp32", "bf16"):
        raise PitError(f"bench precision {precision!r}; expected fp32 or bf16")
    if peak_tflops is not None and not peak_tflops > 0:
        raise PitError(f"bench peak_tflops {peak_tflops}; expected a number > 0 (TFLOP/s)")
    if any(b < 1 for b in batches):
        raise PitError(f"bench batches {list(batches)}; expected integers >= 1")
    if not sections or set(sections) - set(SECTIONS):
        raise PitError(f"bench sections {list(sections)}; expected some of {list(SECTIONS)}")
    if not arms or set(arms) - set(ARMS):
        raise PitError(f"bench arms {list(arms)}; expected some of {list(ARMS)}")


def timed_section(seconds: dict, name: str, sections: tuple[str, ...], fn) -> list[dict]:
    """fn()'s rows when `name` is among `sections` (else no rows), and its wall time into seconds[name] (None when left
    out): building the models, warm-ups and compiling included."""
    if name not in sections:
        seconds[name] = None
        return []
    start = time.perf_counter()
    rows = fn()
    seconds[name] = time.perf_counter() - start
    log.info("section %s: %d rows in %.1f s", name, len(rows), seconds[name])
    return rows


def run_bench(
    size: str = "default",
    rounds: int = 3,
    repeats: int = 1,
    layers: int = 2,
    device: str = "cpu",
    precision: str | None = None,
    peak_tflops: float | None = None,
    compile: str | None = None,
    compile_mode: str = "default",
    batches: tuple[int, ...] = (),
    sections: tuple[str, ...] = SECTIONS,
    arms: tuple[str, ...] = tuple(ARMS),
    vocabs: tuple[int, ...] = (),
    loss_chunk_rows: int | None = None,
) -> dict:
    """The `sections`, in this order, in this process (CPU memory probes in child processes); a section left out
    gives an empty list. `precision` None = bf16 on CUDA, fp32 on CPU; `batches` () = the size's sweep; `arms`: the
    training arms timed in `train` (the reference keeps its three); `vocabs`: the `train` groups' vocabularies
    (() = every group of the size); `compile_mode`: torch.compile's mode, with `compile` only; `loss_chunk_rows`: rows
    of logits per chunk of our loss in `train`, `reference` and `head_memory` (None: pit.core.loss.chunk_rows's choice
    for each call's rows)."""
    _check_settings(size, rounds, repeats, layers, precision, peak_tflops, batches, sections, arms, vocabs)
    if compile_mode != "default" and not compile:
        raise PitError(f"bench compile mode {compile_mode!r} without compile; expected a backend (inductor) with it")
    check_compile(compile_mode, compile or "inductor")  # the mode, and a backend that takes it
    rows = loss_chunk_rows
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise PitError(f"bench loss_chunk_rows {rows!r}; expected an integer >= 1 (rows of logits per chunk) or None")
    target = Target(resolve_device(device), precision == "bf16" or (precision is None and device.startswith("cuda")))
    bench, s = Bench(target, bf16_peak(target, peak_tflops), compile, compile_mode, rows), SIZES[size]
    batches, seconds = tuple(batches) or s.sweep(), {}
    with torch._dynamo.config.patch(recompile_limit=64):  # one compiled graph per arm and shape, one code object
        train = timed_section(
            seconds, "train", sections, lambda: train_section(s, layers, rounds, repeats, bench, batches, arms, vocabs)
        )
        reference = timed_section(seconds, "reference", sections, lambda: reference_section(s, rounds, repeats, bench))
    gemms = [r["gemm_flop_per_s"] for r in train + reference]
    result = {
        "schema": SCHEMA,
        "machine": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "malloc": allocator_policy(),
            "device": target.name(),
            "precision": "bf16" if target.bf16 else "fp32",
            "bf16_peak_flop_per_s": bench.peak,
        },
        "settings": {"size": size, "rounds": rounds, "repeats": repeats, "layers": layers, **asdict(s)}
        | {"compile": compile, "compile_mode": compile_mode if compile else None, "batches": list(batches)}
        | {"loss_chunk_rows": rows}
        | {"sections": list(sections), "arms": list(arms)}
        | {"vocabs": list(vocabs)},
        "gemm_peak": {
            "n": s.gemm_n,
            "dtype": str(target.dtype).removeprefix("torch."),
            "flop_per_s": max(gemms, default=None),
        },
        "train": train,
        "reference": reference,
        "head_memory": timed_section(seconds, "head_memory", sections, lambda: memory_section(s, bench)),
        "generate": timed_section(seconds, "generate", sections, lambda: generate_section(s, layers, rounds, target)),
        "section_s": seconds,
    }
    result["acceptance"] = acceptance(result)
    return result


def compiled_text(settings: dict) -> str:
    """', loss compiled' (with its mode unless the default) and the loss's chunk where one was given, for the text
    report's step heading; '' when eager with the library's chunks."""
    rows = settings["loss_chunk_rows"]
    chunk = f", loss in chunks of {rows} rows" if rows is not None else ""
    if not settings["compile"]:
        return chunk
    mode = settings["compile_mode"]
    return ", loss compiled" + (f" ({mode})" if mode != "default" else "") + chunk


def to_text(r: dict) -> str:
    g, m, peak = 1e9, r["machine"], r["gemm_peak"]["flop_per_s"]
    lines = [
        f"{m['device']}, {m['precision']}"
        + (f", dense BF16 peak {m['bf16_peak_flop_per_s'] / 1e12:.1f} TFLOP/s" if m["bf16_peak_flop_per_s"] else ""),
        f"{r['gemm_peak']['dtype']} GEMM peak ({r['gemm_peak']['n']}^3 torch.mm, {m['threads']} threads): "
        + ("not measured" if peak is None else f"{peak / g:.1f} GFLOP/s"),
        "",
        f"training step (pit train's step, one fixed batch{compiled_text(r['settings'])}):",
    ]
    for row in r["train"] + r["reference"]:
        lines.append(
            f"  {row['model']:18s} L={row['layers']:<2d} V={row['vocab']:<6d} B={row['batch']:<3d} {row['arm']:16s} "
            f"{row['tokens_per_s']:9.0f} tok/s  {row['flop_per_s'] / g:6.1f} GFLOP/s  MFU {row['mfu']:6.1%}"
            + (f"  time/TT {row['time_ratio_to_tt']:.3f}" if "time_ratio_to_tt" in row else "")
            + (f"  MFU/peak {row['mfu_vs_peak']:6.1%}" if row["mfu_vs_peak"] else "")
        )
    lines.append("\nhead + loss, forward + backward (peak memory, time):")
    for row in r["head_memory"]:
        mb = "n/a" if row["peak_mb"] is None else f"{row['peak_mb']:8.0f} MiB"
        lines.append(
            f"  {row['interface']:4s} {row['loss']:8s} {row['tokens']} tokens, V={row['vocab']}: {mb}"
            f"  {row['loss_s'] * 1e3:8.1f} ms"
            + (f"  ({row['loss_chunk_rows']} rows per chunk)" if row["loss_chunk_rows"] else "")
        )
    lines.append("\ngeneration (greedy, KV cache):")
    for row in r["generate"]:
        lines.append(f"  {row['arm']:8s} {row['tokens_per_s']:8.1f} tok/s (batch {row['batch']})")
    ran = {name: t for name, t in r["section_s"].items() if t is not None}
    lines.append("\nwall time per section: " + ", ".join(f"{name} {t:.1f} s" for name, t in ran.items()))
    lines.append("\nacceptance: " + json.dumps(r["acceptance"]))
    return "\n".join(lines)

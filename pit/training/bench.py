"""Training throughput, MFU and memory of this machine (`pit bench`), measured in one process and one run.

    pit bench [--json] [--size default|tiny] [--rounds 3] [--repeats 1] [--layers 2] [--threads N]

Sections (docs/performance.md has the method and the JSON keys):
* `gemm_peak`: FP32 GEMM FLOP/s of an n x n `torch.mm`, the yardstick of MFU. It is timed as one more arm
  in every group of training arms, so it sees the machine load that group saw; the MFU of a step is against
  its own group's GEMM, `gemm_peak` is the best over the groups.
* `train`: the step of `pit train` (forward, chunked fused loss, backward, clipping, fused AdamW, PIT's
  after-step hook) on one fixed batch, for PIT (frozen Z), PIT (trainable Z), TT and untied, on
  scratch-tiny and on a 133M-shaped scratch model cut to `--layers` blocks, at V = 50257 (and PIT, TT at
  V = 32000).
* `reference`: transformers' `GPT2LMHeadModel` (tied, its default attention, loss from `labels`) against
  our `PitGPT2LMHeadModel` with TT, both at the same GPT-2 configuration and with the same optimizer.
* `head_memory`: peak memory of head + loss (forward + backward), naive vs chunked, for PIT and TT.
* `generate`: greedy generation with the KV cache, tokens/s, per interface.

Timing: arms of a group are interleaved over `rounds` after one warm-up call each; an arm's time is its
best round (mean of `repeats` calls), so load drift on a shared machine hits all arms alike and ratios
come from the same run. Model FLOPs per token (PaLM, Appendix B), with N the non-embedding parameters,
L layers, d_attn = heads x head dim, T the context:
    6 N + (6 if the head table is trained else 4) V d + 12 L d_attn T  (+ 12 d^2 for PIT's h T and solves)
MFU = model FLOP/s / GEMM FLOP/s. Peak memory: growth of the resident set (VmHWM - VmRSS, Linux) over
forward + backward, each measurement in a fresh process.
"""

from __future__ import annotations

import json
import math
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path

import torch

from pit.core.interfaces import InterfaceConfig, PITTying, TransposeTying
from pit.core.loss import linear_cross_entropy, naive_linear_cross_entropy
from pit.errors import PitError
from pit.models import build_model, convert_teacher, gpt2_config
from pit.models.access import head_table, interface_of
from pit.models.configs import TeacherSpec
from pit.training.allocator import policy as allocator_policy
from pit.training.objective import NextTokenLoss
from pit.training.optim import optimizer_update, param_groups

SCHEMA = "pit-bench/1"
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
}  # layers in `train`: None = the model's own depth, 0 = --layers


# ---- timing ------------------------------------------------------------------------------------
def time_arms(arms: dict, rounds: int, repeats: int) -> dict[str, float]:
    """Seconds per call of each arm: best over `rounds` interleaved rounds of the mean of `repeats` calls."""
    for fn in arms.values():
        fn()  # warm-up
    best = dict.fromkeys(arms, math.inf)
    for _ in range(rounds):
        for name, fn in arms.items():
            t0 = time.perf_counter()
            for _ in range(repeats):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / repeats)
    return best


def gemm_arm(n: int):
    """An n x n FP32 torch.mm and its FLOPs (2 n^3)."""
    g = torch.Generator().manual_seed(0)
    a, b, out = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g), torch.empty(n, n)
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

    def __init__(self, model, loss, batch: torch.Tensor):
        self.model, self.loss, self.batch = model.train(), loss, batch
        self.optimizer = torch.optim.AdamW(param_groups(model, 0.1, 1e-4), lr=1e-4, fused=True)

    def __call__(self) -> None:
        self.loss(self.batch[:, :-1], self.batch[:, 1:]).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        optimizer_update(self.optimizer, interface_of(self.model))


def hf_labels_loss(model):
    """transformers' own loss: logits, then cross-entropy against `labels` shifted inside the model."""
    return lambda inputs, targets: model(inputs, labels=inputs, use_cache=False).loss


def step_rows(group: dict, batch: torch.Tensor, rounds: int, repeats: int, gemm_n: int) -> list[dict]:
    """Time the steps of `group` {arm: (model, loss)} with an n x n GEMM as one more arm. MFU is against that
    GEMM, measured in the same rounds; `time_ratio_to_tt` is present when the group has a TT arm."""
    steps = {arm: TrainStep(model, loss, batch) for arm, (model, loss) in group.items()}
    gemm_fn, gemm_flops = gemm_arm(gemm_n)
    seconds = time_arms({**steps, "gemm": gemm_fn}, rounds, repeats)
    tokens, peak = batch[:, :-1].numel(), gemm_flops / seconds["gemm"]
    rows = []
    for arm, step in steps.items():
        cfg, flops = step.model.config, flops_per_token(step.model, batch.shape[1] - 1)
        rows.append(
            {
                "model": None,
                "layers": cfg.num_hidden_layers,
                "d_model": cfg.hidden_size,
                "vocab": cfg.vocab_size,
                "arm": arm,
                "tokens_per_step": tokens,
                "step_s": seconds[arm],
                "tokens_per_s": tokens / seconds[arm],
                "flop_per_token": flops,
                "flop_per_s": flops * tokens / seconds[arm],
                "gemm_flop_per_s": peak,
                "mfu": flops * tokens / seconds[arm] / peak,
            }
        )
        if "tt" in steps:
            rows[-1]["time_ratio_to_tt"] = seconds[arm] / seconds["tt"]
    return rows


def train_section(size: Size, layers: int, rounds: int, repeats: int) -> list[dict]:
    out = []
    for name, depth, vocab, arms in size.train:
        overrides = {} if depth is None else {"num_hidden_layers": depth or layers}
        shape = (size.tiny_batch, size.tiny_seq_len) if depth is None else (size.batch, size.seq_len)
        batch = torch.randint(0, vocab, (shape[0], shape[1] + 1), generator=torch.Generator().manual_seed(0))
        models = {arm: build_model(name, ARMS[arm], vocab_size=vocab, seed=0, **overrides) for arm in arms}
        rows = step_rows({arm: (m, NextTokenLoss(m)) for arm, m in models.items()}, batch, rounds, repeats, size.gemm_n)
        out += [{**r, "model": name} for r in rows]
        del models
    return out


def reference_section(size: Size, rounds: int, repeats: int) -> list[dict]:
    """GPT2LMHeadModel vs our PitGPT2LMHeadModel (TT, converted from it: the same weights) at one configuration."""
    from transformers import GPT2LMHeadModel

    layers, d, heads, vocab = size.reference
    torch.manual_seed(0)
    spec = TeacherSpec(layers, d, heads, max(1024, size.seq_len))
    hf = GPT2LMHeadModel(
        gpt2_config(spec, vocab, bos_token_id=vocab - 1, eos_token_id=vocab - 1, loss_type="ForCausalLM")
    )
    ours = convert_teacher(hf, InterfaceConfig(kind="tt"))
    batch = torch.randint(0, vocab, (size.batch, size.seq_len + 1), generator=torch.Generator().manual_seed(0))
    rows = step_rows(
        {"hf_gpt2": (hf, hf_labels_loss(hf)), "ours_tt": (ours, NextTokenLoss(ours))},
        batch,
        rounds,
        repeats,
        size.gemm_n,
    )
    return [{**r, "model": type(m).__name__} for r, m in zip(rows, (hf, ours))]


# ---- memory ------------------------------------------------------------------------------------
def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def head_memory_probe(kind: str, loss: str, tokens: int, vocab: int, dim: int) -> float | None:
    """MiB the resident set grows by over head + loss forward and backward (run in a fresh process)."""
    torch.manual_seed(0)
    iface = (PITTying if kind == "pit" else TransposeTying).from_scratch(vocab, dim)
    h = torch.randn(tokens, dim, requires_grad=True)
    targets = torch.randint(0, vocab, (tokens,))
    fn = linear_cross_entropy if loss == "chunked" else naive_linear_cross_entropy
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = _status_kib("VmRSS")
    except OSError:  # not Linux: no resident-set high-water mark to read
        return None
    fn(*iface.head_input(h), targets).backward()
    return (_status_kib("VmHWM") - before) / 1024


def memory_section(size: Size) -> list[dict]:
    tokens, vocab, dim = size.memory
    rows = []
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"), max_tasks_per_child=1) as pool:
        for kind in ("pit", "tt"):
            peaks = {
                loss: pool.submit(head_memory_probe, kind, loss, tokens, vocab, dim).result()
                for loss in ("naive", "chunked")
            }
            for loss, mb in peaks.items():
                ratio = mb / peaks["naive"] if mb is not None and peaks["naive"] else None
                rows.append(
                    {
                        "interface": kind,
                        "loss": loss,
                        "tokens": tokens,
                        "vocab": vocab,
                        "dim": dim,
                        "peak_mb": mb,
                        "ratio_to_naive": ratio,
                    }
                )
    return rows


# ---- generation --------------------------------------------------------------------------------
def generate_section(size: Size, layers: int, rounds: int) -> list[dict]:
    """Greedy decoding with the KV cache on the 133M-shaped model (tiny size: scratch-tiny)."""
    batch, prompt_len, new = size.generate
    name, depth, vocab, _ = size.train[-1]
    overrides = {"num_hidden_layers": layers if depth == 0 else depth} if depth is not None else {}
    prompt = torch.randint(0, vocab, (batch, prompt_len), generator=torch.Generator().manual_seed(0))
    models = {
        arm: build_model(name, ARMS[arm], vocab_size=vocab, seed=0, **overrides).eval()
        for arm in ("pit", "tt", "untied")
    }

    def run(model):
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)

    seconds = time_arms({arm: (lambda m=m: run(m)) for arm, m in models.items()}, rounds, 1)
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
def acceptance(result: dict) -> dict:
    """The issue's targets, read off the measurements (null where a size does not measure it)."""

    def ratio(vocab, arm):
        return next(
            (
                r["time_ratio_to_tt"]
                for r in result["train"]
                if r["model"] == "scratch-133m" and r["vocab"] == vocab and r["arm"] == arm
            ),
            None,
        )

    ref = {r["arm"]: r["tokens_per_s"] for r in result["reference"]}
    mfu = {r["arm"]: r["mfu"] for r in result["train"] if r["model"] == "scratch-133m" and r["vocab"] == 50257}
    mem = [r["ratio_to_naive"] for r in result["head_memory"] if r["loss"] == "chunked" and r["ratio_to_naive"]]
    return {
        "pit_over_tt_time_v50257": ratio(50257, "pit"),
        "pit_over_tt_time_v32000": ratio(32000, "pit"),
        "pit_trainable_z_over_tt_time_v50257": ratio(50257, "pit_trainable_z"),
        "ours_tt_over_hf_gpt2_tokens_per_s": ref["ours_tt"] / ref["hf_gpt2"],
        "mfu_133m_v50257": mfu or None,
        "chunked_over_naive_head_memory": max(mem) if mem else None,
    }


def run_bench(size: str = "default", rounds: int = 3, repeats: int = 1, layers: int = 2) -> dict:
    """Every section, in this order, in this process (memory probes in child processes)."""
    if size not in SIZES:
        raise PitError(f"bench size {size!r} is unknown; expected one of {sorted(SIZES)}")
    for key, value in (("rounds", rounds), ("repeats", repeats), ("layers", layers)):
        if value < 1:
            raise PitError(f"bench {key} {value}; expected an integer >= 1")
    s = SIZES[size]
    train = train_section(s, layers, rounds, repeats)
    reference = reference_section(s, rounds, repeats)
    result = {
        "schema": SCHEMA,
        "machine": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "malloc": allocator_policy(),
        },
        "settings": {"size": size, "rounds": rounds, "repeats": repeats, "layers": layers, **asdict(s)},
        "gemm_peak": {"n": s.gemm_n, "flop_per_s": max(r["gemm_flop_per_s"] for r in train + reference)},
        "train": train,
        "reference": reference,
        "head_memory": memory_section(s),
        "generate": generate_section(s, layers, rounds),
    }
    result["acceptance"] = acceptance(result)
    return result


def to_text(r: dict) -> str:
    g = 1e9
    lines = [
        f"FP32 GEMM peak ({r['gemm_peak']['n']}^3 torch.mm, {r['machine']['threads']} threads): "
        f"{r['gemm_peak']['flop_per_s'] / g:.1f} GFLOP/s",
        "",
        "training step (pit train's step, one fixed batch):",
    ]
    for row in r["train"] + r["reference"]:
        lines.append(
            f"  {row['model']:18s} L={row['layers']:<2d} V={row['vocab']:<6d} {row['arm']:16s} "
            f"{row['tokens_per_s']:9.0f} tok/s  {row['flop_per_s'] / g:6.1f} GFLOP/s  MFU {row['mfu']:6.1%}"
            + (f"  time/TT {row['time_ratio_to_tt']:.3f}" if "time_ratio_to_tt" in row else "")
        )
    lines.append("\nhead + loss peak memory (forward + backward):")
    for row in r["head_memory"]:
        mb = "n/a" if row["peak_mb"] is None else f"{row['peak_mb']:8.0f} MiB"
        lines.append(f"  {row['interface']:4s} {row['loss']:8s} {row['tokens']} tokens, V={row['vocab']}: {mb}")
    lines.append("\ngeneration (greedy, KV cache):")
    for row in r["generate"]:
        lines.append(f"  {row['arm']:8s} {row['tokens_per_s']:8.1f} tok/s (batch {row['batch']})")
    lines.append("\nacceptance: " + json.dumps(r["acceptance"]))
    return "\n".join(lines)

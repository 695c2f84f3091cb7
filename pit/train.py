"""`pit train`: one pretraining run (teacher or scratch mode; PIT, TT or untied) into a run folder.

Run folder layout:
    run.json                 resolved config, hashes, MLflow identity (written at start)
    metrics.jsonl            one JSON row per optimizer step (the source of truth)
    checkpoints/step-NNNNNN/ model/ (save_pretrained) + trainer_state.pt  (every `checkpoint_every`)
    final/                   HF checkpoint of the last step + tokenizer
    summary.json             final loss / ppl, validation, runtime, tokens, peak memory

Optimisation: AdamW (decay on matrices of the blocks and on TT/untied tables; none on norms,
biases, gates, L or Z), linear warmup then cosine decay to `min_lr`, gradient accumulation to a
fixed global batch in tokens, clipping, seeded data order (window starts for step s come from
`numpy.random.default_rng([seed, s])`, so a resumed run reads the same data), bf16 autocast on
CUDA with the PIT T/L work in FP32, the loss through the chunked fused head of `pit.loss` (no
tokens x V logits). Under `torchrun` the same command runs DDP with the same
global batch (each rank takes every world_size-th micro-batch).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pit.allocator import retain_freed_memory
from pit.errors import PitError, config_from_dict
from pit.io import atomic_path, sha256_file, write_json, write_text
from pit.loss import linear_cross_entropy
from pit.tying import InterfaceConfig

log = logging.getLogger("pit.train")


@dataclass
class TrainConfig:
    """Everything one run needs. Keys of the `pretrain` section of the workflow config."""

    mode: str  # scratch | teacher
    model: str  # scratch-family name / GPT-2 stand-in name (scratch mode), or teacher hub id / folder
    train_data: str
    val_data: str
    tokenizer: str  # tokenizer folder (copied into the final checkpoint)
    interface: dict = field(default_factory=dict)  # InterfaceConfig
    seq_len: int = 256
    global_batch_tokens: int = 4096
    micro_batch_size: int = 8
    max_steps: int = 100
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 10
    weight_decay: float = 0.1
    transform_lr_scale: float = 1.0  # learning-rate multiplier for PIT's L (beyond the paper; 1 = off)
    beta1: float = 0.9
    beta2: float = 0.95
    adam_eps: float = 1e-8
    grad_clip: float = 1.0
    seed: int = 0
    precision: str = "auto"  # auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16
    compile: bool = False
    device: str = "auto"  # auto | cpu | cuda
    threads: int | None = None  # CPU threads (None: torch's default)
    log_every: int = 1
    interface_every: int = 1  # steps between Delta_TI measurements
    consistency_every: int = 0  # steps between the Table 2 metrics (raw/polar anchors); 0 = only at the end
    eval_batches: int = 8  # validation windows per evaluation = eval_batches * micro_batch_size
    checkpoint_every: int = 0  # 0: only the final checkpoint
    keep_checkpoints: int = 2
    final_loss_window: int = 10  # final training loss = mean loss of the last N steps
    spike_factor: float = 3.0  # a loss above factor x its running mean is a spike
    on_spike: str = "log"  # log | skip (skip the update) | stop
    on_nonfinite: str = "skip"  # skip | stop
    stop_after_steps: int | None = None  # end the process early (resume tests, time-boxed jobs)
    run_name: str | None = None
    tags: dict = field(default_factory=dict)
    mlflow: dict = field(default_factory=dict)  # {tracking_uri, experiment, enabled}

    def __post_init__(self):
        checks = [
            (self.mode in ("scratch", "teacher"), f"mode {self.mode!r}; expected 'scratch' or 'teacher'"),
            (self.seq_len > 0, f"seq_len {self.seq_len}; expected > 0"),
            (self.micro_batch_size > 0, f"micro_batch_size {self.micro_batch_size}; expected > 0"),
            (self.global_batch_tokens > 0, f"global_batch_tokens {self.global_batch_tokens}; expected > 0"),
            (self.max_steps > 0, f"max_steps {self.max_steps}; expected > 0"),
            (self.transform_lr_scale > 0, f"transform_lr_scale {self.transform_lr_scale}; expected > 0"),
            (self.lr > 0 and 0 <= self.min_lr <= self.lr, f"lr {self.lr}, min_lr {self.min_lr}; expected 0 <= min_lr <= lr"),
            (0 <= self.warmup_steps < self.max_steps, f"warmup_steps {self.warmup_steps}; expected 0 <= warmup < max_steps"),
            (self.precision in ("auto", "fp32", "bf16"), f"precision {self.precision!r}; expected auto, fp32 or bf16"),
            (self.on_spike in ("log", "skip", "stop"), f"on_spike {self.on_spike!r}; expected log, skip or stop"),
            (self.on_nonfinite in ("skip", "stop"), f"on_nonfinite {self.on_nonfinite!r}; expected skip or stop"),
        ]
        for ok, msg in checks:
            if not ok:
                raise PitError(f"train config: {msg}")
        InterfaceConfig.from_dict(self.interface)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        return config_from_dict(cls, d, "train config")

    def accumulation(self, world_size: int) -> int:
        """Micro-batches per optimizer step on each rank; the global batch must divide evenly."""
        per_micro = self.micro_batch_size * self.seq_len * world_size
        if self.global_batch_tokens % per_micro:
            raise PitError(f"global_batch_tokens {self.global_batch_tokens} is not a multiple of micro_batch_size x "
                           f"seq_len x world_size = {self.micro_batch_size} x {self.seq_len} x {world_size} = {per_micro}")
        return self.global_batch_tokens // per_micro


# ---- distributed -------------------------------------------------------------------------------
@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device: torch.device) -> Dist:
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK: NCCL on GPU, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist()
    import torch.distributed as dist

    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Dist(dist.get_rank(), world, int(os.environ.get("LOCAL_RANK", "0")))


def all_reduce_mean(x: float, d: Dist) -> float:
    if d.world == 1:
        return x
    import torch.distributed as dist

    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item() / d.world


# ---- model -------------------------------------------------------------------------------------
def build_run_model(cfg: TrainConfig, vocab_size: int):
    """Scratch mode: a fresh model from a named spec. Teacher mode: load + convert the interface."""
    from pit.models import build_model, convert_teacher, get_spec, load_teacher
    from pit.models.configs import TeacherSpec

    iface = InterfaceConfig.from_dict(cfg.interface)
    if cfg.mode == "scratch":
        spec = get_spec(cfg.model)
        if isinstance(spec, TeacherSpec) and iface.kind != "tt":
            raise PitError(f"model {cfg.model!r} is a GPT-2 stand-in teacher (tied, as Cerebras-GPT); "
                           f"train it with interface kind 'tt', not {iface.kind!r}")
        return build_model(cfg.model, iface, vocab_size=vocab_size, max_seq_len=max(cfg.seq_len, 256), seed=cfg.seed)
    teacher = load_teacher(cfg.model)
    if teacher.config.vocab_size != vocab_size:
        raise PitError(f"teacher {cfg.model!r} has vocabulary size {teacher.config.vocab_size}; the training data "
                       f"was tokenized with vocabulary size {vocab_size}")
    return convert_teacher(teacher, iface)


def head_input(model, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, M) with logits = g M^T for any model the project trains: the final hidden states h through the
    interface's `head_input`, or h and the tied table of a plain GPT-2 (stand-in teachers)."""
    from pit.models import PitForCausalLM

    if isinstance(model, PitForCausalLM):
        h, _ = model.hidden_states(inputs)
    else:  # GPT-2 architecture: stand-in and converted teachers
        h = model.transformer(inputs, use_cache=False).last_hidden_state
    if hasattr(model, "interface"):
        return model.interface.head_input(h)
    return h, model.get_output_embeddings().weight


class NextTokenLoss(torch.nn.Module):
    """The training objective as the module that torch.compile and DDP wrap: mean next-token cross-entropy
    of `model` through the chunked fused head (`pit.loss`), so the (tokens x V) logits never exist."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        g, M = head_input(self.model, inputs)
        return linear_cross_entropy(g, M, targets)


def interface_matrices(model):
    """(E, W_out) of any model the project trains (an interface, or HF's tied wte/lm_head)."""
    if hasattr(model, "interface"):
        return model.interface.input_embedding(), model.interface.output_projection()
    return model.get_input_embeddings().weight, model.get_output_embeddings().weight.T


def delta_ti(model) -> float:
    """Delta_TI = ||W_out E - I||_F in float64 (Eq. 14)."""
    with torch.no_grad():
        E, W = (m.detach().double() for m in interface_matrices(model))
        return torch.linalg.matrix_norm(W @ E - torch.eye(E.shape[1], dtype=torch.float64, device=E.device)).item()


def consistency_metrics(model) -> dict:
    """The Table 2 metrics of the interface as trained (FP32 E and W_out, metrics in float64)."""
    from pit.diagnostics import interface_metrics

    keys = [(variant, key, short) for variant in ("raw", "polar") for key, short in
            (("cosine_distance", "cosine"), ("procrustes_error", "procrustes"), ("principal_angle", "angle"))]
    with torch.no_grad():
        E, W = interface_matrices(model)
        if not (torch.isfinite(E).all() and torch.isfinite(W).all()):  # a diverged run: nothing to measure
            return {f"{variant}_{short}": float("nan") for variant, _, short in keys}
        m = interface_metrics(E, W)
    return {f"{variant}_{short}": m[variant][key] for variant, key, short in keys}


def param_groups(model, weight_decay: float, lr: float = 1e-3, transform_lr_scale: float = 1.0):
    """Decay matrices of the blocks and TT/untied tables; not norms, biases, gates, L or Z.
    PIT's L gets its own group with lr x transform_lr_scale."""
    decay, no_decay, transform = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        leaf = name.split(".")[-1]
        if name.startswith("interface.") and leaf in ("L_offdiag", "log_diag"):
            transform.append(p)
        elif p.ndim >= 2 and not (name.startswith("interface.") and leaf == "Z"):
            decay.append(p)
        else:
            no_decay.append(p)
    groups = [{"params": decay, "weight_decay": weight_decay, "lr": lr},
              {"params": no_decay, "weight_decay": 0.0, "lr": lr}]
    if transform:
        groups.append({"params": transform, "weight_decay": 0.0, "lr": lr * transform_lr_scale})
    return groups


def optimizer_update(optimizer, interface) -> None:
    """The update that ends every training step (pit train, pit lora, pit bench): the optimizer step, the
    interface's after-step hook (PIT: polar retraction of a trainable Z, Eq. 18; None: no interface), zero_grad."""
    optimizer.step()
    if interface is not None:
        interface.after_optimizer_step()
    optimizer.zero_grad(set_to_none=True)


def lr_lambda(cfg: TrainConfig):
    """Linear warmup to lr, then cosine decay to min_lr at max_steps (as a factor of lr)."""
    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
        return (cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))) / cfg.lr
    return f


# ---- checkpoints -------------------------------------------------------------------------------
def latest_checkpoint(run_dir: Path) -> Path | None:
    steps = sorted(run_dir.glob("checkpoints/step-*/trainer_state.pt"))
    return steps[-1].parent if steps else None


def save_checkpoint(run_dir: Path, step: int, model, optimizer, scheduler, state: dict, keep: int) -> None:
    with atomic_path(run_dir / "checkpoints" / f"step-{step:06d}") as tmp:
        tmp.mkdir()
        model.save_pretrained(tmp / "model", safe_serialization=True)
        torch.save({"step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "rng_cpu": torch.get_rng_state(),
                    "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                    **state}, tmp / "trainer_state.pt")
    for old in sorted((run_dir / "checkpoints").glob("step-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(ckpt: Path, model, optimizer, scheduler) -> dict:
    from safetensors.torch import load_file

    state = torch.load(ckpt / "trainer_state.pt", weights_only=True)
    weights = {}
    for f in sorted((ckpt / "model").glob("*.safetensors")):
        weights.update(load_file(f))
    own = model.state_dict()
    # tied parameters (a tied GPT-2's lm_head.weight is transformer.wte.weight) are saved once
    saved_as = {}
    for k, v in own.items():
        saved_as.setdefault((v.data_ptr(), v.shape), []).append(k)
    tied = {k for k in own if k not in weights and own[k].numel()
            and any(o in weights for o in saved_as[(own[k].data_ptr(), own[k].shape)])}
    bad = [k for k in own if k not in tied and (k not in weights or weights[k].shape != own[k].shape)]
    if bad:
        raise PitError(f"checkpoint {str(ckpt)!r} does not match this run's model (e.g. {bad[0]}); "
                       "it was written by a run with another architecture or vocabulary")
    missing, _ = model.load_state_dict({k: weights[k] for k in own if k not in tied}, strict=False)
    assert set(missing) == tied, (missing, tied)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng_cpu"])
    if state["rng_cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng_cuda"])
    return state


# ---- the run -----------------------------------------------------------------------------------
def run_fingerprint(cfg: TrainConfig) -> str:
    """Hash of the settings that define the trajectory (not threads, logging or the stop step)."""
    import hashlib

    d = {k: v for k, v in dataclasses.asdict(cfg).items()
         if k not in ("threads", "stop_after_steps", "run_name", "tags", "mlflow", "log_every", "compile")}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=Path(__file__).parent).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def evaluate(model, data, cfg: TrainConfig, device, autocast) -> float:
    """Mean next-token loss on the first eval_batches x micro_batch_size non-overlapping windows."""
    starts = data.sequential_starts(cfg.seq_len, cfg.eval_batches * cfg.micro_batch_size)
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(starts), cfg.micro_batch_size):
            batch = data.windows(starts[i:i + cfg.micro_batch_size], cfg.seq_len).to(device)
            with autocast:
                logits = model(batch[:, :-1], use_cache=False).logits
            total += F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten(), reduction="sum").item()
            count += batch[:, 1:].numel()
    model.train()
    return total / count


def resolve_device(name: str) -> torch.device:
    """`auto` = CUDA when available, else CPU; otherwise the named device."""
    return torch.device("cuda" if name == "auto" and torch.cuda.is_available() else ("cpu" if name == "auto" else name))


def mixed_precision(precision: str, device: torch.device):
    """(bf16?, autocast context): bf16 autocast for `bf16`, and for `auto` on CUDA; FP32 otherwise."""
    from contextlib import nullcontext

    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    return use_bf16, torch.autocast(device.type, dtype=torch.bfloat16) if use_bf16 else nullcontext()


def train(cfg: TrainConfig, run_dir: str | Path) -> dict:
    """Run (or resume) one training run on `cfg.threads` CPU threads; returns the summary."""
    from pit.tying import cpu_threads

    with cpu_threads(cfg.threads):
        return _train(cfg, run_dir)


def _train(cfg: TrainConfig, run_dir: str | Path) -> dict:
    from contextlib import nullcontext

    from tqdm.auto import tqdm

    from pit.data.reader import TokenFile
    from pit.tracking import METRIC_KEYS, Tracker

    run_dir = Path(run_dir)
    device = resolve_device(cfg.device)
    d = init_distributed(device)
    if device.type == "cuda":
        device = torch.device("cuda", d.local_rank)
        torch.cuda.set_device(device)
    use_bf16, autocast = mixed_precision(cfg.precision, device)

    train_data, val_data = TokenFile(cfg.train_data), TokenFile(cfg.val_data)
    vocab = train_data.meta["vocab_size"]
    if val_data.meta.get("tokenizer_sha256") != train_data.meta.get("tokenizer_sha256"):
        raise PitError(f"{cfg.train_data!r} and {cfg.val_data!r} were tokenized with different tokenizers")
    accum = cfg.accumulation(d.world)  # before any work: a bad batch shape fails fast
    train_data.random_starts(1, cfg.seq_len, np.random.default_rng(0))  # at least one window fits
    val_data.sequential_starts(cfg.seq_len)

    model = build_run_model(cfg, vocab).to(device)
    model.train()
    optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay, cfg.lr, cfg.transform_lr_scale), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                  eps=cfg.adam_eps, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))

    run_name = cfg.run_name or run_dir.name
    params = {"train": dataclasses.asdict(cfg), "git_commit": git_commit(),
              "train_data_sha256": train_data.meta.get("sha256") or sha256_file(cfg.train_data),
              "tokenizer_sha256": train_data.meta.get("tokenizer_sha256"), "vocab_size": vocab,
              "world_size": d.world, "accumulation": accum, "device": device.type, "bf16": use_bf16,
              "parameters": sum(p.numel() for p in model.parameters()),
              "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad)}
    tags = {"mode": cfg.mode, "interface": InterfaceConfig.from_dict(cfg.interface).kind, **cfg.tags}
    experiment = cfg.mlflow.get("experiment", "pit")

    state = {"tokens": 0, "runtime_s": 0.0, "loss_ema": None, "first_loss": None, "skipped": 0, "mlflow_run_id": None,
             "fingerprint": run_fingerprint(cfg)}
    start_step = 0
    ckpt = latest_checkpoint(run_dir)
    fingerprint = run_fingerprint(cfg)
    if ckpt is not None and torch.load(ckpt / "trainer_state.pt", weights_only=True).get("fingerprint") != fingerprint:
        log.warning("checkpoints in %s belong to a run with other settings; starting afresh", run_dir)
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        ckpt = None
    if ckpt is not None:
        saved = load_checkpoint(ckpt, model, optimizer, scheduler)
        start_step = saved["step"]
        state.update({k: saved[k] for k in state if k in saved})
        if d.main:
            log.info("resuming %s from step %d", run_dir, start_step)
    elif d.main and run_dir.exists():
        for stale in ("metrics.jsonl", "summary.json", "final"):  # a fresh start owns the folder
            p = run_dir / stale
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)

    tracker = Tracker(cfg.mlflow.get("tracking_uri"), experiment, run_name, tags,
                      enabled=d.main and cfg.mlflow.get("enabled", True), run_id=state["mlflow_run_id"])
    state["mlflow_run_id"] = tracker.run_id
    metrics_path = run_dir / "metrics.jsonl"
    if d.main:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json(run_dir / "run.json", {"run_name": run_name, "experiment": experiment, "tags": tags, "params": params,
                                          "mlflow_run_id": tracker.run_id})
        if ckpt is None:
            tracker.log_params(params)
        # keep exactly the rows the checkpoint has seen, so a resumed run appends the same rows
        rows = [r for r in (json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip())] \
            if metrics_path.exists() else []
        write_text(metrics_path, "".join(json.dumps(r) + "\n" for r in rows if r["step"] <= start_step))

    step_loss = NextTokenLoss(model)
    if cfg.compile:
        step_loss = torch.compile(step_loss)
    if d.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        step_loss = DDP(step_loss, device_ids=[device.index] if device.type == "cuda" else None)

    micro_total = accum * d.world
    last_step = cfg.max_steps if cfg.stop_after_steps is None else min(cfg.max_steps, cfg.stop_after_steps)
    bar = tqdm(range(start_step, last_step), initial=start_step, total=cfg.max_steps, desc=run_name,
               disable=not d.main, dynamic_ncols=True)
    pending = []
    metrics_file = open(metrics_path, "a") if d.main else None
    for step in bar:
        t0 = time.perf_counter()
        rng = np.random.default_rng([cfg.seed, step])
        starts = train_data.random_starts(micro_total * cfg.micro_batch_size, cfg.seq_len, rng)
        loss_sum = 0.0
        for i in range(accum):
            micro = d.rank + i * d.world
            batch = train_data.windows(starts[micro * cfg.micro_batch_size:(micro + 1) * cfg.micro_batch_size],
                                       cfg.seq_len).to(device)
            sync = d.world == 1 or i == accum - 1
            ctx = nullcontext() if sync else step_loss.no_sync()
            with ctx:
                with autocast:
                    loss = step_loss(batch[:, :-1], batch[:, 1:]) / accum
                loss.backward()
            loss_sum += loss.item()
        loss_value = all_reduce_mean(loss_sum, d)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip).item()

        event = None
        if not math.isfinite(loss_value) or not math.isfinite(grad_norm):
            event = "nonfinite"
            action = cfg.on_nonfinite
        elif state["loss_ema"] is not None and loss_value > cfg.spike_factor * state["loss_ema"]:
            event = "spike"
            action = cfg.on_spike
        else:
            action = "none"
        if action == "stop":
            raise PitError(f"step {step}: {event} loss {loss_value} (grad norm {grad_norm}); stopping as configured "
                           f"(on_{'spike' if event == 'spike' else 'nonfinite'}: stop). The last checkpoint is kept.")
        if action == "skip":
            optimizer.zero_grad(set_to_none=True)
            state["skipped"] += 1
        else:
            optimizer_update(optimizer, getattr(model, "interface", None))
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        if math.isfinite(loss_value) and event is None:
            state["loss_ema"] = loss_value if state["loss_ema"] is None else 0.9 * state["loss_ema"] + 0.1 * loss_value
        if state["first_loss"] is None:
            state["first_loss"] = loss_value
        state["tokens"] += cfg.global_batch_tokens
        dt = time.perf_counter() - t0
        state["runtime_s"] += dt

        if d.main:
            row = {"step": step + 1, "tokens": state["tokens"], "loss": loss_value, "lr": lr, "grad_norm": grad_norm,
                   "tokens_per_s": cfg.global_batch_tokens / dt, "time_s": state["runtime_s"]}
            if event:
                row["event"] = event
            if (step + 1) % cfg.interface_every == 0 or step + 1 == cfg.max_steps:
                row["delta_ti"] = delta_ti(model)
            if (cfg.consistency_every and (step + 1) % cfg.consistency_every == 0) or step + 1 == cfg.max_steps:
                row.update(consistency_metrics(model))
            metrics_file.write(json.dumps(row) + "\n")
            metrics_file.flush()
            pending.append(row)
            bar.set_postfix(loss=f"{loss_value:.4f}")
            if (step + 1) % max(cfg.log_every, 1) == 0:
                tracker.log_metrics(pending, METRIC_KEYS)
                pending = []
        if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.max_steps and d.main:
            save_checkpoint(run_dir, step + 1, model, optimizer, scheduler, state, cfg.keep_checkpoints)
        if d.world > 1:
            import torch.distributed as dist
            dist.barrier()
    bar.close()
    if metrics_file:
        metrics_file.close()
    if last_step < cfg.max_steps:  # stopped early on purpose; the checkpoints allow a resume
        if d.main:
            tracker.log_metrics(pending, METRIC_KEYS)
        return {}

    summary = {}
    if d.main:
        rows = [json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip()]
        tail = [r["loss"] for r in rows[-cfg.final_loss_window:] if math.isfinite(r["loss"])]
        final_loss = float(np.mean(tail)) if tail else float("nan")
        val_loss = evaluate(model, val_data, cfg, device, autocast)
        summary = {
            "run_name": run_name, "mode": cfg.mode, "interface": tags["interface"], "model": cfg.model,
            "steps": cfg.max_steps, "tokens": state["tokens"], "first_step_loss": state["first_loss"],
            "final_train_loss": final_loss, "final_train_ppl": math.exp(final_loss),
            "last_step_loss": rows[-1]["loss"], "val_loss": val_loss, "val_ppl": math.exp(val_loss),
            "runtime_s": state["runtime_s"], "peak_memory_mb": peak_memory_mb(device),
            "delta_ti": delta_ti(model), "skipped_steps": state["skipped"], "final_loss_window": cfg.final_loss_window,
        }
        tokenizer = _load_tokenizer(cfg.tokenizer)
        with atomic_path(run_dir / "final") as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(tmp)
        write_json(run_dir / "summary.json", summary)
        tracker.log_metrics(pending + [{"step": cfg.max_steps, "val_loss": val_loss, "val_ppl": summary["val_ppl"]}],
                            METRIC_KEYS)
        tracker.log_metrics([{"step": cfg.max_steps, **{k: v for k, v in summary.items() if isinstance(v, float)}}],
                            ("final_train_loss", "final_train_ppl", "runtime_s", "peak_memory_mb"))
        for name in ("summary.json", "run.json", "metrics.jsonl"):
            tracker.log_artifact(run_dir / name)
        tracker.finish()
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    if d.world > 1:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()
    return summary


def _load_tokenizer(path: str):
    from transformers import AutoTokenizer

    if not path:
        return None
    if not Path(path).is_dir():
        raise PitError(f"tokenizer folder {path!r} does not exist")
    return AutoTokenizer.from_pretrained(path)


def cmd_train(args: argparse.Namespace) -> int:
    retain_freed_memory()  # pit/allocator.py: no page faults from per-step tensors (PIT_MALLOC=system opts out)
    if args.spec_file:
        spec = json.loads(Path(args.spec_file).read_text())
    else:
        spec = json.loads(args.spec)
    if args.threads is not None:
        spec["threads"] = args.threads
    cfg = TrainConfig.from_dict(spec)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = train(cfg, args.out)
    if summary:
        print(json.dumps({k: summary[k] for k in ("final_train_loss", "final_train_ppl", "val_loss", "runtime_s")}))
    return 0


def register(sub) -> None:
    p = sub.add_parser("train", help="one pretraining run (resumes from the run folder's latest checkpoint)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--spec", help="the run config as a JSON object (the keys of TrainConfig)")
    src.add_argument("--spec-file", help="the run config as a JSON file")
    p.add_argument("--out", required=True, help="run folder")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (overrides the spec)")
    p.set_defaults(func=cmd_train)

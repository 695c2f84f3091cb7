"""Pretraining (`pit train`, paper Section 5, Table 1, Figures 3-4): one run, teacher or scratch mode, PIT, TT or
untied, into a run folder (pit/training/run_folder.py; `final/` holds the last step's checkpoint + tokenizer); or
continue mode: training on from a folder that already has an interface (`pit convert`, a run's final/, `pit lora
merge`), kept as it is. The skeleton is litgpt's: setup -> fit -> validate. Before the first update the run measures
its validation loss (`initial_val_loss` in summary.json): a converted model's is `pit convert-check`'s on the same
windows.

Optimisation: AdamW (decay on matrices of the blocks and on TT/untied tables; none on norms, biases, gates,
L or Z), linear warmup then cosine decay to `min_lr`, gradient accumulation to a fixed global batch in tokens,
clipping, seeded data order (window starts for step s come from `numpy.random.default_rng([seed, s])`, so a
resumed run reads the same data), bf16 autocast on CUDA with the PIT T/L work in FP32, the loss through the
chunked fused head (no tokens x V logits). Under `torchrun` the same command runs DDP with the same global
batch (each rank takes every world_size-th micro-batch).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pit.core.interfaces import InterfaceConfig
from pit.core.linalg import cpu_threads
from pit.data.reader import TokenFile
from pit.errors import PitError
from pit.models import build_model, convert_teacher, get_spec, load_teacher
from pit.models.access import interface_of, model_consistency, model_delta_ti
from pit.models.checkpoint import load_model, save_pretrained_atomic
from pit.models.configs import TeacherSpec
from pit.progress import Steps, progress_bar
from pit.tracking.tracker import FINAL_KEYS, METRIC_KEYS, run_datasets
from pit.training.args import PretrainArgs
from pit.training.objective import NextTokenLoss, compile_loss, new_step
from pit.training.optim import make_optimizer, optimizer_update, warmup_cosine
from pit.training.run_folder import (
    FinishedRun,
    MetricsLog,
    RunFolder,
    RunHandles,
    check_finished_inputs,
    claim,
    input_record,
)
from pit.training.runtime import (
    Dist,
    check_activation_memory,
    init_distributed,
    mixed_precision,
    peak_memory_mb,
    read_scalars,
    resolve_device,
    to_device,
)

STALE_OUTPUTS = ("metrics.jsonl", "summary.json", "final")
REQUIRED_OUTPUTS = ("final",)  # with summary.json: what a finished run folder holds


def check_rows(what: str, rows: int, vocab_size: int) -> None:
    """The model's vocabulary holds every token id of the data (more rows are padding, as Qwen2's and Pythia's)."""
    if rows < vocab_size:
        raise PitError(
            f"{what} has vocabulary size {rows}; the training data was tokenized with vocabulary size {vocab_size}; "
            "expected at least as many rows as token ids"
        )


def build_run_model(args: PretrainArgs, vocab_size: int, eos_id: int):
    """Scratch mode: a fresh model from a named spec (a stand-in teacher's BOS/EOS = the data's EOS). Teacher mode:
    load + convert the interface. Continue mode: the folder's model as it is (`load_model`: its interface's stored
    Z and L, TT table or untied pair; the interface the settings hold is the folder's, PretrainArgs)."""
    if args.mode == "continue":
        model = load_model(args.model)
        check_rows(f"model {args.model!r}", model.config.vocab_size, vocab_size)
        return model
    iface = InterfaceConfig.from_dict(args.interface)
    if args.mode == "scratch":
        spec = get_spec(args.model)
        if isinstance(spec, TeacherSpec) and iface.kind != "tt":
            raise PitError(
                f"model {args.model!r} is a GPT-2 stand-in teacher (tied, as Cerebras-GPT); "
                f"train it with interface kind 'tt', not {iface.kind!r}"
            )
        special = {"bos_token_id": eos_id, "eos_token_id": eos_id} if isinstance(spec, TeacherSpec) else {}
        return build_model(
            args.model, iface, vocab_size=vocab_size, max_seq_len=max(args.seq_len, 256), seed=args.seed, **special
        )
    teacher = load_teacher(args.model)
    check_rows(f"teacher {args.model!r}", teacher.config.vocab_size, vocab_size)
    return convert_teacher(teacher, iface)


def load_model_weights(folder: Path, model) -> None:
    """Load a trainer checkpoint's model weights (model/*.safetensors) into `model`, checked against its shapes.
    Tied parameters (a tied GPT-2's lm_head.weight is transformer.wte.weight) are saved once."""
    from safetensors.torch import load_file

    weights = {}
    for f in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(f))
    own = model.state_dict()
    saved_as = {}
    for k, v in own.items():
        saved_as.setdefault((v.data_ptr(), v.shape), []).append(k)
    tied = {
        k
        for k in own
        if k not in weights
        and own[k].numel()
        and any(o in weights for o in saved_as[(own[k].data_ptr(), own[k].shape)])
    }
    bad = [k for k in own if k not in tied and (k not in weights or weights[k].shape != own[k].shape)]
    if bad:
        raise PitError(
            f"checkpoint {str(folder.parent)!r} does not match this run's model (e.g. {bad[0]}); "
            "it was written by a run with another architecture or vocabulary"
        )
    missing, _ = model.load_state_dict({k: weights[k] for k in own if k not in tied}, strict=False)
    assert set(missing) == tied, (missing, tied)


@dataclass(kw_only=True)
class Run(RunHandles):
    """A pretraining run as `setup` made it."""

    dist: Dist
    train_data: TokenFile
    val_data: TokenFile
    accum: int
    tags: dict


def setup_data(args: PretrainArgs, world: int) -> tuple[TokenFile, TokenFile, int]:
    """The token files, checked before any work: same tokenizer, windows fit, the global batch divides."""
    train_data, val_data = TokenFile(args.train_data), TokenFile(args.val_data)
    if val_data.meta.get("tokenizer_sha256") != train_data.meta.get("tokenizer_sha256"):
        raise PitError(f"{args.train_data!r} and {args.val_data!r} were tokenized with different tokenizers")
    if args.tokenizer:  # the sidecars describe the tokenizer that goes into the checkpoint: the model is sized by them
        train_data.check_tokenizer(args.tokenizer)
    if args.mode == "continue":
        train_data.check_checkpoint(args.model)  # the tokenizer the folder carries, if any, made the data
        if not args.tokenizer and not (Path(args.model) / "tokenizer_config.json").is_file():
            raise PitError(
                f"tokenizer '' takes the model folder's own, but {args.model!r} carries no tokenizer "
                "(no tokenizer_config.json); expected tokenizer: the folder the token files were made with"
            )
    accum = args.accumulation(world)
    train_data.random_starts(1, args.seq_len, np.random.default_rng(0))  # at least one window fits
    val_data.sequential_starts(args.seq_len)
    return train_data, val_data, accum


def start_processes(args: PretrainArgs) -> tuple[torch.device, Dist]:
    """The device and this process's place in a torchrun job (one process without torchrun)."""
    device = resolve_device(args.device)
    d = init_distributed(device)
    if device.type == "cuda":
        device = torch.device("cuda", d.local_rank)
        torch.cuda.set_device(device)
    return device, d


def setup(args: PretrainArgs, folder: RunFolder, device: torch.device, d: Dist) -> Run:
    """Data, model, optimizer, then start or resume the run in `folder` and its MLflow run."""
    use_bf16, autocast = mixed_precision(args.precision, device)
    train_data, val_data, accum = setup_data(args, d.world)
    vocab = train_data.meta["vocab_size"]
    model = build_run_model(args, vocab, train_data.meta["eos_id"]).to(device)
    check_activation_memory(model.config, args.micro_batch_size, args.seq_len, device)
    model.train()
    optimizer = make_optimizer(model, args)
    scheduler = warmup_cosine(optimizer, args)
    run_name = args.run_name or folder.name
    inputs = input_record(args.input_paths())  # fixed at the start: a resume on other inputs is refused
    params = {
        "train": dataclasses.asdict(args),
        "train_data_sha256": inputs["train_data"]["sha256"],
        "tokenizer_sha256": train_data.meta.get("tokenizer_sha256"),
        "vocab_size": vocab,
        "world_size": d.world,
        "accumulation": accum,
        "device": device.type,
        "bf16": use_bf16,
        "parameters": sum(p.numel() for p in model.parameters()),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
    tags = {
        "stage": "pretrain",
        "mode": args.mode,
        "interface": InterfaceConfig.from_dict(args.interface).kind,
        **args.tags,
    }
    state = {
        "tokens": 0,
        "runtime_s": 0.0,
        "loss_ema": None,
        "first_loss": None,
        "initial_val_loss": None,  # before the first update, on the validation windows (fit)
        "skipped": 0,
        "nonfinite_streak": 0,  # consecutive non-finite steps up to now, and the first of them
        "nonfinite_from": None,
        "diverged_at_step": None,  # set when stop_after_nonfinite ends the run
        "mlflow_run_id": None,
        "fingerprint": folder.fingerprint,
        "inputs": inputs,
    }
    start_step = 0
    ckpt, saved = folder.resume_point(STALE_OUTPUTS, inputs)
    if ckpt is not None:
        load_model_weights(ckpt / "model", model)
        RunFolder.restore(saved, optimizer, scheduler, device)
        start_step = saved["step"]
        state.update({k: saved[k] for k in state if k in saved})
    logged = {"metrics.jsonl": METRIC_KEYS, "summary.json": FINAL_KEYS}  # what `pit mlflow sync` replays
    tracker = folder.start_tracking(args.mlflow, run_name, tags, params, state["mlflow_run_id"], logged, inputs)
    state["mlflow_run_id"] = tracker.run_id
    tracker.log_datasets(run_datasets(params))  # mlflow.data: each token file's path and hash
    if d.main:
        folder.keep_metrics_until(start_step)
    return Run(
        args=args,
        folder=folder,
        device=device,
        autocast=autocast,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        tracker=tracker,
        state=state,
        start_step=start_step,
        run_name=run_name,
        dist=d,
        train_data=train_data,
        val_data=val_data,
        accum=accum,
        tags=tags,
    )


def loss_module(run: Run) -> torch.nn.Module:
    """The loss as the module a step calls: NextTokenLoss, optionally compiled, wrapped in DDP under torchrun."""
    step_loss = NextTokenLoss(run.model, run.args.loss_chunk_rows)
    if run.args.compile:
        step_loss = compile_loss(step_loss, run.args.compile_mode)
    if run.dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        step_loss = DDP(step_loss, device_ids=[run.device.index] if run.device.type == "cuda" else None)
    return step_loss


def forward_backward(run: Run, step_loss, step: int) -> torch.Tensor:
    """Accumulate the gradients of one global batch (this rank's micro-batches); the mean loss over all ranks, a
    float64 tensor on the device. No host sync: the micro-batches' losses are summed on the device (in float64, the
    sum a host loop of `loss.item()` would make) and the batches copied without waiting (`to_device`)."""
    args, d = run.args, run.dist
    rng = np.random.default_rng([args.seed, step])
    starts = run.train_data.random_starts(run.accum * d.world * args.micro_batch_size, args.seq_len, rng)
    loss_sum = torch.zeros((), dtype=torch.float64, device=run.device)
    for i in range(run.accum):
        micro = d.rank + i * d.world
        windows = starts[micro * args.micro_batch_size : (micro + 1) * args.micro_batch_size]
        batch = to_device(run.train_data.windows(windows, args.seq_len), run.device)
        sync = d.world == 1 or i == run.accum - 1
        with nullcontext() if sync else step_loss.no_sync():
            new_step(args.compile_mode)  # "default" unless compiled (PretrainArgs' checks)
            with run.autocast:
                loss = step_loss(batch[:, :-1], batch[:, 1:]) / run.accum
            loss.backward()
        loss_sum += loss.detach()  # queued before the next replay of a CUDA graph overwrites `loss`
    return d.all_reduce_mean(loss_sum)


def spike_action(run: Run, step: int, loss: float, grad_norm: float) -> tuple[str | None, str]:
    """(event, action): a non-finite loss or gradient, or a loss spike above spike_factor x its running mean,
    handled as configured (on_nonfinite / on_spike); `stop` raises, keeping the last checkpoint."""
    args, ema = run.args, run.state["loss_ema"]
    if not math.isfinite(loss) or not math.isfinite(grad_norm):
        event, action = "nonfinite", args.on_nonfinite
    elif ema is not None and loss > args.spike_factor * ema:
        event, action = "spike", args.on_spike
    else:
        return None, "none"
    if action == "stop":
        raise PitError(
            f"step {step}: {event} loss {loss} (grad norm {grad_norm}); stopping as configured "
            f"(on_{event}: stop). The last checkpoint is kept."
        )
    return event, action


def train_step(run: Run, step_loss, step: int) -> dict:
    """One optimizer step; returns its metrics row (step counts from 1)."""
    args, state = run.args, run.state
    t0 = time.perf_counter()
    loss, grad_norm = read_scalars(  # the step's one host sync: spike handling needs both before the update
        forward_backward(run, step_loss, step), torch.nn.utils.clip_grad_norm_(run.model.parameters(), args.grad_clip)
    )
    event, action = spike_action(run, step, loss, grad_norm)
    streak = state["nonfinite_streak"] + 1 if event == "nonfinite" else 0
    state["nonfinite_from"] = (state["nonfinite_from"] or step + 1) if streak else None
    state["nonfinite_streak"] = streak
    if action == "skip":
        run.optimizer.zero_grad(set_to_none=True)
        state["skipped"] += 1
    else:
        optimizer_update(run.optimizer, interface_of(run.model))
    lr = run.scheduler.get_last_lr()[0]
    run.scheduler.step()
    if math.isfinite(loss) and event is None:
        state["loss_ema"] = loss if state["loss_ema"] is None else 0.9 * state["loss_ema"] + 0.1 * loss
    if state["first_loss"] is None:
        state["first_loss"] = loss
    state["tokens"] += args.global_batch_tokens
    dt = time.perf_counter() - t0
    state["runtime_s"] += dt
    row = {
        "step": step + 1,
        "tokens": state["tokens"],
        "loss": loss,
        "lr": lr,
        "grad_norm": grad_norm,
        "tokens_per_s": args.global_batch_tokens / dt,
        "time_s": state["runtime_s"],
    }
    return {**row, "event": event} if event else row


def interface_metrics_row(run: Run, step: int) -> dict:
    """Delta_TI every `interface_every` steps and the Table 2 metrics every `consistency_every`, both at the end."""
    args, last = run.args, step == run.args.max_steps
    out = {}
    if step % args.interface_every == 0 or last:
        out["delta_ti"] = model_delta_ti(run.model)
    if (args.consistency_every and step % args.consistency_every == 0) or last:
        out.update(model_consistency(run.model))
    return out


def fit(run: Run) -> tuple[bool, MetricsLog | None]:
    """Train from the resume point to max_steps (or stop_after_steps); True when the run reached max_steps."""
    args, d = run.args, run.dist
    step_loss = loss_module(run)
    last_step = args.max_steps if args.stop_after_steps is None else min(args.max_steps, args.stop_after_steps)
    metrics = MetricsLog(run.folder.metrics_path, run.tracker, METRIC_KEYS, args.log_every) if d.main else None
    bar = progress_bar(
        range(run.start_step, last_step),
        initial=run.start_step,
        total=args.max_steps,
        desc=run.run_name,
        disable=not d.main,
        dynamic_ncols=True,
    )
    if d.main and run.start_step == 0:  # the starting model's loss: a converted model's is convert-check's
        run.state["initial_val_loss"] = validation_loss(run)
    for step in bar:
        row = train_step(run, step_loss, step)
        if stuck(run):
            if d.main:
                metrics.write(row)
            break
        if d.main:
            if args.eval_every and (step + 1) % args.eval_every == 0 and step + 1 < args.max_steps:
                row["val_loss"] = validation_loss(run)  # fixed windows, no random draws: resume stays exact
            metrics.write({**row, **interface_metrics_row(run, step + 1)})
            bar.set_postfix(loss=f"{row['loss']:.4f}")
        if args.checkpoint_every and (step + 1) % args.checkpoint_every == 0 and step + 1 < args.max_steps and d.main:
            run.folder.save_checkpoint(
                step + 1,
                lambda tmp: run.model.save_pretrained(tmp / "model", safe_serialization=True),
                run.optimizer,
                run.scheduler,
                run.state,
                args.keep_checkpoints,
            )
        d.barrier()
    bar.close()
    if metrics is not None:
        metrics.close()
    return last_step == args.max_steps or run.state["diverged_at_step"] is not None, metrics


def stuck(run: Run) -> bool:
    """True (and `diverged_at_step` set) once stop_after_nonfinite consecutive steps were non-finite: skipped steps
    leave the weights as they are, so the run has stopped moving."""
    limit, state = run.args.stop_after_nonfinite, run.state
    if limit and state["nonfinite_streak"] >= limit:
        state["diverged_at_step"] = state["nonfinite_from"]
    return state["diverged_at_step"] is not None


@torch.no_grad()
def validation_loss(run: Run) -> float:
    """Mean next-token loss on the first eval_batches x micro_batch_size non-overlapping validation windows."""
    args = run.args
    starts = run.val_data.sequential_starts(args.seq_len, args.eval_batches * args.micro_batch_size)
    run.model.eval()
    total, count = torch.zeros((), dtype=torch.float64, device=run.device), 0  # summed on the device: one sync
    for i in range(0, len(starts), args.micro_batch_size):
        batch = to_device(run.val_data.windows(starts[i : i + args.micro_batch_size], args.seq_len), run.device)
        with run.autocast:
            logits = run.model(batch[:, :-1], use_cache=False).logits
        total += F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten(), reduction="sum")
        count += batch[:, 1:].numel()
    run.model.train()
    return total.item() / count


def divergence(run: Run) -> str:
    """Why the run counts as diverged ('' when it does not): non-finite final weights, or more than
    max_skipped_fraction of its steps skipped."""
    bad = [n for n, p in run.model.named_parameters() if not torch.isfinite(p).all()]
    total = sum(1 for _ in run.model.parameters())
    skipped = run.state["skipped"] / run.args.max_steps
    why = [f"{len(bad)} of {total} weight tensors are not finite ({bad[0]}, ...)"] if bad else []
    if run.state["diverged_at_step"] is not None:
        why.append(f"stopped after {run.args.stop_after_nonfinite} consecutive non-finite steps from step "
                   f"{run.state['diverged_at_step']}")  # fmt: skip
    if skipped > run.args.max_skipped_fraction:
        why.append(f"{run.state['skipped']} of {run.args.max_steps} steps skipped (max_skipped_fraction "
                   f"{run.args.max_skipped_fraction})")  # fmt: skip
    return "; ".join(why)


def validate(run: Run, metrics: MetricsLog) -> dict:
    """The end of a finished run: validation loss, summary.json, final/ (model + tokenizer), MLflow. A diverged run
    (`divergence`) is an error unless allow_divergence: it is not marked finished (its checkpoints stay)."""
    args, state = run.args, run.state
    diverged = divergence(run)
    if diverged and not args.allow_divergence:
        raise PitError(
            f"the run diverged: {diverged}; not marked finished. Lower lr (or set allow_divergence to record a "
            "diverged run, as a learning-rate sweep does)"
        )
    rows = run.folder.metrics()
    tail = [r["loss"] for r in rows[-args.final_loss_window :] if math.isfinite(r["loss"])]
    final_loss = float(np.mean(tail)) if tail else float("nan")
    steps = Steps(run.run_name, total=2, unit="phase")  # minutes for a large model: say what runs
    steps.line(f"final validation loss on {args.eval_batches * args.micro_batch_size} windows", 1)
    val_loss = validation_loss(run)
    summary = {
        "run_name": run.run_name,
        "mode": args.mode,
        "interface": run.tags["interface"],
        "model": args.model,
        "steps": args.max_steps,
        "tokens": state["tokens"],
        "initial_val_loss": state["initial_val_loss"],
        "first_step_loss": state["first_loss"],
        "final_train_loss": final_loss,
        "final_train_ppl": math.exp(final_loss),
        "last_step_loss": rows[-1]["loss"],
        "val_loss": val_loss,
        "val_ppl": math.exp(val_loss),
        "runtime_s": state["runtime_s"],
        "peak_memory_mb": peak_memory_mb(run.device),
        "delta_ti": model_delta_ti(run.model),
        "skipped_steps": state["skipped"],
        "final_loss_window": args.final_loss_window,
        **(
            {"diverged_at_step": state["diverged_at_step"], "steps_run": rows[-1]["step"]}
            if state["diverged_at_step"] is not None
            else {}
        ),  # fmt: skip
        **({"diverged": diverged} if diverged else {}),
    }
    tokenizer = load_tokenizer(args.tokenizer or (args.model if args.mode == "continue" else ""))
    steps.line(f"saving {run.folder.path / 'final'}", 1)
    save_pretrained_atomic(run.model, run.folder.path / "final", tokenizer)  # with its model card
    metrics.upload()
    run.tracker.log_metrics([{"step": args.max_steps, **summary}], FINAL_KEYS)
    run.folder.finish(run.tracker, summary)  # summary.json, last
    return summary


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    if not path:
        return None
    if not Path(path).is_dir():
        raise PitError(f"tokenizer folder {path!r} does not exist")
    return AutoTokenizer.from_pretrained(path)


def train(args: PretrainArgs, run_dir: str | Path, overwrite: bool = False) -> dict:
    """Run (or resume) one pretraining run in `run_dir` on `args.threads` CPU threads; returns the summary ({} when
    the run stopped early on purpose, or on the other ranks of a DDP job). A run folder that holds this run finished
    is left untouched: its summary comes back as a `FinishedRun`. One that holds a finished run with other settings
    is refused (PitError) unless `overwrite`: then the new run replaces it once complete (run_folder.claim)."""
    with cpu_threads(args.threads):
        device, d = start_processes(args)
        with claim(
            run_dir, args.fingerprint(), STALE_OUTPUTS, REQUIRED_OUTPUTS, overwrite, main=d.main, barrier=d.barrier
        ) as folder:
            if isinstance(folder, FinishedRun):
                d.close()
                if d.main:
                    check_finished_inputs(folder, args.input_paths())  # the same settings, and the same inputs?
                return folder if d.main else {}
            run = setup(args, folder, device, d)
            finished, metrics = fit(run)
            summary = {}
            if not finished:
                if metrics is not None:
                    metrics.upload()
                return summary
            if run.dist.main:
                summary = validate(run, metrics)
            run.dist.close()
            return summary


def summary_line(summary: dict) -> str:
    return json.dumps({k: summary[k] for k in ("final_train_loss", "final_train_ppl", "val_loss", "runtime_s")})

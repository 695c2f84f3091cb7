"""LoRA post-training (`pit lora`, paper Section 5.6) of a pretrained checkpoint of any interface, with the
skeleton of pretraining (setup -> fit -> evaluate) and its run folder (pit/training/run_folder.py).

The same LoRA config serves every method at a scale; only the target modules depend on the model
family (`targets`, keyed by model_type). `peft` wraps the base; everything else is frozen, the token
interface included, unless `train_interface: true` (then PIT trains L, and Z when its config says
trainable_z, with the polar retraction after every step; TT its table; untied both tables).

Training data: the task's training split (`pit.evaluation.tasks.load_task(..., split="train")`)
in the evaluation's prompt format; the loss is the next-token cross-entropy of the target tokens
only (prompt + target + EOS, right-padded; prompts are cut from the left when an example does not
fit `seq_len + 1` tokens). Each step draws `batch_size` examples with `numpy.random.default_rng([seed,
step])`, so a resumed run reads the same examples.

Run folder:
    run.json, metrics.jsonl                 config, identity; one JSON row per step
    checkpoints/step-NNNNNN/                trainable.safetensors + trainer_state.pt (resume)
    adapter/                                peft adapter (+ interface.safetensors when trained) + pit_base.json
    merged/                                 base with the update merged in (save_pretrained, untied config)
                                            + tokenizer: what `pit evaluate` scores
    side_effects.json                       pit.analysis.side_effects against the base (when val_data is set)
    summary.json                            written last: the run is complete when it exists
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pit.core.linalg import cpu_threads
from pit.data.reader import TokenFile
from pit.data.tokenizers import bos_prefix
from pit.errors import PitError
from pit.evaluation.tasks import load_task
from pit.io import atomic_path, sha256_file, write_json
from pit.models.any_model import family
from pit.models.checkpoint import load_model, save_pretrained_atomic
from pit.progress import Steps, progress_bar
from pit.sidecars import read_object
from pit.tracking.tracker import FINAL_KEYS, Tracker
from pit.training.args import LoraArgs
from pit.training.objective import NextTokenLoss
from pit.training.optim import optimizer_update, warmup_cosine
from pit.training.run_folder import (
    FinishedRun,
    MetricsLog,
    RunFolder,
    RunHandles,
    check_finished_inputs,
    claim,
    input_record,
)
from pit.training.runtime import mixed_precision, peak_memory_mb, read_scalars, resolve_device, to_device

METRIC_KEYS = ("loss", "lr", "grad_norm", "tokens_per_s", "target_tokens")
SIDE_EFFECT_KEYS = (
    "kl",
    "kl_max",
    "top1_changed",
    "val_loss_before",
    "val_loss_after",
    "val_loss_change",
    "delta_ti_before",
    "delta_ti_after",
    "delta_ti_change",
    "embedding_change",
    "head_change",
)
STALE_OUTPUTS = ("metrics.jsonl", "summary.json", "side_effects.json", "frontier.json", "adapter", "merged")


# ---- data --------------------------------------------------------------------------------------
def encode_examples(task, tokenizer, seq_len: int) -> list[tuple[list[int], int]]:
    """(token ids, number of prompt tokens) per training record: [BOS +] prompt + target + EOS, at most
    seq_len + 1 tokens (the prompt loses its beginning first, keeping at least half the window; a BOS that the
    tokenizer puts before every text, as Llama's, stays first)."""
    if tokenizer.eos_token_id is None:
        raise PitError("the base checkpoint's tokenizer has no EOS token; expected one to end the targets")
    out, bos = [], bos_prefix(tokenizer)
    for record in task.records.values():
        prompt = tokenizer(task.spec.prompt(record), add_special_tokens=False)["input_ids"]
        target = tokenizer(task.spec.target(record), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        keep_prompt = max(min(len(prompt), (seq_len + 1) // 2 - len(bos)), seq_len + 1 - len(bos) - len(target))
        prompt = bos + prompt[max(0, len(prompt) - keep_prompt) :]
        ids = (prompt + target)[: seq_len + 1]
        out.append((ids, len(prompt)))
    return out


def make_batch(examples: list[tuple[list[int], int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels), right-padded; labels are -100 on prompt and padding positions. With causal
    attention and right padding no real token sees a pad, so no attention mask is needed."""
    width = max(len(ids) for ids, _ in examples) - 1
    inputs = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for row, (ids, n_prompt) in enumerate(examples):
        t = torch.tensor(ids)
        inputs[row, : len(ids) - 1] = t[:-1]
        labels[row, n_prompt - 1 : len(ids) - 1] = t[n_prompt:]
    return inputs, labels


# ---- model -------------------------------------------------------------------------------------
def base_fingerprint(path: str | Path) -> str:
    """sha256 over the base checkpoint's safetensors files: which base an adapter belongs to."""
    files = sorted(Path(path).glob("*.safetensors"))
    return hashlib.sha256("".join(sha256_file(f) for f in files).encode()).hexdigest()


def interface_parameters(model) -> dict[str, torch.nn.Parameter]:
    """The interface parameters a configured interface update trains (PIT: L, and Z if trainable_z)."""
    params = dict(model.interface.named_parameters())
    if model.interface_config.kind == "pit" and not model.interface_config.trainable_z:
        params.pop("Z")
    return params


def lora_targets(model_type: str, configured: dict) -> list[str]:
    """The modules LoRA adapts: the config's `targets` entry for the model_type, else the family's attention
    projections (pit.models.any_model.FAMILIES: `q_proj k_proj v_proj o_proj` for Llama-like blocks, GPT-NeoX
    `query_key_value dense`, Phi-3 `qkv_proj o_proj`, GPT-2 `c_attn c_proj`)."""
    if model_type in configured:
        return list(configured[model_type])
    if model_type.startswith("pit_") and model_type != "pit_scratch":
        return list(family(model_type).lora_targets)
    raise PitError(f"lora config: no target modules for model_type {model_type!r}; `targets` has {sorted(configured)}")


@contextmanager
def peft_wrapping():
    """peft asks a model for transformers' deprecated `is_gradient_checkpointing` when it wraps it (a FutureWarning
    per LoRA run in every job log): not our call, so only that warning is silenced, only while peft wraps."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def check_rank(model, targets: list[str], rank: int) -> None:
    """A PitError when `rank` exceeds the smaller dimension of every target module's weight (the modules peft adapts:
    names equal to a target or ending in '.' + target): an update B A of a d_out x d_in weight has rank at most
    min(d_in, d_out), so a rank above that of every target only adds parameters (an absurd one, memory until the
    process dies)."""
    dims = {
        name: min(m.weight.shape)
        for name, m in model.named_modules()
        if any(name == t or name.endswith(f".{t}") for t in targets)
        and isinstance(getattr(m, "weight", None), torch.Tensor)
        and m.weight.dim() == 2
    }
    if dims and rank > max(dims.values()):
        name = max(dims, key=dims.get)
        raise PitError(
            f"lora config: rank {rank}; expected at most {dims[name]}, the largest rank an update of the target "
            f"modules can have ({name}: a weight of shape {tuple(model.get_submodule(name).weight.shape)})"
        )


def wrap(model, cfg: LoraArgs):
    """The base model with LoRA adapters on the family's target modules (peft), all else frozen; a rank above a
    target's smaller dimension is refused first (`check_rank`)."""
    from peft import LoraConfig, get_peft_model

    model_type = model.config.model_type
    targets = lora_targets(model_type, cfg.targets)
    check_rank(model, targets, cfg.rank)
    lora = LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
        fan_in_fan_out=model_type == "pit_gpt2",
    )
    try:
        with peft_wrapping():
            peft_model = get_peft_model(model, lora)
    except ValueError as err:
        raise PitError(f"lora config: target modules {targets} do not fit {model_type}: {err}") from None
    if cfg.train_interface:
        for p in interface_parameters(model).values():
            p.requires_grad_(True)
    return peft_model


def trainable_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model, state: dict[str, torch.Tensor], where: str) -> None:
    own = {n: p for n, p in model.named_parameters() if p.requires_grad}
    bad = sorted(set(own) ^ set(state)) or [n for n in own if own[n].shape != state[n].shape]
    if bad:
        raise PitError(
            f"{where} does not match this run's adapter (e.g. {bad[0]}); it was written with other "
            "LoRA settings or another base model"
        )
    with torch.no_grad():
        for n, p in own.items():
            p.copy_(state[n])


def save_adapter(peft_model, cfg: LoraArgs, folder: Path) -> None:
    from safetensors.torch import save_file

    peft_model.save_pretrained(folder, safe_serialization=True)
    if cfg.train_interface:
        base = peft_model.get_base_model()
        save_file(
            {k: v.detach().contiguous() for k, v in interface_parameters(base).items()},
            folder / "interface.safetensors",
        )
    write_json(
        folder / "pit_base.json",
        {
            "base": str(cfg.base),
            "base_sha256": base_fingerprint(cfg.base),
            "model_type": peft_model.get_base_model().config.model_type,
            "train_interface": cfg.train_interface,
        },
    )


def merge_adapter(base_path: str | Path, adapter: str | Path):
    """The base with a saved adapter merged in; the adapter must have been trained on this base."""
    from peft import PeftModel
    from safetensors.torch import load_file

    adapter = Path(adapter)
    meta_file = adapter / "pit_base.json"
    if not meta_file.is_file() or not (adapter / "adapter_config.json").is_file():
        raise PitError(
            f"{str(adapter)!r} is not an adapter folder of `pit lora` (no pit_base.json / adapter_config.json)"
        )
    meta = read_object(meta_file, "the pit_base.json of a `pit lora` adapter", {"base": str, "base_sha256": str},
                       {"model_type": str, "train_interface": bool})  # fmt: skip
    sha = base_fingerprint(base_path)
    if sha != meta["base_sha256"]:
        raise PitError(
            f"adapter {str(adapter)!r} was trained on base {meta['base']!r} (weights sha256 "
            f"{meta['base_sha256'][:12]}), not on {str(base_path)!r} (sha256 {sha[:12]}); "
            "merge it into the base it was trained on"
        )
    base = load_model(base_path)
    with peft_wrapping():
        model = PeftModel.from_pretrained(base, adapter)
    if meta.get("train_interface"):
        state = load_file(adapter / "interface.safetensors")
        params = interface_parameters(base)
        if set(state) != set(params):
            raise PitError(f"{adapter / 'interface.safetensors'} holds {sorted(state)}; expected {sorted(params)}")
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(state[k])
    return merged_model(model)


def merged_model(peft_model):
    """merge_and_unload, with a config that cannot tie anything on reload (the interface ties)."""
    model = peft_model.merge_and_unload()
    model.config.tie_word_embeddings = False
    return model.eval()


# ---- the run -----------------------------------------------------------------------------------
@dataclass(kw_only=True)
class LoraRun(RunHandles):
    """A LoRA run as `setup` made it (`model` is the peft model)."""

    task: object
    tokenizer: object
    examples: list
    val: TokenFile | None
    trainable: list
    kind: str
    params: dict


def load_data(args: LoraArgs):
    """(task, tokenizer, encoded examples, validation tokens or None), checked before the model loads."""
    from transformers import AutoTokenizer

    task = load_task(args.task, args.source, args.limit, split="train")
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.base)
    except (OSError, ValueError) as err:
        raise PitError(f"no tokenizer in the base checkpoint {args.base!r}: {err}") from None
    examples = encode_examples(task, tokenizer, args.seq_len)
    val = None
    if args.val_data:
        val = TokenFile(args.val_data)
        val.check_checkpoint(args.base)
        val.sequential_starts(args.side_effect_seq_len)  # fails fast if the file is too short
    return task, tokenizer, examples, val


def required_outputs(args: LoraArgs) -> tuple[str, ...]:
    """With summary.json: what a finished LoRA run folder holds."""
    return ("adapter", "merged", "side_effects.json") if args.val_data else ("adapter", "merged")


def setup(args: LoraArgs, folder: RunFolder, base_sha: str) -> LoraRun:
    """Data, the base with its adapters, the optimizer, then start or resume the run in `folder` and its MLflow
    run (`base_sha`: the base checkpoint's `base_fingerprint`)."""
    device = resolve_device(args.device)
    use_bf16, autocast = mixed_precision(args.precision, device)
    torch.manual_seed(args.seed)
    task, tokenizer, examples, val = load_data(args)
    base_model = load_model(args.base, vocab_size=val.meta["vocab_size"] if val is not None else None)
    if len(tokenizer) > base_model.config.vocab_size:
        raise PitError(
            f"the tokenizer in {args.base!r} has {len(tokenizer)} tokens; the model only {base_model.config.vocab_size}"
        )
    model = wrap(base_model, args)
    model.to(device).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, betas=(args.beta1, args.beta2), weight_decay=args.weight_decay)
    scheduler = warmup_cosine(optimizer, args)
    inputs = input_record(args.input_paths())  # fixed at the start: a resume on other inputs is refused
    state = {"runtime_s": 0.0, "mlflow_run_id": None, "fingerprint": folder.fingerprint, "inputs": inputs}
    start_step = 0
    ckpt, saved = folder.resume_point(STALE_OUTPUTS, inputs)
    if ckpt is not None:
        from safetensors.torch import load_file

        load_trainable_state(model, load_file(ckpt / "trainable.safetensors"), str(ckpt))
        RunFolder.restore(saved, optimizer, scheduler, device)
        start_step = saved["step"]
        state.update({k: saved[k] for k in state if k in saved})
    run_name = args.run_name or folder.name
    kind = model.get_base_model().interface_config.kind
    params = {
        "lora": dataclasses.asdict(args),
        "base_sha256": base_sha,
        "task_data": task.name,
        "examples": len(examples),
        "device": device.type,
        "bf16": use_bf16,
        "trainable_parameters": sum(p.numel() for p in trainable),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    run = LoraRun(
        args=args,
        folder=folder,
        device=device,
        autocast=autocast,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        tracker=None,
        state=state,
        start_step=start_step,
        run_name=run_name,
        task=task,
        tokenizer=tokenizer,
        examples=examples,
        val=val,
        trainable=trainable,
        kind=kind,
        params=params,
    )
    run.tracker = start_tracking(run)
    return run


def start_tracking(run: LoraRun) -> Tracker:
    """The run's MLflow run (continued by id), run.json, and metrics.jsonl cut back to the resume point."""
    args = run.args
    tags = {"stage": "lora", "task": args.task, "interface": run.kind, **args.tags}
    logged = {"metrics.jsonl": METRIC_KEYS, "summary.json": FINAL_KEYS, "side_effects.json": SIDE_EFFECT_KEYS}
    mlflow_run, inputs = run.state["mlflow_run_id"], run.state["inputs"]
    tracker = run.folder.start_tracking(args.mlflow, run.run_name, tags, run.params, mlflow_run, logged, inputs)
    run.state["mlflow_run_id"] = tracker.run_id
    run.folder.keep_metrics_until(run.start_step)
    return tracker


def train_step(run: LoraRun, step_loss, step: int) -> dict:
    """One optimizer step on `batch_size` examples drawn with default_rng([seed, step]); its metrics row."""
    args = run.args
    t0 = time.perf_counter()
    pick = np.random.default_rng([args.seed, step]).integers(0, len(run.examples), size=args.batch_size)
    inputs, labels = make_batch([run.examples[i] for i in pick], run.tokenizer.eos_token_id)
    target_tokens = int((labels != -100).sum())  # on the host, before the copy
    inputs, labels = to_device(inputs, run.device), to_device(labels, run.device)
    with run.autocast:  # the chunked fused loss of pretraining: no (tokens x V) logits
        loss = step_loss(inputs, labels)
    loss.backward()
    loss, grad_norm = read_scalars(loss, torch.nn.utils.clip_grad_norm_(run.trainable, args.grad_clip))  # one sync
    optimizer_update(run.optimizer, run.model.get_base_model().interface if args.train_interface else None)
    lr = run.scheduler.get_last_lr()[0]
    run.scheduler.step()
    dt = time.perf_counter() - t0
    run.state["runtime_s"] += dt
    return {
        "step": step + 1,
        "loss": loss,
        "lr": lr,
        "grad_norm": grad_norm,
        "target_tokens": target_tokens,
        "tokens_per_s": inputs.numel() / dt,
        "time_s": run.state["runtime_s"],
    }


def fit(run: LoraRun) -> bool:
    """Train from the resume point to max_steps (or stop_after_steps); True when the run reached max_steps."""
    args = run.args
    step_loss = NextTokenLoss(run.model.get_base_model())  # peft's LoRA layers sit inside the base model's modules
    last_step = args.max_steps if args.stop_after_steps is None else min(args.max_steps, args.stop_after_steps)
    metrics = MetricsLog(run.folder.metrics_path, run.tracker, METRIC_KEYS, every=None)
    for step in progress_bar(
        range(run.start_step, last_step),
        initial=run.start_step,
        total=args.max_steps,
        desc=run.run_name,
        dynamic_ncols=True,
    ):
        metrics.write(train_step(run, step_loss, step))
        if args.checkpoint_every and (step + 1) % args.checkpoint_every == 0 and step + 1 < args.max_steps:
            run.folder.save_checkpoint(
                step + 1,
                lambda tmp: save_file_trainable(run.model, tmp),
                run.optimizer,
                run.scheduler,
                run.state,
                args.keep_checkpoints,
            )
    metrics.close()
    metrics.upload()
    return last_step == args.max_steps


def save_file_trainable(model, folder: Path) -> None:
    from safetensors.torch import save_file

    save_file(trainable_state(model), folder / "trainable.safetensors")


def evaluate(run: LoraRun) -> dict:
    """The end of a finished run: adapter/, merged/ (+ tokenizer), side effects against the base, summary.json."""
    from pit.analysis.side_effects import side_effects

    args, path = run.args, run.folder.path
    steps = Steps(run.run_name, total=2 if run.val is None else 3, unit="phase")  # minutes for a large model
    steps.line(f"saving {path / 'adapter'} and the merged model {path / 'merged'}", 1)
    with atomic_path(path / "adapter") as tmp:
        save_adapter(run.model, args, tmp)
    merged = merged_model(run.model)
    save_pretrained_atomic(merged, path / "merged", run.tokenizer)  # with its model card
    rows = run.folder.metrics()
    summary = {
        "run_name": run.run_name,
        "task": args.task,
        "task_data": run.task.name,
        "interface": run.kind,
        "base": args.base,
        "steps": args.max_steps,
        "first_step_loss": rows[0]["loss"],
        "last_step_loss": rows[-1]["loss"],
        "final_train_loss": float(np.mean([r["loss"] for r in rows[-5:]])),
        "runtime_s": run.state["runtime_s"],
        "peak_memory_mb": peak_memory_mb(run.device),
        "trainable_parameters": run.params["trainable_parameters"],
    }
    if run.val is not None:
        steps.line(f"side effects against the base on {args.side_effect_windows} held-out windows", 1)
        effects = side_effects(
            load_model(args.base).to(run.device), merged, run.val, args.side_effect_seq_len, args.side_effect_windows
        )
        write_json(path / "side_effects.json", {**effects, "val_data": args.val_data})
        run.tracker.log_metrics([{"step": args.max_steps, **effects}], SIDE_EFFECT_KEYS)
        run.tracker.log_artifact(path / "side_effects.json")
    steps.line("summary and MLflow", 1)
    run.tracker.log_metrics([{"step": args.max_steps, **summary}], FINAL_KEYS)
    run.folder.finish(run.tracker, summary)  # summary.json, last
    return summary


def train_lora(args: LoraArgs, run_dir: str | Path, overwrite: bool = False) -> dict:
    """Run (or resume) one LoRA run in `run_dir` on `args.threads` CPU threads; returns the summary ({} when stopped
    early on purpose). A run folder that holds this run finished is left untouched (its summary comes back as a
    `FinishedRun`); one with a finished run of other settings is refused unless `overwrite` (as `pit train`)."""
    with cpu_threads(args.threads):
        resolve_device(args.device)  # a bad device is refused before the run folder is claimed
        base_sha = base_fingerprint(args.base)
        fingerprint = args.fingerprint(base_sha256=base_sha)
        with claim(run_dir, fingerprint, STALE_OUTPUTS, required_outputs(args), overwrite) as folder:
            if isinstance(folder, FinishedRun):
                check_finished_inputs(folder, args.input_paths())  # the same settings, and the same inputs?
                return folder
            run = setup(args, folder, base_sha)
            return evaluate(run) if fit(run) else {}


def summary_line(summary: dict) -> str:
    return json.dumps({k: summary[k] for k in ("first_step_loss", "final_train_loss", "runtime_s")})

"""`pit lora`: LoRA post-training (paper Section 5.6) of a pretrained checkpoint of any interface.

    pit lora train --spec-file lora.json --out results/posttrain/scratch/303m/pit/mbpp
    pit lora merge --base CKPT --adapter ADAPTER_DIR --out MERGED_DIR

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
    side_effects.json                       pit.side_effects against the base (when val_data is set)
    summary.json                            written last: the run is complete when it exists
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from pit.allocator import retain_freed_memory
from pit.errors import PitError, config_from_dict
from pit.io import atomic_path, sha256_file, write_json, write_text

log = logging.getLogger("pit.lora")

DEFAULT_TARGETS = {"pit_scratch": ["q_proj", "k_proj", "v_proj", "o_proj"],  # attention of the parallel block
                   "pit_gpt2": ["attn.c_attn", "attn.c_proj"]}  # GPT-2 attention (Conv1D)
METRIC_KEYS = ("loss", "lr", "grad_norm", "tokens_per_s", "target_tokens")
SIDE_EFFECT_KEYS = ("kl", "kl_max", "top1_changed", "val_loss_before", "val_loss_after", "val_loss_change",
                    "delta_ti_before", "delta_ti_after", "delta_ti_change", "embedding_change", "head_change")


@dataclass
class LoraRunConfig:
    """One LoRA run. Keys of the `posttrain` section of the workflow config (plus base/task)."""

    base: str  # checkpoint folder of a pretrained run (its final/), with its tokenizer
    task: str  # mbpp | gsm8k
    source: str = "offline"  # offline | hub | a JSON/JSONL file of records
    limit: int | None = None  # use only the first N training records
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.05
    targets: dict = field(default_factory=lambda: dict(DEFAULT_TARGETS))  # model_type -> module names
    train_interface: bool = False
    max_steps: int = 100
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 2e-4
    min_lr: float = 2e-5
    warmup_steps: int = 10
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0
    seed: int = 0
    precision: str = "auto"  # auto (bf16 on CUDA) | fp32 | bf16
    device: str = "auto"
    threads: int | None = None
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    val_data: str | None = None  # held-out token file for the side effects
    side_effect_windows: int = 16
    side_effect_seq_len: int = 128
    stop_after_steps: int | None = None
    run_name: str | None = None
    tags: dict = field(default_factory=dict)
    mlflow: dict = field(default_factory=dict)

    def __post_init__(self):
        from pit.evaluation.tasks import SPECS

        trainable = sorted(k for k, v in SPECS.items() if v.target is not None)
        checks = [
            (self.task in trainable, f"task {self.task!r}; expected one of {trainable}"),
            (self.rank > 0 and self.alpha > 0, f"rank {self.rank}, alpha {self.alpha}; expected > 0"),
            (0 <= self.dropout < 1, f"dropout {self.dropout}; expected 0 <= dropout < 1"),
            (self.max_steps > 0 and self.batch_size > 0 and self.seq_len > 1,
             f"max_steps {self.max_steps}, batch_size {self.batch_size}, seq_len {self.seq_len}; expected > 0, > 0, > 1"),
            (self.lr > 0 and 0 <= self.min_lr <= self.lr, f"lr {self.lr}, min_lr {self.min_lr}; expected 0 <= min_lr <= lr"),
            (0 <= self.warmup_steps < self.max_steps, f"warmup_steps {self.warmup_steps}; expected 0 <= warmup < max_steps"),
            (self.precision in ("auto", "fp32", "bf16"), f"precision {self.precision!r}; expected auto, fp32 or bf16"),
            (isinstance(self.targets, dict) and all(isinstance(v, list) and v for v in self.targets.values()),
             f"targets {self.targets!r}; expected a mapping model_type -> non-empty list of module names"),
        ]
        for ok, msg in checks:
            if not ok:
                raise PitError(f"lora config: {msg}")

    @classmethod
    def from_dict(cls, d: dict) -> "LoraRunConfig":
        return config_from_dict(cls, d, "lora config")


# ---- data --------------------------------------------------------------------------------------
def encode_examples(task, tokenizer, seq_len: int) -> list[tuple[list[int], int]]:
    """(token ids, number of prompt tokens) per training record: prompt + target + EOS, at most
    seq_len + 1 tokens (the prompt loses its beginning first, keeping at least half the window)."""
    if tokenizer.eos_token_id is None:
        raise PitError("the base checkpoint's tokenizer has no EOS token; expected one to end the targets")
    out = []
    for record in task.records.values():
        prompt = tokenizer(task.spec.prompt(record), add_special_tokens=False)["input_ids"]
        target = tokenizer(task.spec.target(record), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        keep_prompt = max(min(len(prompt), (seq_len + 1) // 2), seq_len + 1 - len(target))
        prompt = prompt[max(0, len(prompt) - keep_prompt):]
        ids = (prompt + target)[:seq_len + 1]
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
        inputs[row, :len(ids) - 1] = t[:-1]
        labels[row, n_prompt - 1:len(ids) - 1] = t[n_prompt:]
    return inputs, labels


# ---- model -------------------------------------------------------------------------------------
def base_fingerprint(path: str | Path) -> str:
    """sha256 over the base checkpoint's safetensors files: which base an adapter belongs to."""
    import hashlib

    files = sorted(Path(path).glob("*.safetensors"))
    return hashlib.sha256("".join(sha256_file(f) for f in files).encode()).hexdigest()


def interface_parameters(model) -> dict[str, torch.nn.Parameter]:
    """The interface parameters a configured interface update trains (PIT: L, and Z if trainable_z)."""
    params = dict(model.interface.named_parameters())
    if model.interface_config.kind == "pit" and not model.interface_config.trainable_z:
        params.pop("Z")
    return params


def wrap(model, cfg: LoraRunConfig):
    """The base model with LoRA adapters on the family's target modules (peft), all else frozen."""
    from peft import LoraConfig, get_peft_model

    model_type = model.config.model_type
    if model_type not in cfg.targets:
        raise PitError(f"lora config: no target modules for model_type {model_type!r}; "
                       f"`targets` has {sorted(cfg.targets)}")
    lora = LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=cfg.targets[model_type],
                      bias="none", task_type="CAUSAL_LM", fan_in_fan_out=model_type == "pit_gpt2")
    try:
        peft_model = get_peft_model(model, lora)
    except ValueError as err:
        raise PitError(f"lora config: target modules {cfg.targets[model_type]} do not fit {model_type}: {err}") from None
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
        raise PitError(f"{where} does not match this run's adapter (e.g. {bad[0]}); it was written with other "
                       "LoRA settings or another base model")
    with torch.no_grad():
        for n, p in own.items():
            p.copy_(state[n])


def save_adapter(peft_model, cfg: LoraRunConfig, folder: Path) -> None:
    from safetensors.torch import save_file

    peft_model.save_pretrained(folder, safe_serialization=True)
    if cfg.train_interface:
        base = peft_model.get_base_model()
        save_file({k: v.detach().contiguous() for k, v in interface_parameters(base).items()},
                  folder / "interface.safetensors")
    write_json(folder / "pit_base.json", {"base": str(cfg.base), "base_sha256": base_fingerprint(cfg.base),
                                          "model_type": peft_model.get_base_model().config.model_type,
                                          "train_interface": cfg.train_interface})


def merge_adapter(base_path: str | Path, adapter: str | Path):
    """The base with a saved adapter merged in; the adapter must have been trained on this base."""
    from peft import PeftModel
    from safetensors.torch import load_file

    from pit.checkpoint import load_model

    adapter = Path(adapter)
    meta_file = adapter / "pit_base.json"
    if not meta_file.is_file() or not (adapter / "adapter_config.json").is_file():
        raise PitError(f"{str(adapter)!r} is not an adapter folder of `pit lora` (no pit_base.json / adapter_config.json)")
    meta = json.loads(meta_file.read_text())
    sha = base_fingerprint(base_path)
    if sha != meta["base_sha256"]:
        raise PitError(f"adapter {str(adapter)!r} was trained on base {meta['base']!r} (weights sha256 "
                       f"{meta['base_sha256'][:12]}), not on {str(base_path)!r} (sha256 {sha[:12]}); "
                       "merge it into the base it was trained on")
    base = load_model(base_path)
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
def run_fingerprint(cfg: LoraRunConfig, base_sha: str) -> str:
    import hashlib

    d = {k: v for k, v in dataclasses.asdict(cfg).items()
         if k not in ("threads", "stop_after_steps", "run_name", "tags", "mlflow", "checkpoint_every",
                      "keep_checkpoints", "val_data", "side_effect_windows", "side_effect_seq_len", "base")}
    return hashlib.sha256(json.dumps({**d, "base_sha256": base_sha}, sort_keys=True).encode()).hexdigest()


def save_checkpoint(run_dir: Path, step: int, model, optimizer, scheduler, state: dict, keep: int) -> None:
    from safetensors.torch import save_file

    with atomic_path(run_dir / "checkpoints" / f"step-{step:06d}") as tmp:
        tmp.mkdir()
        save_file(trainable_state(model), tmp / "trainable.safetensors")
        torch.save({"step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "rng_cpu": torch.get_rng_state(),
                    "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [], **state},
                   tmp / "trainer_state.pt")
    for old in sorted((run_dir / "checkpoints").glob("step-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def train_lora(cfg: LoraRunConfig, run_dir: str | Path) -> dict:
    """Run (or resume) one LoRA run on `cfg.threads` CPU threads; returns the summary ({} when stopped
    early on purpose)."""
    from pit.tying import cpu_threads

    with cpu_threads(cfg.threads):
        return _train_lora(cfg, run_dir)


def _train_lora(cfg: LoraRunConfig, run_dir: str | Path) -> dict:
    from safetensors.torch import load_file
    from tqdm.auto import tqdm
    from transformers import AutoTokenizer

    from pit.checkpoint import load_model
    from pit.evaluation.tasks import load_task
    from pit.tracking import Tracker
    from pit.train import (NextTokenLoss, git_commit, latest_checkpoint, lr_lambda, mixed_precision, optimizer_update,
                           peak_memory_mb, resolve_device)

    run_dir = Path(run_dir)
    device = resolve_device(cfg.device)
    use_bf16, autocast = mixed_precision(cfg.precision, device)
    torch.manual_seed(cfg.seed)

    task = load_task(cfg.task, cfg.source, cfg.limit, split="train")
    try:
        tokenizer = AutoTokenizer.from_pretrained(cfg.base)
    except (OSError, ValueError) as err:
        raise PitError(f"no tokenizer in the base checkpoint {cfg.base!r}: {err}") from None
    examples = encode_examples(task, tokenizer, cfg.seq_len)
    val = None
    if cfg.val_data:
        from pit.data.reader import TokenFile

        val = TokenFile(cfg.val_data)
        val.sequential_starts(cfg.side_effect_seq_len)  # fails fast if the file is too short

    base_sha = base_fingerprint(cfg.base)
    base_model = load_model(cfg.base, vocab_size=val.meta["vocab_size"] if val is not None else None)
    if len(tokenizer) > base_model.config.vocab_size:
        raise PitError(f"the tokenizer in {cfg.base!r} has {len(tokenizer)} tokens; the model only "
                       f"{base_model.config.vocab_size}")
    model = wrap(base_model, cfg)
    model.to(device).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))

    fingerprint = run_fingerprint(cfg, base_sha)
    state = {"runtime_s": 0.0, "mlflow_run_id": None, "fingerprint": fingerprint}
    start_step = 0
    ckpt = latest_checkpoint(run_dir)
    if ckpt is not None and torch.load(ckpt / "trainer_state.pt", weights_only=True).get("fingerprint") != fingerprint:
        log.warning("checkpoints in %s belong to a run with other settings or another base; starting afresh", run_dir)
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        ckpt = None
    if ckpt is not None:
        saved = torch.load(ckpt / "trainer_state.pt", weights_only=True)
        load_trainable_state(model, load_file(ckpt / "trainable.safetensors"), str(ckpt))
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["rng_cpu"])
        start_step = saved["step"]
        state.update({k: saved[k] for k in state if k in saved})
        log.info("resuming %s from step %d", run_dir, start_step)
    elif run_dir.exists():
        for stale in ("metrics.jsonl", "summary.json", "side_effects.json", "adapter", "merged"):
            p = run_dir / stale
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)

    run_name = cfg.run_name or run_dir.name
    kind = model.get_base_model().interface_config.kind
    tags = {"stage": "lora", "task": cfg.task, "interface": kind, **cfg.tags}
    experiment = cfg.mlflow.get("experiment", "pit")
    tracker = Tracker(cfg.mlflow.get("tracking_uri"), experiment, run_name, tags,
                      enabled=cfg.mlflow.get("enabled", True), run_id=state["mlflow_run_id"])
    state["mlflow_run_id"] = tracker.run_id
    params = {"lora": dataclasses.asdict(cfg), "git_commit": git_commit(), "base_sha256": base_sha,
              "task_data": task.name, "examples": len(examples), "device": device.type, "bf16": use_bf16,
              "trainable_parameters": sum(p.numel() for p in trainable),
              "parameters": sum(p.numel() for p in model.parameters())}
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "run.json", {"run_name": run_name, "experiment": experiment, "tags": tags, "params": params,
                                      "mlflow_run_id": tracker.run_id})
    if ckpt is None:
        tracker.log_params(params)
    metrics_path = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip()] if metrics_path.exists() else []
    write_text(metrics_path, "".join(json.dumps(r) + "\n" for r in rows if r["step"] <= start_step))

    base_iface = model.get_base_model().interface
    step_loss = NextTokenLoss(model.get_base_model())  # peft's LoRA layers sit inside the base model's modules
    last_step = cfg.max_steps if cfg.stop_after_steps is None else min(cfg.max_steps, cfg.stop_after_steps)
    pending = []
    with open(metrics_path, "a") as metrics_file:
        for step in tqdm(range(start_step, last_step), initial=start_step, total=cfg.max_steps, desc=run_name,
                         dynamic_ncols=True):
            t0 = time.perf_counter()
            pick = np.random.default_rng([cfg.seed, step]).integers(0, len(examples), size=cfg.batch_size)
            inputs, labels = make_batch([examples[i] for i in pick], tokenizer.eos_token_id)
            inputs, labels = inputs.to(device), labels.to(device)
            with autocast:  # the chunked fused loss of pit train (pit/loss.py): no (tokens x V) logits
                loss = step_loss(inputs, labels)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(trainable, cfg.grad_clip).item()
            optimizer_update(optimizer, base_iface if cfg.train_interface else None)
            lr = scheduler.get_last_lr()[0]
            scheduler.step()
            dt = time.perf_counter() - t0
            state["runtime_s"] += dt
            row = {"step": step + 1, "loss": loss.item(), "lr": lr, "grad_norm": grad_norm,
                   "target_tokens": int((labels != -100).sum()), "tokens_per_s": inputs.numel() / dt,
                   "time_s": state["runtime_s"]}
            metrics_file.write(json.dumps(row) + "\n")
            metrics_file.flush()
            pending.append(row)
            if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.max_steps:
                save_checkpoint(run_dir, step + 1, model, optimizer, scheduler, state, cfg.keep_checkpoints)
    tracker.log_metrics(pending, METRIC_KEYS)
    if last_step < cfg.max_steps:
        return {}

    with atomic_path(run_dir / "adapter") as tmp:
        save_adapter(model, cfg, tmp)
    merged = merged_model(model)
    with atomic_path(run_dir / "merged") as tmp:
        merged.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    rows = [json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip()]
    summary = {"run_name": run_name, "task": cfg.task, "task_data": task.name, "interface": kind, "base": cfg.base,
               "steps": cfg.max_steps, "first_step_loss": rows[0]["loss"], "last_step_loss": rows[-1]["loss"],
               "final_train_loss": float(np.mean([r["loss"] for r in rows[-5:]])), "runtime_s": state["runtime_s"],
               "peak_memory_mb": peak_memory_mb(device), "trainable_parameters": params["trainable_parameters"]}
    if val is not None:
        from pit.side_effects import side_effects

        effects = side_effects(load_model(cfg.base).to(device), merged, val, cfg.side_effect_seq_len,
                               cfg.side_effect_windows)
        write_json(run_dir / "side_effects.json", {**effects, "val_data": cfg.val_data})
        tracker.log_metrics([{"step": cfg.max_steps, **effects}], SIDE_EFFECT_KEYS)
        tracker.log_artifact(run_dir / "side_effects.json")
    write_json(run_dir / "summary.json", summary)
    tracker.log_metrics([{"step": cfg.max_steps, **summary}], ("final_train_loss", "runtime_s", "peak_memory_mb"))
    for name in ("summary.json", "run.json", "metrics.jsonl"):
        tracker.log_artifact(run_dir / name)
    tracker.finish()
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    return summary


# ---- CLI ---------------------------------------------------------------------------------------
def cmd_train(args: argparse.Namespace) -> int:
    retain_freed_memory()  # pit/allocator.py (PIT_MALLOC=system opts out)
    spec = json.loads(Path(args.spec_file).read_text()) if args.spec_file else json.loads(args.spec)
    if args.threads is not None:
        spec["threads"] = args.threads
    cfg = LoraRunConfig.from_dict(spec)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = train_lora(cfg, args.out)
    if summary:
        print(json.dumps({k: summary[k] for k in ("first_step_loss", "final_train_loss", "runtime_s")}))
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    merged = merge_adapter(args.base, args.adapter)
    with atomic_path(Path(args.out)) as tmp:
        merged.save_pretrained(tmp, safe_serialization=True)
        try:
            AutoTokenizer.from_pretrained(args.base).save_pretrained(tmp)
        except (OSError, ValueError):
            log.warning("no tokenizer in %s; the merged model is saved without one", args.base)
    print(f"merged {args.adapter} into {args.base} -> {args.out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("lora", help="LoRA post-training of a pretrained checkpoint (peft); merge adapters",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmds = p.add_subparsers(dest="lora_command", required=True)
    t = cmds.add_parser("train", help="one LoRA run (resumes from the run folder's latest checkpoint)")
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--spec", help="the run config as a JSON object (the keys of LoraRunConfig)")
    src.add_argument("--spec-file", help="the run config as a JSON file")
    t.add_argument("--out", required=True, help="run folder")
    t.add_argument("--threads", type=int, default=None, help="CPU threads (overrides the spec)")
    t.set_defaults(func=cmd_train)
    m = cmds.add_parser("merge", help="merge a saved adapter into the base it was trained on")
    m.add_argument("--base", required=True, help="base checkpoint folder")
    m.add_argument("--adapter", required=True, help="adapter folder written by `pit lora train`")
    m.add_argument("--out", required=True, help="merged checkpoint folder to write")
    m.set_defaults(func=cmd_merge)

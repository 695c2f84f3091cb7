"""Run arguments as dataclasses, one docstring per field (litgpt's `args.py`). The keys of the workflow
config's `pretrain.train` and `posttrain.lora` sections are these fields; `from_dict` rejects unknown and
missing keys, and every value is checked when the object is made, before any work."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

from pit.core.interfaces import InterfaceConfig
from pit.errors import PitError, config_from_dict

PRECISIONS = ("auto", "fp32", "bf16")


@dataclass(kw_only=True)
class RunArgs:
    """What every training run shares (pretraining and LoRA): the optimizer, the schedule, the runtime, the
    trainer checkpoints and the MLflow identity."""

    max_steps: int = 100
    """Optimizer steps of the run."""
    seq_len: int = 256
    """Tokens per training window (pretraining) or per example, prompt + target (LoRA)."""
    lr: float = 3e-3
    """Peak learning rate, reached after `warmup_steps` (linear warmup, then cosine decay to `min_lr`)."""
    min_lr: float = 3e-4
    """Learning rate at `max_steps`; 0 <= min_lr <= lr."""
    warmup_steps: int = 10
    """Steps of linear warmup; 0 <= warmup_steps < max_steps."""
    weight_decay: float = 0.1
    """AdamW decoupled weight decay (on the decayed parameter group only)."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.95
    """AdamW beta2."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value."""
    seed: int = 0
    """Seed of the initialisation and of the data order (step s reads numpy.random.default_rng([seed, s]))."""
    precision: str = "auto"
    """auto (bf16 autocast on CUDA, FP32 on CPU) | fp32 | bf16. PIT's T/L work stays FP32 in any case."""
    device: str = "auto"
    """auto (CUDA when available) | cpu | cuda."""
    threads: int | None = None
    """CPU threads (None: torch's default); restored when the run returns."""
    checkpoint_every: int = 0
    """Steps between trainer checkpoints (0: none; a finished run keeps only its final outputs)."""
    keep_checkpoints: int = 2
    """Newest trainer checkpoints kept."""
    stop_after_steps: int | None = None
    """End the process after this step (resume tests, time-boxed jobs); the checkpoints allow a resume."""
    run_name: str | None = None
    """MLflow run name (default: the run folder's name)."""
    tags: dict = field(default_factory=dict)
    """Extra MLflow tags."""
    mlflow: dict = field(default_factory=dict)
    """{tracking_uri, experiment, enabled} (docs/reproducibility.md)."""

    label = "run config"  # the prefix of every error message about these arguments (class attributes, not fields)
    fingerprint_excludes = ("threads", "stop_after_steps", "run_name", "tags", "mlflow")  # not the trajectory

    def checks(self) -> list[tuple[bool, str]]:
        """(condition, message) pairs; each message names the bad value and what was expected."""
        return [
            (
                self.lr > 0 and 0 <= self.min_lr <= self.lr,
                f"lr {self.lr}, min_lr {self.min_lr}; expected 0 <= min_lr <= lr",
            ),
            (
                0 <= self.warmup_steps < self.max_steps,
                f"warmup_steps {self.warmup_steps}; expected 0 <= warmup < max_steps",
            ),
            (self.precision in PRECISIONS, f"precision {self.precision!r}; expected auto, fp32 or bf16"),
        ]

    def __post_init__(self):
        for ok, msg in self.checks():
            if not ok:
                raise PitError(f"{self.label}: {msg}")

    @classmethod
    def from_dict(cls, d: dict):
        return config_from_dict(cls, d, cls.label)

    def fingerprint(self, **extra) -> str:
        """sha256 of the settings that define the trajectory (plus `extra`): which checkpoints belong to a run."""
        d = {k: v for k, v in dataclasses.asdict(self).items() if k not in self.fingerprint_excludes}
        return hashlib.sha256(json.dumps({**d, **extra}, sort_keys=True).encode()).hexdigest()


@dataclass(kw_only=True)
class PretrainArgs(RunArgs):
    """One pretraining run (`pit train`): teacher or scratch mode; PIT, TT or untied."""

    mode: str
    """scratch | teacher."""
    model: str
    """Scratch mode: a scratch-family or stand-in name (pit/models/configs.py). Teacher mode: a hub id or folder."""
    train_data: str
    """Training token file (.bin with its sidecar)."""
    val_data: str
    """Validation token file, tokenized with the same tokenizer."""
    tokenizer: str
    """Tokenizer folder, copied into the final checkpoint."""
    interface: dict = field(default_factory=dict)
    """The token interface (pit.core.interfaces.InterfaceConfig as a dict)."""
    global_batch_tokens: int = 4096
    """Tokens per optimizer step over all ranks; a multiple of micro_batch_size x seq_len x world size."""
    micro_batch_size: int = 8
    """Windows per forward/backward pass (gradient accumulation makes up the global batch)."""
    transform_lr_scale: float = 1.0
    """Learning-rate multiplier for PIT's L (beyond the paper; 1 = off)."""
    adam_eps: float = 1e-8
    """AdamW epsilon."""
    compile: bool = False
    """Wrap the loss module in torch.compile."""
    log_every: int = 1
    """Steps between MLflow metric uploads (metrics.jsonl gets every step)."""
    interface_every: int = 1
    """Steps between Delta_TI measurements."""
    consistency_every: int = 0
    """Steps between the Table 2 metrics (raw/polar anchors); 0 = only at the end."""
    eval_batches: int = 8
    """Validation windows per evaluation = eval_batches x micro_batch_size."""
    final_loss_window: int = 10
    """The final training loss is the mean loss of the last N steps."""
    spike_factor: float = 3.0
    """A loss above spike_factor x its running mean is a spike."""
    on_spike: str = "log"
    """log | skip (skip the update) | stop."""
    on_nonfinite: str = "skip"
    """skip | stop."""

    label = "train config"
    fingerprint_excludes = RunArgs.fingerprint_excludes + ("log_every", "compile")

    def checks(self) -> list[tuple[bool, str]]:
        return [
            (self.mode in ("scratch", "teacher"), f"mode {self.mode!r}; expected 'scratch' or 'teacher'"),
            (self.seq_len > 0, f"seq_len {self.seq_len}; expected > 0"),
            (self.micro_batch_size > 0, f"micro_batch_size {self.micro_batch_size}; expected > 0"),
            (self.global_batch_tokens > 0, f"global_batch_tokens {self.global_batch_tokens}; expected > 0"),
            (self.max_steps > 0, f"max_steps {self.max_steps}; expected > 0"),
            (self.transform_lr_scale > 0, f"transform_lr_scale {self.transform_lr_scale}; expected > 0"),
            *super().checks(),
            (self.on_spike in ("log", "skip", "stop"), f"on_spike {self.on_spike!r}; expected log, skip or stop"),
            (self.on_nonfinite in ("skip", "stop"), f"on_nonfinite {self.on_nonfinite!r}; expected skip or stop"),
        ]

    def __post_init__(self):
        super().__post_init__()
        InterfaceConfig.from_dict(self.interface)

    def accumulation(self, world_size: int) -> int:
        """Micro-batches per optimizer step on each rank; the global batch must divide evenly."""
        per_micro = self.micro_batch_size * self.seq_len * world_size
        if self.global_batch_tokens % per_micro:
            raise PitError(
                f"global_batch_tokens {self.global_batch_tokens} is not a multiple of micro_batch_size x "
                f"seq_len x world_size = {self.micro_batch_size} x {self.seq_len} x {world_size} = {per_micro}"
            )
        return self.global_batch_tokens // per_micro


DEFAULT_LORA_TARGETS = {
    "pit_scratch": ["q_proj", "k_proj", "v_proj", "o_proj"],  # attention of the parallel block
    "pit_gpt2": ["attn.c_attn", "attn.c_proj"],
}  # GPT-2 attention (Conv1D)


@dataclass(kw_only=True)
class LoraArgs(RunArgs):
    """One LoRA run (`pit lora train`, paper Section 5.6): the same config for every method at a scale."""

    base: str
    """Checkpoint folder of a pretrained run (its final/), with its tokenizer."""
    task: str
    """Training task: mbpp | gsm8k."""
    source: str = "offline"
    """offline | hub | a JSON/JSONL file of records."""
    limit: int | None = None
    """Use only the first N training records."""
    rank: int = 8
    """LoRA rank r."""
    alpha: float = 16.0
    """LoRA alpha (the update is scaled by alpha / r)."""
    dropout: float = 0.05
    """LoRA dropout."""
    targets: dict = field(default_factory=lambda: dict(DEFAULT_LORA_TARGETS))
    """model_type -> names of the modules that get adapters."""
    train_interface: bool = False
    """Also train the interface (PIT: L, and Z if trainable_z, retracted after every step; TT its table)."""
    batch_size: int = 8
    """Examples per step."""
    lr: float = 2e-4
    min_lr: float = 2e-5
    weight_decay: float = 0.0
    beta2: float = 0.999
    val_data: str | None = None
    """Held-out token file for the side effects (None: no side effects measured)."""
    side_effect_windows: int = 16
    """Held-out windows the side effects are measured on."""
    side_effect_seq_len: int = 128
    """Length of those windows."""

    label = "lora config"
    fingerprint_excludes = RunArgs.fingerprint_excludes + (
        "checkpoint_every",
        "keep_checkpoints",
        "val_data",
        "side_effect_windows",
        "side_effect_seq_len",
        "base",
    )

    def checks(self) -> list[tuple[bool, str]]:
        from pit.evaluation.tasks import SPECS

        trainable = sorted(k for k, v in SPECS.items() if v.target is not None)
        return [
            (self.task in trainable, f"task {self.task!r}; expected one of {trainable}"),
            (self.rank > 0 and self.alpha > 0, f"rank {self.rank}, alpha {self.alpha}; expected > 0"),
            (0 <= self.dropout < 1, f"dropout {self.dropout}; expected 0 <= dropout < 1"),
            (
                self.max_steps > 0 and self.batch_size > 0 and self.seq_len > 1,
                f"max_steps {self.max_steps}, batch_size {self.batch_size}, seq_len {self.seq_len}; "
                "expected > 0, > 0, > 1",
            ),
            *super().checks(),
            (
                isinstance(self.targets, dict) and all(isinstance(v, list) and v for v in self.targets.values()),
                f"targets {self.targets!r}; expected a mapping model_type -> non-empty list of module names",
            ),
        ]

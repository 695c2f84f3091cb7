"""What one job of a profile costs (docs/plan.md): the device kinds a plan can assume, and per model the
parameters, FLOPs, memory per device and disk, from the model code itself (built on the meta device, as `pit arch`
counts Table 3; the FLOPs are `pit bench`'s `flops_per_token`). `pit.pipeline.plan` puts the jobs together.

The formulas (T the window, L layers, d width, V vocabulary, d_attn = heads x head width, N the non-embedding
parameters, P all parameters, P_t the trained ones, b x T the tokens of one micro-batch):

- training FLOPs = tokens x (6 N + (6 | 4) V d + 12 L d_attn T (+ 12 d^2 PIT)) (PaLM, App. B; the head's GEMM
  counted as 6 V d where its table is trained and 4 V d where it is frozen, PIT's Z); forward-only work (validation,
  diagnosis, side effects, generation) a third of it per token; LoRA two thirds (forward and input gradients
  through frozen weights);
- seconds = FLOPs / (devices x peak x MFU) + fixed costs (`Device.start_s`, loading and saving at `DISK_BYTES_S`,
  compiling `COMPILE_S`, the float64 interface metrics at `Device.fp64`);
- memory per device = 4 P (FP32 weights) + 4 P_t (gradients) + 8 P_t (AdamW's two moments; SGD none) + 2 P (the
  bf16 copies autocast keeps, CUDA) + ACT_BYTES x b T L d (activations, bf16; twice that in FP32) + the loss's
  logits chunk, chunk_rows(b T) x V x LOGIT_BYTES (pit/core/loss.py);
- disk = 4 bytes per stored value (safetensors FP32; PIT stores Z and L), trainer checkpoints (weights + AdamW
  state) x keep_checkpoints while a run is going.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pit.errors import PitError


@dataclass(frozen=True)
class Device:
    """A device kind a plan assumes, every number with where it was measured (benchmarks/RESULTS.md)."""

    kind: str
    peak: float  # FLOP/s of one device (GPU: dense BF16) or one thread (cpu: FP32 GEMM)
    mfu_eager: float  # model FLOP/s over `peak` of an eager training step
    mfu_compiled: float  # ... of a compiled one (torch.compile, `compile: true`)
    fp64: float  # float64 FLOP/s of one device or thread (the interface metrics)
    memory: float  # bytes of one device (cpu: the reference machine's RAM)
    start_s: float  # a `pit` process before its model: imports, MLflow run, CUDA
    layer_step_s: float  # a greedy decoding step's fixed cost per layer (launch- or Python-bound)
    source: str  # where the numbers come from

    @property
    def gpu(self) -> bool:
        return self.kind != "cpu"

    def mfu(self, compiled: bool) -> float:
        return self.mfu_compiled if compiled else self.mfu_eager


GIB = 2**30
DEVICES = {
    "h100": Device(
        kind="h100",
        peak=989.4e12,
        mfu_eager=0.241,
        mfu_compiled=0.330,
        fp64=67e12,
        memory=81559 * 2**20,
        start_s=10.0,
        layer_step_s=0.83e-3,
        source="H100 SXM 80GB: peak dense BF16 (pit bench BF16_PEAKS); MFU eager 24.1% (TT, 32 x 1024, RESULTS.md "
        "sec. 16), compiled 33.0% (PIT, loss compiled, sec. 16, before the later speed-ups); decoding 13.2 ms/step "
        "of 16 layers (sec. 16); start ~10 s (docs/study.md)",
    ),
    "h200": Device(
        kind="h200",
        peak=989.4e12,
        mfu_eager=0.270,
        mfu_compiled=0.412,
        fp64=67e12,
        memory=143771 * 2**20,
        start_s=10.0,
        layer_step_s=0.59e-3,
        source="H200 141GB: peak dense BF16 (the H100's); MFU eager 27.0%, compiled 41.2% (TT, 32 x 1024, RESULTS.md "
        "sec. 24); decoding 9.4 ms/step of 16 layers (sec. 17); start ~10 s (docs/study.md)",
    ),
    "cpu": Device(
        kind="cpu",
        peak=99.1e9,
        mfu_eager=0.70,
        mfu_compiled=0.70,
        fp64=49.5e9,
        memory=23 * GIB,
        start_s=8.4,
        layer_step_s=12e-3,
        source="one thread of the reference 2-core AMD EPYC: FP32 GEMM 198.2 GFLOP/s on 2 threads (pit bench, "
        "RESULTS.md sec. 1), float64 half of it; MFU 70%: the paper smoke run's one-step jobs at real shapes reached "
        "66-79% (docs/workflow.md); a `pit train` of 3 steps took 8.4 s, all but 0.2 s start-up (sec. 34); decoding "
        "24 ms per step of 2 blocks (sec. 1)",
    ),
}
COMPILE_S = 60.0  # torch.compile's warm-up per process: 40-92 s measured (RESULTS.md sections 16, 28)
DISK_BYTES_S = 1e9  # reading and writing checkpoints (assumed, a local SSD)
METRIC_VD2 = 55  # the Table 2 metrics, three thin QRs of V x d: ~55 V d^2 float64 FLOP (19.1 s at 32000 x 1024, 117 s
# at 50257 x 2048 on 2 threads, RESULTS.md sec. 13)
POLAR_VD2 = 20  # a teacher's conversion to PIT or polar TT: one thin polar decomposition of E0 (one of those QRs and
# the product Z = Q U); TT from E0 as it is and untied copy the tables
ACT_BYTES = 34  # activation bytes per token, layer and width unit in bf16 with fused attention (Korthikanti et al.
# 2022, "Reducing Activation Recomputation", sbh x 34; measured here: 39, RESULTS.md sec. 24, batch 32 -> 64)
LOGIT_BYTES = 8  # the loss's logits chunk and its gradient per row and vocabulary entry (pit/core/loss.py: 2-8)
CUDA_CONTEXT = 0.5 * GIB  # the CUDA context and the allocator's slack on top of the tensors (assumed)


def device(kind: str) -> Device:
    """The Device of a kind name; an unknown one is a PitError naming the known ones."""
    try:
        return DEVICES[kind]
    except KeyError:
        raise PitError(f"unknown device kind {kind!r}; expected one of {sorted(DEVICES)}") from None


# --- Models on the meta device ----------------------------------------------------------------------------


@functools.cache
def teacher_config(source: str, gguf: bool = False):
    """The transformers config of a teacher without its weights: a folder's config.json, a named spec
    (pit/models/configs.py: a stand-in, Cerebras-GPT by hub id), a GGUF file's or packaged model's header, a hub id's
    config.json; else a PitError."""
    from pit.models import MODELS, TeacherSpec, gpt2_config

    if (Path(source) / "config.json").is_file():
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(source)
    # a name, a hub id, or a folder named after its spec (`pit fixtures teacher --model NAME` writes fixtures/NAME)
    names = (source, Path(source).name)
    named = [s for n, s in MODELS.items() if isinstance(s, TeacherSpec) and (n in names or s.hub_id == source)]
    if named:
        return gpt2_config(named[0])
    if gguf:
        return gguf_teacher_config(source)
    from transformers import AutoConfig

    try:  # a hub id: its config.json (the hub's cache, else a download of a few kB)
        return AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as err:
        raise PitError(
            f"teacher {source!r}: its architecture is not known here (not in pit/models/configs.py, no config.json "
            f"there, and the hub gave none: {str(err).splitlines()[0]}); expected a named teacher, a local folder or "
            "a hub id"
        ) from None


def gguf_teacher_config(source: str):
    """A GGUF teacher's config: a packaged model's file (its parts joined in a temporary folder) or a .gguf path.
    The `gguf` package reads every tokenizer string of the header (~30 s for Gemma-3's 262,144), so the config is
    kept in `gguf_cache()` under the file's sha256 (a packaged model's is its package's)."""
    from transformers import AutoConfig

    from pit.io import sha256_file, write_json
    from pit.models.gguf import PACKAGED

    cached = gguf_cache() / f"{PACKAGED[source].sha256 if source in PACKAGED else sha256_file(source)}.json"
    if cached.is_file():
        values = json.loads(cached.read_text(encoding="utf-8"))
        return AutoConfig.for_model(values.pop("model_type"), **values)
    config = _read_gguf_config(source)
    write_json(cached, config.to_dict())
    return config


def gguf_cache() -> Path:
    """Where GGUF teachers' configs are kept: $XDG_CACHE_HOME (else ~/.cache)/pit-repro/gguf-configs."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "pit-repro", "gguf-configs")


def _read_gguf_config(source: str):
    from pit.io import concatenate_checked
    from pit.models.gguf import PACKAGED, gguf_config, packaged_files

    if source not in PACKAGED:
        return gguf_config(Path(source))
    parts = packaged_files(source)
    if len(parts) == 1:
        return gguf_config(parts[0])
    with tempfile.TemporaryDirectory() as work:
        path = Path(work, parts[0].name.split(".part")[0])
        concatenate_checked(parts, PACKAGED[source].sha256, path, "the GGUF parts", "the package")
        return gguf_config(path)


def interface_model(config, interface: dict):
    """The model `convert_teacher` makes of a source config with this interface, on the meta device."""
    import torch

    from pit.models.any_model import pit_classes, source_config

    config_cls, model_cls = pit_classes(config.model_type.removeprefix("pit_"))
    cfg = source_config(config).to_dict()
    cfg.pop("model_type", None)
    with torch.device("meta"):
        return model_cls(config_cls.from_dict({**cfg, "interface": interface, "tie_word_embeddings": False}))


def named_model(name: str, interface: dict, vocab: int, seq_len: int):
    """A scratch-family model or a stand-in teacher, as `pit train` builds it, on the meta device."""
    from pit.core.interfaces import InterfaceConfig
    from pit.models import build_model

    iface = InterfaceConfig.from_dict(interface)
    return build_model(name, iface, vocab_size=vocab, max_seq_len=max(seq_len, 256), device="meta")


@dataclass(frozen=True)
class ModelCost:
    """The numbers of one model that every job on it uses."""

    params: int  # all parameters (PIT's frozen Z included)
    trained: int  # parameters with a gradient
    stored: int  # bytes of its safetensors (FP32)
    layers: int
    width: int
    vocab: int
    flops_per_token: float  # of a training step at `seq_len` (pit.training.bench.flops_per_token)
    seq_len: int
    model_type: str
    module_widths: dict  # in + out features of every 2-D weight, by module name (LoRA's size)


def model_cost(model, seq_len: int) -> ModelCost:
    """Counts of a model built on the meta device (no weights are allocated)."""
    from pit.models.access import head_table
    from pit.training.bench import flops_per_token

    V, d = head_table(model).shape
    cfg = model.config
    return ModelCost(
        params=sum(p.numel() for p in model.parameters()),
        trained=sum(p.numel() for p in model.parameters() if p.requires_grad),
        stored=sum(t.numel() * t.element_size() for t in model.state_dict().values()),
        layers=cfg.num_hidden_layers,
        width=d,
        vocab=V,
        flops_per_token=flops_per_token(model, seq_len),
        seq_len=seq_len,
        model_type=cfg.model_type,
        module_widths=_module_widths(model),
    )


def _module_widths(model) -> dict:
    """in + out features of every 2-D weight by module name (LoRA's parameters are rank x (in + out) per target)."""
    return {
        name: sum(m.weight.shape)
        for name, m in model.named_modules()
        if getattr(m, "weight", None) is not None and m.weight.dim() == 2
    }


def lora_parameters(cost: ModelCost, targets: list[str], rank: int) -> int:
    """rank x (in + out) summed over the modules LoRA adapts (names equal to a target or ending in '.' + target)."""
    widths = cost.module_widths.items()
    return rank * sum(w for name, w in widths if any(name == t or name.endswith(f".{t}") for t in targets))


def training_memory(cost: ModelCost, micro_tokens: int, optimizer: str, gpu: bool) -> dict:
    """Peak bytes per device of a training step, by part (module docstring); every part is also returned."""
    from pit.core.loss import ROW_ALIGN, chunk_rows

    state = 8 * cost.trained if optimizer == "adamw" else 0
    act = ACT_BYTES * (1 if gpu else 2) * micro_tokens * cost.layers * cost.width
    padded = -(-cost.vocab // ROW_ALIGN) * ROW_ALIGN
    parts = {
        "weights": 4 * cost.params,
        "gradients": 4 * cost.trained,
        "optimizer": state,
        "bf16 copies": 2 * cost.params if gpu else 0,
        "activations": act,
        "logits chunk": min(chunk_rows(micro_tokens), micro_tokens) * padded * LOGIT_BYTES,
        "CUDA context": CUDA_CONTEXT if gpu else 0,
    }
    return {"total": sum(parts.values()), **parts}


def inference_memory(cost: ModelCost, tokens: int, gpu: bool) -> float:
    """Peak bytes of a forward-only job: the FP32 weights, activations of one layer at a time (bf16 or FP32), the
    float64 E and W_out of the interface metrics (diagnosis) and the logits of `tokens` rows."""
    act = ACT_BYTES * (1 if gpu else 2) * tokens * cost.width
    return (
        4 * cost.params + act + 2 * 8 * cost.vocab * cost.width + tokens * cost.vocab * 4 + (CUDA_CONTEXT if gpu else 0)
    )


def checkpoint_bytes(cost: ModelCost, optimizer: str) -> int:
    """A trainer checkpoint: the weights and the optimizer state (AdamW: two FP32 moments per trained parameter)."""
    return cost.stored + (8 * cost.trained if optimizer == "adamw" else 0)


def token_sidecar(path: str) -> dict | None:
    """A token file's sidecar where the data stage made it already (its measured token count and vocabulary)."""
    sidecar = Path(path[: -len(".bin")] + ".json")
    try:
        return json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None

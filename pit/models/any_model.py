"""Any decoder-only `transformers` causal LM with a PIT, TT or untied token interface.

For a source architecture `<type>` of FAMILIES (e.g. `llama`, `qwen2`, `gemma`, `gpt_neox`, `gpt2`) `pit_classes`
makes, once, `Pit<Arch>Config(<Arch>Config)` with model_type `pit_<type>` and `Pit<Arch>(InterfaceCausalLM,
<Arch>ForCausalLM)`: the architecture's own class (its blocks, attention backends, caches, `generate`, gradient
checkpointing, peft) in which only the token interface is swapped, through `set_input_embeddings` /
`set_output_embeddings`, for adapters of one `TokenInterface` registered at `model.interface`. Nothing of the
blocks is re-implemented. `import pit.models` registers every family with the Auto classes (`register_families`),
so a converted checkpoint loads with `AutoModelForCausalLM.from_pretrained` like the project's other model types;
no remote code is ever run (docs/any-model.md).

Architecture quirks, each kept by the architecture's own code around the swapped modules:
* an embedding scale (Gemma: the input is sqrt(d) E[t]): the adapter multiplies by the replaced module's
  `scalar_embed_scale`, so PIT's W_out E = I holds for the table E and the model's input is sqrt(d) E;
* a final-logit soft-cap (Gemma 2/3: c tanh(z / c)) is applied by the architecture's forward after the head;
* the final norm is the architecture's; PIT's `power` init folds its head-side scalar into it (`fold_head_scale_`).

Teacher mode (paper Section 4.1): `load_teacher` loads any family's checkpoint (hub id or folder) in FP32, and
`convert_teacher` keeps the source's blocks and builds the interface from its embedding E0 (and head W0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from pit.core.interfaces import InterfaceConfig, TokenInterface, init_from_teacher_, make_interface
from pit.errors import PitError
from pit.models.base import InterfaceEmbedding, InterfaceHead, InterfaceLMMixin
from pit.models.weights import check_weights
from pit.sources import check_source

QKVO = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class Family:
    """What the project needs to know of one source architecture: the modules LoRA adapts by default (attention,
    as the paper's Table 4) and the config attribute of a final-logit soft-cap (None: logits = h W_out)."""

    lora_targets: tuple[str, ...] = QKVO
    softcap: str | None = None


FAMILIES = {
    "gpt2": Family(("attn.c_attn", "attn.c_proj")),
    "llama": Family(),
    "mistral": Family(),
    "qwen2": Family(),
    "qwen3": Family(),
    "gemma": Family(),
    "gemma2": Family(softcap="final_logit_softcapping"),
    "gemma3_text": Family(softcap="final_logit_softcapping"),
    "gpt_neox": Family(("attention.query_key_value", "attention.dense")),
    "phi3": Family(("self_attn.qkv_proj", "self_attn.o_proj")),
    "olmo": Family(),
    "olmo2": Family(),
}
FINAL_NORMS = ("norm", "final_layer_norm", "ln_f", "final_layernorm")  # the final norm's name in the decoder


class _TanhGELU(torch.autograd.Function):
    """y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's "gelu_new"."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        # transformers' NewGELUActivation op for op (bitwise the same y), in place
        y = torch.pow(x, 3.0).mul_(0.044715).add_(x).mul_(math.sqrt(2.0 / math.pi)).tanh_().add_(1.0)
        return (0.5 * x).mul_(y)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return torch.ops.aten.gelu_backward(grad, x, approximate="tanh")  # dy/dx in one fused kernel


class TanhGELU(nn.Module):
    """GPT-2's activation with the output of `NewGELUActivation` and a fused backward pass: autograd through
    its eight elementwise ops keeps six tensors and runs a dozen kernels per layer, this keeps x and runs one."""

    def forward(self, x):
        return _TanhGELU.apply(x)


def embedding_scale(module: nn.Module) -> float:
    """The factor an input-embedding module applies to its rows: Gemma's `scalar_embed_scale` (sqrt(d)), else 1.
    Any other module than `nn.Embedding` is refused: its forward might do more than a lookup."""
    if hasattr(module, "scalar_embed_scale"):
        return float(module.scalar_embed_scale)
    if type(module) is not nn.Embedding and not isinstance(module, InterfaceEmbedding):
        raise PitError(f"input embedding is a {type(module).__name__}; expected nn.Embedding (or Gemma's scaled one)")
    return 1.0


class InterfaceCausalLM(InterfaceLMMixin):
    """Mixed in before a `transformers` causal LM class: after the architecture builds itself, its input embedding
    and output head become adapters of one token interface (`model.interface`); nothing is tied by transformers."""

    _tied_weights_keys = None
    source_type = ""  # the source architecture's model_type

    def __init__(self, config):
        super().__init__(config)
        old = self.get_input_embeddings()
        self.interface = make_interface(
            InterfaceConfig.from_dict(config.interface), config.vocab_size, old.weight.shape[1]
        )
        self.set_input_embeddings(InterfaceEmbedding(self.interface, scale=embedding_scale(old)))
        self.set_output_embeddings(InterfaceHead(self.interface))
        if getattr(config, "activation_function", None) == "gelu_new":  # GPT-2: the fused-backward GELU
            for block in self.base_model.h:
                block.mlp.act = TanhGELU()
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module):
        if isinstance(module, TokenInterface):
            module.reset_parameters(self.config.init_seed)
        elif not isinstance(module, (InterfaceEmbedding, InterfaceHead)):
            super()._init_weights(module)


_CLASSES: dict[str, tuple[type, type]] = {}


def family(model_type: str) -> Family:
    """The Family of a source model_type (or of its `pit_` type); unknown types are a PitError listing FAMILIES."""
    source = model_type.removeprefix("pit_")
    if source not in FAMILIES:
        raise PitError(
            f"model_type {model_type!r} is not a supported causal LM; expected one of {sorted(FAMILIES)} "
            "(docs/any-model.md says what is supported and why)"
        )
    return FAMILIES[source]


def pit_classes(model_type: str) -> tuple[type, type]:
    """(config class, model class) of `pit_<model_type>`, made once from transformers' own classes."""
    family(model_type)
    if model_type not in _CLASSES:
        from transformers import MODEL_FOR_CAUSAL_LM_MAPPING
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        base_config = CONFIG_MAPPING[model_type]
        base_model = MODEL_FOR_CAUSAL_LM_MAPPING[base_config]
        config_cls = type(
            f"Pit{base_config.__name__}",
            (base_config,),
            {
                "__module__": __name__,
                "__annotations__": {"interface": dict | None, "init_seed": int, "tie_word_embeddings": bool},
                "model_type": f"pit_{model_type}",
                "interface": None,  # InterfaceConfig as a dict
                "init_seed": 0,
                "tie_word_embeddings": False,  # the interface does its own tying
            },
        )
        model_cls = type(
            f"Pit{base_model.__name__}",
            (InterfaceCausalLM, base_model),
            {"__module__": __name__, "config_class": config_cls, "source_type": model_type},
        )
        globals()[config_cls.__name__], globals()[model_cls.__name__] = config_cls, model_cls  # picklable by name
        _CLASSES[model_type] = config_cls, model_cls
    return _CLASSES[model_type]


def register_families() -> None:
    """Register every `pit_<type>` of FAMILIES with AutoConfig and AutoModelForCausalLM."""
    for model_type in FAMILIES:
        config_cls, model_cls = pit_classes(model_type)
        AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
        AutoModelForCausalLM.register(config_cls, model_cls, exist_ok=True)


def load_teacher(name_or_path: str, **kwargs) -> PreTrainedModel:
    """Load a causal LM of a supported family (hub id or local folder, told apart by pit.sources.check_source: a
    missing folder or an unreachable hub is one line, before any retry) in FP32, without remote code. A local
    folder's weights must be exactly those its config.json implies (pit.models.weights.check_weights)."""
    source = check_source(name_or_path, "teacher", kwargs.get("revision"))
    path = Path(name_or_path).expanduser()
    if source.local and not path.is_dir():
        raise PitError(f"cannot load teacher {name_or_path!r}: a file; expected a model folder or a hub id")
    if source.local and any(path.glob("*.safetensors")):
        check_weights(name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            name_or_path, trust_remote_code=False, dtype=torch.float32, **source.load_kwargs(), **kwargs
        )
    except (OSError, ValueError, KeyError) as err:
        raise PitError(f"cannot load teacher {name_or_path!r}: {err}") from None
    model_type = model.config.model_type
    if hasattr(model, "interface") or model_type not in FAMILIES:
        raise PitError(
            f"teacher {name_or_path!r} is a {type(model).__name__} (model_type {model_type!r}); expected a plain "
            f"causal LM of a supported family, one of {sorted(FAMILIES)}"
        )
    return model.eval()


def source_config(config, **changes):
    """The plain source architecture's config of a `pit_<type>` config (no interface fields), with `changes`."""
    model_type = config.model_type.removeprefix("pit_")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cfg = config.to_dict()
    for key in ("model_type", "architectures", "transformers_version", "interface", "init_seed", "auto_map"):
        cfg.pop(key, None)
    return CONFIG_MAPPING[model_type].from_dict({**cfg, **changes})


def final_norm(model) -> nn.Module:
    """The decoder's final norm (Llama `norm`, GPT-NeoX `final_layer_norm`, GPT-2 `ln_f`, Phi `final_layernorm`)."""
    decoder = model.base_model
    for name in FINAL_NORMS:
        if isinstance(getattr(decoder, name, None), nn.Module):
            return getattr(decoder, name)
    raise PitError(f"{type(model).__name__} has no final norm named one of {FINAL_NORMS}")


@torch.no_grad()
def fold_head_scale_(model, beta: float) -> None:
    """Make the final norm's output beta times what it was: logits are linear in it (logits = norm(x) W_out), so this
    equals multiplying W_out by beta. Gain g and bias b become beta g and beta b; a norm whose gain is applied as
    (1 + w) (Gemma) gets w' = beta (1 + w) - 1. The offset is read off the norm (a zero gain gives zero output or
    not), and the fold is checked on random inputs: a norm without a gain cannot take it (PitError)."""
    norm = final_norm(model)
    weight, bias = getattr(norm, "weight", None), getattr(norm, "bias", None)
    if not isinstance(weight, nn.Parameter):
        raise PitError(f"the final norm {type(norm).__name__} has no gain to fold beta into; use another t_init")
    x = torch.randn(4, weight.shape[-1], generator=torch.Generator().manual_seed(0)).to(weight)
    kept = [p.detach().clone() for p in (weight, bias) if p is not None]
    before = norm(x)
    for p in (weight, bias):
        if p is not None:
            p.zero_()
    offset = 0.0 if norm(x).abs().max() == 0 else 1.0
    weight.copy_(beta * (kept[0] + offset) - offset)
    if bias is not None:
        bias.copy_(beta * kept[1])
    if not torch.allclose(norm(x), beta * before, rtol=1e-4, atol=1e-5):
        for p, k in zip((weight, bias), kept):
            p.copy_(k)
        raise PitError(f"the final norm {type(norm).__name__} is not linear in its gain; use another t_init")


def _named(model, tensor: torch.Tensor) -> list[str]:
    return [n for n, p in model.named_parameters(remove_duplicate=False) if p is tensor]


def _source_tables(source) -> tuple[torch.Tensor, torch.Tensor, set[str]]:
    """(E0, W0, their parameter names) of a plain source: the input embedding and the head (V x d, no bias)."""
    emb, head = source.get_input_embeddings(), source.get_output_embeddings()
    embedding_scale(emb)
    if not isinstance(head, nn.Linear) or head.bias is not None:
        raise PitError(f"the output head is a {type(head).__name__} with a bias; expected a bias-free nn.Linear head")
    names = set(_named(source, emb.weight)) | set(_named(source, head.weight))
    return emb.weight.detach().float(), head.weight.detach().float(), names


def _fill_buffers(model, reference) -> None:
    """Non-persistent buffers (rotary frequencies) are in no state dict: a model built on the meta device takes
    them from `reference`, the model it was made from. Any tensor left on the meta device is an error."""
    own = dict(reference.named_buffers())
    for name, buf in list(model.named_buffers()):
        if buf.is_meta and name in own:
            owner, _, leaf = name.rpartition(".")
            model.get_submodule(owner)._buffers[leaf] = own[name].detach().clone()
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise PitError(f"{type(model).__name__}: no values for {left[:4]} after conversion; the layout is unknown")


@torch.no_grad()
def convert_teacher(teacher: PreTrainedModel, interface: InterfaceConfig) -> PreTrainedModel:
    """Teacher mode for any family: copies of the source's blocks in the architecture's own class, the interface
    built from its input embedding E0 and head W0 (equal when tied); the result shares no tensor with `teacher`.

    PIT: Z = U of E0 = U H (thin polar) and T from `t_init` (pit.core.interfaces.teacher_factor), except `head`,
    whose purpose is to keep the head: Z and T from W0 = U_h H_h (T = H_h), so W_out = W0^T exactly (for a tied
    source the same thing). `power` folds its head-side scalar into the final norm (`fold_head_scale_`).
    TT: W = E0 (an untied source's head is dropped), or its polar factor U with `tt_init` polar. Untied: E = E0,
    head = W0 (the source exactly)."""
    if isinstance(teacher, InterfaceCausalLM) or hasattr(teacher, "interface"):
        raise PitError("model already has a token interface; convert the original checkpoint instead")
    config_cls, model_cls = pit_classes(teacher.config.model_type)
    E0, W0, table_names = _source_tables(teacher)
    cfg = source_config(teacher.config).to_dict()
    cfg.pop("model_type", None)
    config = config_cls.from_dict({**cfg, "interface": interface.to_dict(), "tie_word_embeddings": False})
    with torch.device("meta"):
        model = model_cls(config)
    state = {k: v.detach().clone() for k, v in teacher.state_dict().items() if k not in table_names}
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [k for k in missing if not k.startswith("interface.")]
    if missing or unexpected:
        raise PitError(
            f"{type(teacher).__name__} does not match {model_cls.__name__}: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    model.interface.to_empty(device=E0.device)
    keep_head = interface.kind == "pit" and interface.t_init == "head"
    beta = init_from_teacher_(
        model.interface, W0 if keep_head else E0, interface.t_init, interface.t_power, interface.tt_init
    )
    if interface.kind == "untied":
        model.interface.head.copy_(W0)
    _fill_buffers(model, teacher)
    if beta != 1.0:
        fold_head_scale_(model, beta)
    return model.eval()

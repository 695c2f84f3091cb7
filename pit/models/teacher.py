"""The teacher family: Cerebras-GPT (GPT-2 architecture) through `transformers`, with any interface.

`PitGPT2LMHeadModel` is `transformers.GPT2LMHeadModel` whose tied `wte`/`lm_head` pair is replaced
by a `TokenInterface` registered once at `model.interface`; `transformer.wte` and `lm_head` become
thin adapters that route to it, so the GPT-2 forward, `generate` and `peft` work unchanged.

Teacher mode (paper Section 4.1): `load_teacher` loads a GPT-2-architecture checkpoint with
`AutoModelForCausalLM.from_pretrained` (hub id or local folder; never remote code) and
`convert_teacher` rebuilds it, on copies of its weights, with the requested interface initialised from its
embedding E0 (`t_init`: pit.core.interfaces.teacher_factor; `power` also folds a scalar into the final LayerNorm).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn as nn
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

from pit.core.interfaces import InterfaceConfig, TokenInterface, init_from_teacher_, make_interface
from pit.errors import PitError
from pit.models.base import InterfaceEmbedding, InterfaceHead, InterfaceLMMixin
from pit.models.weights import check_weights


class PitGPT2Config(GPT2Config):
    model_type = "pit_gpt2"

    interface: dict | None = None  # InterfaceConfig as a dict
    init_seed: int = 0
    tie_word_embeddings: bool = False  # the interface does its own tying


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


class PitGPT2LMHeadModel(InterfaceLMMixin, GPT2LMHeadModel):
    config_class = PitGPT2Config
    _tied_weights_keys = None

    def __init__(self, config: PitGPT2Config):
        super().__init__(config)
        self.interface = make_interface(InterfaceConfig.from_dict(config.interface), config.vocab_size, config.n_embd)
        self.transformer.wte = InterfaceEmbedding(self.interface)
        self.lm_head = InterfaceHead(self.interface)
        if config.activation_function == "gelu_new":
            for block in self.transformer.h:
                block.mlp.act = TanhGELU()
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module):
        if isinstance(module, TokenInterface):
            module.reset_parameters(self.config.init_seed)
        elif not isinstance(module, (InterfaceEmbedding, InterfaceHead)):
            super()._init_weights(module)

    def get_input_embeddings(self):
        return self.transformer.wte

    def get_output_embeddings(self):
        return self.lm_head


def gpt2_config(spec, vocab_size: int | None = None, **overrides) -> GPT2Config:
    """A GPT-2 config for a `TeacherSpec` (a fresh stand-in teacher; real teachers bring their own).
    Tied embeddings and no dropout, as in Cerebras-GPT."""
    values = dict(
        vocab_size=vocab_size or spec.vocab_size,
        n_positions=spec.n_positions,
        n_embd=spec.n_embd,
        n_layer=spec.n_layer,
        n_head=spec.n_head,
        bos_token_id=50256,
        eos_token_id=50256,
        tie_word_embeddings=True,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2Config(**{**values, **overrides})


# what save_pretrained writes (fnmatch patterns: a large model is sharded)
TEACHER_FILES = ("config.json", "generation_config.json", "model*.safetensors", "model.safetensors.index.json")


def write_random_teacher(spec, out: str | Path, seed: int = 0) -> GPT2LMHeadModel:
    """A teacher folder at a published teacher's real shape with seeded random weights (GPT-2 init, std 0.02), saved
    as `save_pretrained` does for a hub checkpoint: the offline stand-in of a hub teacher (config/paper-smoke.yaml),
    loaded by `load_teacher` like any folder. Cerebras-GPT's config.json: GELU MLP of width 4d, LayerNorm eps 1e-5,
    tied embeddings, no dropout, GPT-2 BOS/EOS 50256."""
    from pit.io import atomic_path

    config = gpt2_config(spec, activation_function="gelu", n_inner=4 * spec.n_embd, layer_norm_epsilon=1e-5)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config).eval()
    with atomic_path(out) as tmp:
        model.save_pretrained(tmp)
    return model


def load_teacher(name_or_path: str, **kwargs) -> GPT2LMHeadModel:
    """Load a GPT-2-architecture checkpoint (hub id or local folder) in FP32, without remote code. A local folder's
    weights must be exactly those its config.json implies (pit.models.weights.check_weights)."""
    if any(Path(name_or_path).glob("*.safetensors")):
        check_weights(name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            name_or_path, trust_remote_code=False, dtype=torch.float32, **kwargs
        )
    except OSError as err:
        raise PitError(f"cannot load teacher {name_or_path!r}: {err}") from None
    if not isinstance(model, GPT2LMHeadModel):
        raise PitError(
            f"teacher {name_or_path!r} is a {type(model).__name__}; expected a GPT-2-architecture "
            "causal LM (GPT2LMHeadModel, as Cerebras-GPT)"
        )
    return model.eval()


@torch.no_grad()
def fold_head_scale_(model: PitGPT2LMHeadModel, beta: float) -> None:
    """Multiply the final LayerNorm's gain and bias by beta. The logits are linear in ln_f's output
    (logits = ln_f(x) W_out), so this equals multiplying W_out by beta: exact up to FP32 rounding."""
    model.transformer.ln_f.weight.mul_(beta)
    model.transformer.ln_f.bias.mul_(beta)


def convert_teacher(teacher: GPT2LMHeadModel, interface: InterfaceConfig) -> PitGPT2LMHeadModel:
    """Teacher mode: copies of the teacher's blocks, the interface built from its embedding E0. The result
    shares no tensor with `teacher` (changing one never changes the other). PIT's `power` init folds its
    head-side scalar beta into the final LayerNorm (`fold_head_scale_`); the blocks stay as they are."""
    if isinstance(teacher, PitGPT2LMHeadModel):
        raise PitError("model already has a token interface; convert the original teacher checkpoint instead")
    cfg = teacher.config.to_dict()
    for key in ("model_type", "architectures", "transformers_version", "tie_word_embeddings"):
        cfg.pop(key, None)
    config = PitGPT2Config(**cfg, interface=interface.to_dict(), tie_word_embeddings=False)
    with torch.device("meta"):
        model = PitGPT2LMHeadModel(config)
    state = {
        k: v.detach().clone()
        for k, v in teacher.state_dict().items()
        if not k.startswith(("lm_head.", "transformer.wte."))
    }
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    model.interface.to_empty(device="cpu")
    E0 = teacher.get_input_embeddings().weight.detach().float()
    beta = init_from_teacher_(model.interface, E0, interface.t_init, interface.t_power)
    missing = [k for k in missing if not k.startswith("interface.")]
    if missing or unexpected:
        raise PitError(f"teacher does not match the GPT-2 layout: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if beta != 1.0:
        fold_head_scale_(model, beta)
    return model.eval()

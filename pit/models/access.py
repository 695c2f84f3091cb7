"""The one place that knows how to reach the token interface, the head, the final norm and the residual
states of any model the project handles: the scratch family (`PitForCausalLM`), any supported `transformers`
causal LM with an interface (`pit.models.any_model.InterfaceCausalLM`: `PitGPT2LMHeadModel`, `PitLlamaForCausalLM`,
...; all hold `model.interface`) and plain tied or untied `transformers` models of those families (the sources
before conversion, exported models). Everything else asks here instead of branching on the model's class.
"""

from __future__ import annotations

import copy

import torch

from pit.core import metrics
from pit.models.any_model import FAMILIES
from pit.models.any_model import final_norm as decoder_final_norm
from pit.models.scratch import PitForCausalLM


def interface_of(model):
    """The model's token interface (a `pit.core.interfaces.TokenInterface`), or None for a plain HF model."""
    return getattr(model, "interface", None)


def interface_kind(model) -> str:
    """The interface's kind; a plain HF model is 'tt' when wte and lm_head share their storage."""
    if hasattr(model, "interface"):
        return model.interface.kind
    tied = model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    return "tt" if tied else "untied"


def interface_matrices(model, float64: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(E, W_out), E of shape (V, d) and W_out of shape (d, V).

    Default: as trained (an interface's FP32 materialisation, or HF's wte / lm_head). `float64=True`: an
    interface is evaluated in float64 from its stored parameters (PIT: E = Z T^{-1}, W_out = T Z^T with float64
    solves), so diagnostics see the interface the checkpoint defines; plain HF models are upcast."""
    if hasattr(model, "interface"):
        iface = copy.deepcopy(model.interface).double() if float64 else model.interface
        E, W_out = iface.input_embedding(), iface.output_projection()
        return (E.detach(), W_out.detach()) if float64 else (E, W_out)
    E, W_out = model.get_input_embeddings().weight, model.get_output_embeddings().weight.T
    return (E.detach().double(), W_out.detach().double()) if float64 else (E, W_out)


def head_bias(model) -> torch.Tensor | None:
    """The head's logit bias b (V,; logits = h W_out + b), or None: the project's interfaces have none, and neither
    have the heads conversion accepts; a plain `transformers` model's lm_head may (an nn.Linear with a bias)."""
    if hasattr(model, "interface"):
        return None
    head = model.get_output_embeddings()
    return getattr(head, "bias", None)


def head_table(model) -> torch.Tensor:
    """The V x d table of the head (PIT Z, TT E, untied W_out^T, a plain GPT-2's lm_head)."""
    iface = interface_of(model)
    if iface is None:
        return model.get_output_embeddings().weight
    return getattr(iface, {"pit": "Z", "tt": "weight", "untied": "head"}[iface.kind])


def _unwrapped(model):
    """The transformers model under a peft wrapper (whose `base_model` is peft's, not the decoder)."""
    get_base = getattr(type(model), "get_base_model", None)
    return model.get_base_model() if get_base is not None else model


def logit_softcap(model) -> float | None:
    """c of a final-logit soft-cap (logits = c tanh(z / c), Gemma 2/3), or None: logits = g M^T as they are."""
    model = _unwrapped(model)
    if isinstance(model, PitForCausalLM):
        return None
    source = FAMILIES.get(model.config.model_type.removeprefix("pit_"))
    return getattr(model.config, source.softcap, None) if source and source.softcap else None


def head_input(model, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, M) with logits = g M^T before any soft-cap (`logit_softcap`): the final hidden states h (final norm
    applied) through the interface's `head_input` (PIT: g = h T, M = Z), or h and the head table of a plain model."""
    hf = _unwrapped(model)
    if isinstance(hf, PitForCausalLM):
        h, _ = hf.hidden_states(inputs)
    else:  # any transformers causal LM: its decoder (transformer, model, gpt_neox, ...) ends with the final norm
        h = hf.base_model(inputs, use_cache=False).last_hidden_state
    if hasattr(hf, "interface"):
        return hf.interface.head_input(h)
    return h, hf.get_output_embeddings().weight


def final_norm(model) -> torch.nn.Module:
    model = _unwrapped(model)
    return model.norm if isinstance(model, PitForCausalLM) else decoder_final_norm(model)


def residual_states(model, ids: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The last position's residual state after the embedding and after each block, final norm
    applied (L + 1 tensors of shape (B, d)), and the model's own logits there (B, V).

    Scratch models return un-normed states; transformers models return norm(h) as their last hidden state
    (and the un-normed stream before it), so the final norm is applied to all but that one."""
    norm = final_norm(model)
    if isinstance(model, PitForCausalLM):
        h, states = model.hidden_states(ids, output_hidden_states=True)
        return [norm(s[:, -1]) for s in states], model.interface.logits(h[:, -1])
    out = model(ids, output_hidden_states=True, use_cache=False, logits_to_keep=1)  # the head at the last position
    *inner, last = out.hidden_states
    return [norm(s[:, -1]) for s in inner] + [last[:, -1]], out.logits[:, -1]


@torch.no_grad()
def model_delta_ti(model) -> float:
    """Delta_TI = ||W_out E - I||_F (Eq. 14) of the interface as trained, in float64."""
    return metrics.delta_ti(*interface_matrices(model))


@torch.no_grad()
def model_consistency(model) -> dict:
    """The Table 2 metrics (flat keys) of the interface as trained: FP32 E and W_out, metrics in float64."""
    return metrics.consistency_metrics(*interface_matrices(model))

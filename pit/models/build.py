"""Build a fresh model from a named spec (scratch family, or a tiny GPT-2 teacher to pretrain)."""

from __future__ import annotations

import torch
from transformers import GPT2LMHeadModel, PreTrainedModel

from pit.core.interfaces import InterfaceConfig
from pit.errors import PitError
from pit.models.configs import ScratchSpec, get_spec
from pit.models.scratch import PitForCausalLM, PitScratchConfig
from pit.models.teacher import gpt2_config


def scratch_config(
    name: str,
    interface: InterfaceConfig,
    *,
    vocab_size: int | None = None,
    max_seq_len: int | None = None,
    seed: int = 0,
    **overrides,
) -> PitScratchConfig:
    spec = get_spec(name)
    if not isinstance(spec, ScratchSpec):
        raise PitError(f"model {name!r} is a {spec.family} model; expected a scratch-family name")
    values = dict(
        vocab_size=vocab_size or spec.vocab_size,
        hidden_size=spec.d_model,
        num_hidden_layers=spec.n_layers,
        num_attention_heads=spec.n_heads,
        num_key_value_heads=spec.n_kv_heads,
        intermediate_size=spec.d_ff,
        max_position_embeddings=max_seq_len or spec.max_seq_len,
        interface=interface.to_dict(),
        init_seed=seed,
    )
    return PitScratchConfig(**{**values, **overrides})


def build_model(
    name: str,
    interface: InterfaceConfig | None = None,
    *,
    vocab_size: int | None = None,
    max_seq_len: int | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    **overrides,
) -> PreTrainedModel:
    """A freshly initialised model (seeded). Scratch names get the given interface; teacher names
    without a hub id give a plain tied `GPT2LMHeadModel` (a stand-in teacher to pretrain)."""
    spec = get_spec(name)
    if isinstance(spec, ScratchSpec):
        config = scratch_config(
            name, interface or InterfaceConfig(), vocab_size=vocab_size, max_seq_len=max_seq_len, seed=seed, **overrides
        )
        cls = PitForCausalLM
    else:
        if spec.hub_id is not None:
            raise PitError(
                f"model {name!r} is a pretrained teacher ({spec.hub_id}); load it with "
                "pit.models.load_teacher instead of building it"
            )
        config = gpt2_config(spec, vocab_size, **({"n_positions": max_seq_len} if max_seq_len else {}), **overrides)
        cls = GPT2LMHeadModel
    torch.manual_seed(seed)
    with torch.device(device):
        return cls(config)

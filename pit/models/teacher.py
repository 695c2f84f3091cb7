"""The GPT-2 teacher family (Cerebras-GPT and the CPU stand-ins): configs of fresh stand-ins and random-weight
folders at a published teacher's shape.

Loading and converting a teacher is generic (pit/models/any_model.py): GPT-2 is one family there, `pit_gpt2`
(`PitGPT2LMHeadModel`: `transformers.GPT2LMHeadModel` with `transformer.wte` and `lm_head` routed to one token
interface, and GPT-2's "gelu_new" with a fused backward, `TanhGELU`). The names are re-exported here.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from pit.models.any_model import TanhGELU, convert_teacher, fold_head_scale_, load_teacher, pit_classes

PitGPT2Config, PitGPT2LMHeadModel = pit_classes("gpt2")

__all__ = [
    "PitGPT2Config",
    "PitGPT2LMHeadModel",
    "TanhGELU",
    "TEACHER_FILES",
    "convert_teacher",
    "fold_head_scale_",
    "gpt2_config",
    "load_teacher",
    "write_random_teacher",
]


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

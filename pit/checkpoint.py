"""Checkpoints: checked loading of any project model, and export to a plain untied `transformers` model.

A checkpoint is a `save_pretrained` folder (config.json + model.safetensors). A PIT checkpoint holds
Z and L only (`interface.Z`, `interface.L_offdiag`, `interface.log_diag`); E = Z T^{-1} and
W_out = T Z^T are rebuilt from them whenever they are needed.

`pit export SRC DST` writes a model that any HF runtime serves without this package:
teacher family -> `GPT2LMHeadModel` with `tie_word_embeddings=False`, wte = E, lm_head = W_out^T;
scratch family -> `CohereForCausalLM` (the same parallel block), the attention gate folded into
o_proj, embed_tokens = E, lm_head = W_out^T, logit_scale = 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, CohereConfig, CohereForCausalLM, GPT2Config, GPT2LMHeadModel, PreTrainedModel

import pit.models  # noqa: F401  (registers the project's model types with the Auto classes)
from pit.errors import PitError
from pit.io import atomic_path
from pit.models.scratch import PitForCausalLM
from pit.models.teacher import PitGPT2LMHeadModel

KNOWN_TYPES = ("pit_scratch", "pit_gpt2", "gpt2", "cohere")


def read_config(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_dir():
        raise PitError(f"checkpoint {str(path)!r} does not exist or is not a folder; expected a save_pretrained folder")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise PitError(f"{str(path)!r} is not a checkpoint: no config.json (expected a save_pretrained folder)")
    try:
        cfg = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as err:
        raise PitError(f"{str(cfg_file)!r} is not valid JSON: {err}") from None
    if cfg.get("model_type") not in KNOWN_TYPES:
        raise PitError(f"checkpoint {str(path)!r} has model_type {cfg.get('model_type')!r}; expected one of {KNOWN_TYPES}")
    return cfg


def tensor_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the tensors in a checkpoint's safetensors files (reads headers only)."""
    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise PitError(f"checkpoint {str(path)!r} has no .safetensors weights")
    shapes = {}
    for f in files:
        try:
            with safe_open(f, "pt") as st:
                for k in st.keys():
                    shapes[k] = tuple(st.get_slice(k).get_shape())
        except Exception as err:  # safetensors raises its own error types for corrupt files
            raise PitError(f"{str(f)!r} is not a readable safetensors file: {err}") from None
    return shapes


def load_model(path: str | Path, *, vocab_size: int | None = None, device: str | torch.device = "cpu") -> PreTrainedModel:
    """Load a project checkpoint (FP32), checking it first: a clear error names what does not match.

    `vocab_size`: the vocabulary the caller expects (e.g. its tokenizer's); a mismatch is an error.
    """
    cfg = read_config(path)
    shapes = tensor_shapes(path)
    V = cfg.get("vocab_size")
    if vocab_size is not None and V != vocab_size:
        raise PitError(f"checkpoint {str(path)!r} has vocabulary size {V}; expected {vocab_size}")
    for name, shape in shapes.items():
        if name.endswith(("interface.Z", "interface.weight", "interface.embedding", "interface.head", "wte.weight",
                          "embed_tokens.weight")) and shape[0] != V:
            raise PitError(f"checkpoint {str(path)!r}: tensor {name} has {shape[0]} rows but config.json says "
                           f"vocab_size = {V}; the weights and the config do not belong together")
    try:
        model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=False, dtype=torch.float32)
    except (OSError, RuntimeError, ValueError) as err:
        if isinstance(err, PitError):
            raise
        raise PitError(f"cannot load checkpoint {str(path)!r}: {err}") from None
    return model.to(device).eval()


def export_untied(model: PreTrainedModel) -> PreTrainedModel:
    """A plain `transformers` model (no project code needed) whose logits equal `model`'s."""
    E = model.interface.input_embedding().detach().float().clone()
    W_out_t = model.interface.output_projection().detach().float().T.contiguous()
    if isinstance(model, PitGPT2LMHeadModel):
        cfg = model.config.to_dict()
        for key in ("model_type", "architectures", "interface", "init_seed", "transformers_version", "tie_word_embeddings"):
            cfg.pop(key, None)
        out = GPT2LMHeadModel(GPT2Config(**cfg, tie_word_embeddings=False))
        state = {k: v for k, v in model.state_dict().items() if not k.startswith("interface.")}
        state["transformer.wte.weight"], state["lm_head.weight"] = E, W_out_t
    elif isinstance(model, PitForCausalLM):
        c = model.config
        out = CohereForCausalLM(CohereConfig(
            vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
            num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
            num_key_value_heads=c.num_key_value_heads, max_position_embeddings=c.max_position_embeddings,
            rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta}, layer_norm_eps=c.layer_norm_eps,
            logit_scale=1.0, tie_word_embeddings=False, use_qk_norm=False, attention_bias=False,
            bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id))
        state = {"model.embed_tokens.weight": E, "lm_head.weight": W_out_t, "model.norm.weight": model.norm.weight}
        for i, block in enumerate(model.layers):
            p = f"model.layers.{i}."
            a, m = block.attn, block.mlp
            state[p + "input_layernorm.weight"] = block.norm.weight
            for name in ("q_proj", "k_proj", "v_proj"):
                state[p + f"self_attn.{name}.weight"] = getattr(a, name).weight
            state[p + "self_attn.o_proj.weight"] = a.o_proj.weight * torch.sigmoid(a.gate)[None, :]
            for name in ("gate_proj", "up_proj", "down_proj"):
                state[p + f"mlp.{name}.weight"] = getattr(m, name).weight
    else:
        raise PitError(f"cannot export a {type(model).__name__}; expected a project model (PIT/TT/untied interface)")
    out.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=True)
    return out.eval()


def save_pretrained_atomic(model: PreTrainedModel, path: str | Path, tokenizer=None) -> None:
    """`save_pretrained` (safetensors) into a temporary folder, then rename: never a half-written checkpoint."""
    with atomic_path(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)


def cmd_export(args: argparse.Namespace) -> int:
    model = load_model(args.src)
    exported = export_untied(model)
    tokenizer_files = [f for f in Path(args.src).iterdir() if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges"))]
    with atomic_path(args.dst) as tmp:
        exported.save_pretrained(tmp, safe_serialization=True)
        for f in tokenizer_files:
            (tmp / f.name).write_bytes(f.read_bytes())
    print(f"exported {type(model).__name__} ({model.interface.kind}) -> {type(exported).__name__} at {args.dst}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("export", help="write a plain untied transformers model with the same logits",
                       description="Write a plain untied transformers model (GPT2LMHeadModel for the teacher "
                                   "family, CohereForCausalLM for the scratch family) whose logits equal SRC's.")
    p.add_argument("src", help="project checkpoint folder (save_pretrained)")
    p.add_argument("dst", help="output folder")
    p.set_defaults(func=cmd_export)

"""Export to a plain untied `transformers` model that any HF runtime serves without this package:
teacher family -> `GPT2LMHeadModel` with `tie_word_embeddings=False`, wte = E, lm_head = W_out^T;
scratch family -> `CohereForCausalLM` (the same parallel block), the attention gate folded into
o_proj, embed_tokens = E, lm_head = W_out^T, logit_scale = 1.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import CohereConfig, CohereForCausalLM, GPT2Config, GPT2LMHeadModel, PreTrainedModel

from pit.errors import PitError
from pit.io import atomic_path
from pit.models.checkpoint import load_model
from pit.models.scratch import PitForCausalLM
from pit.models.teacher import PitGPT2LMHeadModel

TOKENIZER_FILES = ("tokenizer", "special_tokens", "vocab", "merges")


def export_untied(model: PreTrainedModel) -> PreTrainedModel:
    """A plain `transformers` model (no project code needed) whose logits equal `model`'s."""
    E = model.interface.input_embedding().detach().float().clone()
    W_out_t = model.interface.output_projection().detach().float().T.contiguous()
    if isinstance(model, PitGPT2LMHeadModel):
        cfg = model.config.to_dict()
        for key in (
            "model_type",
            "architectures",
            "interface",
            "init_seed",
            "transformers_version",
            "tie_word_embeddings",
        ):
            cfg.pop(key, None)
        out = GPT2LMHeadModel(GPT2Config(**cfg, tie_word_embeddings=False))
        state = {k: v for k, v in model.state_dict().items() if not k.startswith("interface.")}
        state["transformer.wte.weight"], state["lm_head.weight"] = E, W_out_t
    elif isinstance(model, PitForCausalLM):
        c = model.config
        out = CohereForCausalLM(
            CohereConfig(
                vocab_size=c.vocab_size,
                hidden_size=c.hidden_size,
                intermediate_size=c.intermediate_size,
                num_hidden_layers=c.num_hidden_layers,
                num_attention_heads=c.num_attention_heads,
                num_key_value_heads=c.num_key_value_heads,
                max_position_embeddings=c.max_position_embeddings,
                rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
                layer_norm_eps=c.layer_norm_eps,
                logit_scale=1.0,
                tie_word_embeddings=False,
                use_qk_norm=False,
                attention_bias=False,
                bos_token_id=c.bos_token_id,
                eos_token_id=c.eos_token_id,
                pad_token_id=c.pad_token_id,
            )
        )
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


def export_checkpoint(src: str | Path, dst: str | Path, force: bool = False) -> tuple[PreTrainedModel, PreTrainedModel]:
    """Export the checkpoint `src` to the folder `dst` (atomically), with its tokenizer files; `force` replaces a
    folder `dst` of another kind (see pit.io.atomic_path)."""
    model = load_model(src)
    exported = export_untied(model)
    tokenizer_files = [f for f in Path(src).iterdir() if f.name.startswith(TOKENIZER_FILES)]
    with atomic_path(dst, replace_any=force) as tmp:
        exported.save_pretrained(tmp, safe_serialization=True)
        for f in tokenizer_files:
            (tmp / f.name).write_bytes(f.read_bytes())
    return model, exported

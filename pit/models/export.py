"""Export to a plain untied `transformers` model that any HF runtime serves without this package:
any converted causal LM (`pit_<type>`, pit/models/any_model.py) -> its source architecture (`GPT2LMHeadModel`,
`LlamaForCausalLM`, `GemmaForCausalLM`, ...) with `tie_word_embeddings=False`, input embedding = E (the table:
the architecture applies its own scale, Gemma's sqrt(d)), output head = W_out^T, every other weight as it is;
scratch family -> `CohereForCausalLM` (the same parallel block), the attention gate folded into
o_proj, embed_tokens = E, lm_head = W_out^T, logit_scale = 1.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, CohereConfig, CohereForCausalLM, PreTrainedModel

from pit.core.interfaces import InterfaceConfig
from pit.core.rounding import network_depth, relative_bound
from pit.errors import PitError
from pit.io import atomic_path
from pit.models.any_model import InterfaceCausalLM, convert_teacher, load_teacher, source_config
from pit.models.checkpoint import load_model, read_config, write_model_card
from pit.models.scratch import PitForCausalLM
from pit.sources import check_source

# The files of a model folder that make its tokenizer: the tokenizer and its config (which may hold the chat template
# as `chat_template`), the chat template as its own file (`chat_template.jinja`, older `chat_template.json`) and more
# named templates (the folder `additional_chat_templates/`).
TOKENIZER_FILES = ("tokenizer", "special_tokens", "vocab", "merges", "chat_template", "additional_chat_templates")
CHECK_TOKENS = 16  # token ids the exported model's logits are compared on (`check_logits`)


@dataclass(frozen=True)
class LogitCheck:
    """The exported model's logits against the source's on CHECK_TOKENS seeded ids: `gap` = max |a - b| / max |b|
    (relative to the source's largest logit), `bound` the float32 rounding bound it must be within (`check_logits`)."""

    gap: float
    bound: float
    d: int
    depth: int

    def words(self) -> str:
        return (
            f"logits within {self.gap:.1e} of the source's, relative (max |difference| / max |logit| over "
            f"{CHECK_TOKENS} tokens; bound {self.bound:.1e}: float32 rounding at d = {self.d}, depth {self.depth})"
        )


def _weight_name(model: PreTrainedModel, module: torch.nn.Module) -> str:
    return next(f"{name}.weight" for name, m in model.named_modules() if m is module)


def export_untied(model: PreTrainedModel) -> PreTrainedModel:
    """A plain `transformers` model (no project code needed) whose logits equal `model`'s."""
    if not isinstance(model, (InterfaceCausalLM, PitForCausalLM)):
        raise PitError(f"cannot export a {type(model).__name__}; expected a project model (PIT/TT/untied interface)")
    E = model.interface.input_embedding().detach().float().clone()
    W_out_t = model.interface.output_projection().detach().float().T.contiguous()
    if isinstance(model, InterfaceCausalLM):
        torch.manual_seed(0)  # the plain model's fresh tensors are all replaced; its own buffers stay
        out = AutoModelForCausalLM.from_config(source_config(model.config, tie_word_embeddings=False))
        state = {k: v for k, v in model.state_dict().items() if not k.startswith("interface.")}
        state[_weight_name(out, out.get_input_embeddings())] = E
        state[_weight_name(out, out.get_output_embeddings())] = W_out_t
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
    out.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=True)
    return out.eval()


def _copy_tokenizer(src: str | Path, dst: Path, local_files_only: bool = False) -> None:
    """The tokenizer files (TOKENIZER_FILES, the chat template with them) of a local folder `src`, or of a hub id's
    tokenizer when transformers finds one (from the hub cache only with `local_files_only`)."""
    if Path(src).is_dir():
        for f in Path(src).iterdir():
            if f.name.startswith(TOKENIZER_FILES):
                (shutil.copytree if f.is_dir() else shutil.copyfile)(f, dst / f.name)
        return
    from transformers import AutoTokenizer

    with contextlib.suppress(OSError, ValueError):  # a model without a tokenizer of its own: the caller brings one
        AutoTokenizer.from_pretrained(src, local_files_only=local_files_only).save_pretrained(dst)


@torch.no_grad()
def check_logits(model: PreTrainedModel, exported: PreTrainedModel) -> LogitCheck:
    """Compare the two models' logits on CHECK_TOKENS seeded token ids; a gap above the bound is a PitError. The
    bound is relative, pit.core.rounding's for the same function evaluated two ways in float32:
    relative_bound(d, network_depth(layers) + 2, kappa(T)) (the + 2: E and W_out rebuilt from the interface; kappa(T)
    of a PIT interface's T, 1 for TT and untied)."""
    c = model.config
    ids = torch.randint(0, c.vocab_size, (1, CHECK_TOKENS), generator=torch.Generator().manual_seed(0))
    a, b = exported(ids).logits.double(), model(ids).logits.double()
    gap = ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
    transform = getattr(model.interface, "transform", None)
    kappa = 1.0
    if transform is not None:
        w = torch.linalg.eigvalsh(transform().detach().double())
        kappa = (w.max() / w.min()).item()
    depth = network_depth(c.num_hidden_layers) + 2
    check = LogitCheck(gap, relative_bound(c.hidden_size, depth, kappa), c.hidden_size, depth)
    if not gap <= check.bound:  # (a NaN gap fails too)
        raise PitError(f"the exported model's logits differ from the checkpoint's by {gap:.2e} relative (max "
                       f"|difference| / max |logit| over {CHECK_TOKENS} tokens), above {check.bound:.2e}, the float32 "
                       f"rounding bound at d = {check.d}, depth {depth}: nothing was written")  # fmt: skip
    return check


def convert_checkpoint(
    src: str, dst: str | Path, interface: InterfaceConfig, force: bool = False
) -> tuple[PreTrainedModel, PreTrainedModel]:
    """`pit convert`: load the causal LM `src` (folder or hub id; pit.models.any_model.load_teacher), convert it to
    `interface` (`convert_teacher`) and save it to the folder `dst` atomically, with its tokenizer and model card.
    Returns (source, converted)."""
    source = load_teacher(src)
    model = convert_teacher(source, interface)
    with atomic_path(dst, replace_any=force) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        write_model_card(model, tmp)
        _copy_tokenizer(src, tmp, check_source(src).cached_only)
    return source, model


def export_checkpoint(
    src: str | Path, dst: str | Path, force: bool = False
) -> tuple[PreTrainedModel, PreTrainedModel, LogitCheck]:
    """Export the checkpoint `src` to the folder `dst` (atomically), with its tokenizer files and chat template,
    once its logits are checked (`check_logits`); `force` replaces a folder `dst` of another kind (see
    pit.io.atomic_path). A plain model (no PIT/TT/untied interface: GPT-2, Llama, ... as transformers has them) has
    nothing to export: a PitError, before any weights load."""
    model_type = read_config(src)["model_type"]
    if not model_type.startswith("pit_"):
        raise PitError(
            f"{str(src)!r} holds a plain {model_type!r} model, not a project checkpoint (model_type pit_*: PIT/TT/"
            "untied interface); it is already a plain transformers model (`pit convert` makes a project checkpoint)"
        )
    model = load_model(src)
    exported = export_untied(model)
    check = check_logits(model, exported)
    with atomic_path(dst, replace_any=force) as tmp:
        exported.save_pretrained(tmp, safe_serialization=True)
        _copy_tokenizer(src, tmp)
    return model, exported, check

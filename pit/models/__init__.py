"""Model families: the scratch family of Table 3 and any supported `transformers` causal LM with a token
interface (the GPT-2-architecture teachers among them: pit/models/any_model.py).

Importing this package registers the scratch type and every `pit_<type>` of `any_model.FAMILIES` with the
`transformers` Auto classes, so `AutoModelForCausalLM.from_pretrained(folder)` loads any checkpoint the project writes.
"""

from transformers import AutoConfig, AutoModelForCausalLM

from pit.models.any_model import FAMILIES, convert_teacher, load_teacher, register_families
from pit.models.build import build_model, scratch_config
from pit.models.configs import MODELS, TABLE3, ScratchSpec, TeacherSpec, get_spec
from pit.models.scratch import PitForCausalLM, PitScratchConfig
from pit.models.teacher import PitGPT2Config, PitGPT2LMHeadModel, gpt2_config

AutoConfig.register(PitScratchConfig.model_type, PitScratchConfig, exist_ok=True)
AutoModelForCausalLM.register(PitScratchConfig, PitForCausalLM, exist_ok=True)
register_families()

__all__ = [
    "FAMILIES",
    "build_model",
    "scratch_config",
    "MODELS",
    "TABLE3",
    "ScratchSpec",
    "TeacherSpec",
    "get_spec",
    "PitForCausalLM",
    "PitScratchConfig",
    "PitGPT2Config",
    "PitGPT2LMHeadModel",
    "convert_teacher",
    "gpt2_config",
    "load_teacher",
]

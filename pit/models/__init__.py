"""Model families: the scratch family of Table 3 and the GPT-2-architecture teacher family.

Importing this package registers both with the `transformers` Auto classes, so
`AutoModelForCausalLM.from_pretrained(folder)` loads any checkpoint the project writes.
"""

from transformers import AutoConfig, AutoModelForCausalLM

from pit.models.build import build_model, scratch_config
from pit.models.configs import MODELS, TABLE3, ScratchSpec, TeacherSpec, get_spec
from pit.models.scratch import PitForCausalLM, PitScratchConfig
from pit.models.teacher import PitGPT2Config, PitGPT2LMHeadModel, convert_teacher, gpt2_config, load_teacher

AutoConfig.register(PitScratchConfig.model_type, PitScratchConfig, exist_ok=True)
AutoModelForCausalLM.register(PitScratchConfig, PitForCausalLM, exist_ok=True)
AutoConfig.register(PitGPT2Config.model_type, PitGPT2Config, exist_ok=True)
AutoModelForCausalLM.register(PitGPT2Config, PitGPT2LMHeadModel, exist_ok=True)

__all__ = [
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

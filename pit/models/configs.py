"""Every named model size is one entry here (litgpt style); nothing model-specific lives elsewhere.

Scratch family (paper Table 3, V = 32000): gated GQA (d_head 64, n_kv = n_h / 4), SwiGLU with
the table's d_ff, parallel attention + MLP block. XL: the table's n_h = 24, n_kv = 6 cannot hold d = 1600 at an
integer head width (1600 / 24 = 66.7; floor 66 gives 1164.9M = 1.16B); its 1.17B is the paper's Eq. 17 reading,
queries and output d x d and key/value width d / 4 = 400 (1167.5M). That reading runs as 20 heads of 80
(q width 1600) and 5 KV heads of 80 (KV width 400): 80 is the even width nearest 64 that divides both
(docs/models.md). Teacher family: Cerebras-GPT (GPT-2
architecture, tied embeddings, no-bias head, V = 50257), loaded through `transformers`.
Tiny entries are stand-ins of the same architectures for CPU runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from pit.errors import PitError


@dataclass(frozen=True)
class ScratchSpec:
    """A scratch-family decoder (Table 3)."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int = 32000
    max_seq_len: int = 1024

    family = "scratch"


@dataclass(frozen=True)
class TeacherSpec:
    """A GPT-2-architecture teacher: a hub id / local folder, or a config for a fresh tiny one."""

    n_layer: int
    n_embd: int
    n_head: int
    n_positions: int
    vocab_size: int = 50257
    hub_id: str | None = None

    family = "teacher"


MODELS: dict[str, ScratchSpec | TeacherSpec] = {
    # ---- scratch family, Table 3 -------------------------------------------------------------
    "scratch-133m": ScratchSpec(16, 768, 12, 3, 2304),
    "scratch-303m": ScratchSpec(24, 1024, 16, 4, 2816),
    "scratch-613m": ScratchSpec(32, 1280, 20, 5, 3584),
    "scratch-1.17b": ScratchSpec(40, 1600, 20, 5, 4480),  # paper: n_h 24, n_kv 6 (see the module docstring)
    # ---- tiny scratch stand-ins (same block, CPU-sized) --------------------------------------
    "scratch-tiny": ScratchSpec(2, 64, 4, 1, 192, max_seq_len=256),
    "scratch-tiny-m": ScratchSpec(3, 128, 4, 1, 384, max_seq_len=256),
    "scratch-tiny-l": ScratchSpec(4, 128, 8, 2, 384, max_seq_len=256),
    # ---- teacher family: Cerebras-GPT (hub ids; architecture from their config.json) ---------
    "cerebras-gpt-111m": TeacherSpec(10, 768, 12, 2048, hub_id="cerebras/Cerebras-GPT-111M"),
    "cerebras-gpt-256m": TeacherSpec(14, 1088, 17, 2048, hub_id="cerebras/Cerebras-GPT-256M"),
    "cerebras-gpt-590m": TeacherSpec(18, 1536, 12, 2048, hub_id="cerebras/Cerebras-GPT-590M"),
    "cerebras-gpt-1.3b": TeacherSpec(24, 2048, 16, 2048, hub_id="cerebras/Cerebras-GPT-1.3B"),
    # ---- tiny GPT-2-architecture teachers for offline runs -----------------------------------
    "gpt2-tiny": TeacherSpec(2, 64, 4, 256),
    "gpt2-tiny-m": TeacherSpec(3, 96, 4, 256),
    "gpt2-tiny-l": TeacherSpec(4, 128, 4, 256),
    # ---- a GPT-2 stand-in teacher at GPT-2 small's shape, for one GPU (config/study-gpu.yaml) --------
    "gpt2-small": TeacherSpec(12, 768, 12, 1024),  # 124M at V = 50257, 110M at V = 32000
}

TABLE3 = ["scratch-133m", "scratch-303m", "scratch-613m", "scratch-1.17b"]


def get_spec(name: str) -> ScratchSpec | TeacherSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise PitError(f"unknown model name {name!r}; expected one of {sorted(MODELS)}") from None

"""Paper Table 3 computed from the model definitions (instantiated on the meta device).

Parameters are counted with tied embeddings (the table's convention: the V x d table once).
PIT adds L: d(d+1)/2 free entries (strictly-lower part + diagonal), reported in its own column.
Each row shows the head width and the query and key/value widths the model was built with (XL: the paper's
Eq. 17 reading, q width d and KV width d / 4 = 400; pit/models/configs.py).
"""

from __future__ import annotations

import torch

from pit.core.interfaces import InterfaceConfig
from pit.models.build import scratch_config
from pit.models.configs import MODELS, TABLE3, ScratchSpec
from pit.models.scratch import PitForCausalLM


def count_parameters(name: str, paper: dict | None = None) -> dict:
    """Architecture row for a scratch-family name: shapes, parameter counts, embedding share; `paper`: the
    paper's Table 3 entries by model name (reporting's paper values), added as the row's `paper`."""
    spec: ScratchSpec = MODELS[name]
    with torch.device("meta"):
        model = PitForCausalLM(scratch_config(name, InterfaceConfig(kind="tt")))
    total = sum(p.numel() for p in model.parameters())
    embed = model.interface.weight.numel()
    d = spec.d_model
    attn = model.layers[0].attn
    row = {
        "model": name,
        "layers": spec.n_layers,
        "d_model": d,
        "n_heads": spec.n_heads,
        "n_kv_heads": spec.n_kv_heads,
        "d_head": attn.head_dim,
        "q_width": attn.q_proj.out_features,
        "kv_width": attn.k_proj.out_features,
        "d_ff": spec.d_ff,
        "vocab_size": spec.vocab_size,
        "params": total,
        "params_m": round(total / 1e6, 1),
        "embed_params": embed,
        "embed_pct": round(100 * embed / total, 1),
        "pit_extra_params": d * (d + 1) // 2,
    }
    entry = (paper or {}).get(name)
    if entry:
        row["paper"] = {
            "name": entry["name"],
            "params": entry["params"],
            "embed_pct": entry["embed_pct"],
            "n_heads": entry.get("n_heads"),
            "n_kv_heads": entry.get("n_kv_heads"),
            "source": "Table 3",
        }
    return row


def architecture_table(names: list[str] | None = None, paper: dict | None = None) -> list[dict]:
    """Rows of `count_parameters` for `names` (default: the four Table 3 models)."""
    return [count_parameters(n, paper) for n in (names or TABLE3)]

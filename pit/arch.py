"""`pit arch`: paper Table 3 computed from the model definitions (instantiated on the meta device).

Parameters are counted with tied embeddings (the table's convention: the V x d table once).
PIT adds L: d(d+1)/2 free entries (strictly-lower part + diagonal), reported in its own column.
"""

from __future__ import annotations

import argparse
import json

import torch

from pit.models.build import scratch_config
from pit.models.configs import MODELS, TABLE3, ScratchSpec
from pit.models.scratch import PitForCausalLM
from pit.paper import paper_values
from pit.tying import InterfaceConfig


def count_parameters(name: str) -> dict:
    """Architecture row for a scratch-family name: shapes, parameter counts, embedding share."""
    spec: ScratchSpec = MODELS[name]
    with torch.device("meta"):
        model = PitForCausalLM(scratch_config(name, InterfaceConfig(kind="tt")))
    total = sum(p.numel() for p in model.parameters())
    embed = model.interface.weight.numel()
    d = spec.d_model
    row = {
        "model": name, "layers": spec.n_layers, "d_model": d, "n_heads": spec.n_heads, "n_kv_heads": spec.n_kv_heads,
        "d_head": d // spec.n_heads, "d_ff": spec.d_ff, "vocab_size": spec.vocab_size,
        "params": total, "params_m": round(total / 1e6, 1), "embed_params": embed,
        "embed_pct": round(100 * embed / total, 1), "pit_extra_params": d * (d + 1) // 2,
    }
    paper = paper_values()["table3"].get(name)
    if paper:
        row["paper"] = {"name": paper["name"], "params": paper["params"], "embed_pct": paper["embed_pct"],
                        "source": "Table 3"}
    return row


def architecture_table(names: list[str] | None = None) -> list[dict]:
    return [count_parameters(n) for n in (names or TABLE3)]


def _millions(x: float | None) -> str:
    return "" if x is None else f"{x / 1e6:.0f}M"


def to_markdown(rows: list[dict]) -> str:
    head = "| model | paper name | L | d_model | n_h | n_kv | d_ff | V | params (ours) | params (paper) | embed % (ours) | embed % (paper) | PIT extra (L) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        p = r.get("paper") or {}
        lines.append(f"| {r['model']} | {p.get('name', '')} | {r['layers']} | {r['d_model']} | {r['n_heads']} | "
                     f"{r['n_kv_heads']} | {r['d_ff']} | {r['vocab_size']} | {r['params'] / 1e6:.1f}M | "
                     f"{_millions(p.get('params'))} | {r['embed_pct']:.1f} | {p.get('embed_pct', '')} | {r['pit_extra_params']:,} |")
    return "\n".join(lines)


def cmd_arch(args: argparse.Namespace) -> int:
    names = [n for n, s in MODELS.items() if isinstance(s, ScratchSpec)] if args.all else TABLE3
    rows = architecture_table(names)
    print(json.dumps(rows, indent=2) if args.json else to_markdown(rows))
    return 0


def register(sub) -> None:
    p = sub.add_parser("arch", help="Table 3: architectures and parameter counts", description=__doc__)
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a Markdown table")
    p.add_argument("--all", action="store_true", help="include the tiny stand-ins")
    p.set_defaults(func=cmd_arch)

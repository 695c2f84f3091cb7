"""`pit arch`: paper Table 3 from the model definitions (pit/models/arch.py), the paper's values beside ours."""

from __future__ import annotations

import argparse
import json

from pit.models.arch import architecture_table
from pit.models.configs import MODELS, TABLE3, ScratchSpec
from pit.reporting.paper import paper_values


def _millions(x: float | None) -> str:
    return "" if x is None else f"{x / 1e6:.0f}M"


def _ours_and_paper(ours, paper) -> str:
    """`ours`, with the paper's value beside it where the two differ (XL's heads)."""
    return f"{ours}" if paper in (None, ours) else f"{ours} (paper {paper})"


def to_markdown(rows: list[dict]) -> str:
    head = (
        "| model | paper name | L | d_model | n_h | n_kv | d_head | q width | KV width | d_ff | V | params (ours) | "
        "params (paper) | embed % (ours) | embed % (paper) | PIT extra (L) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        p = r.get("paper") or {}
        lines.append(
            f"| {r['model']} | {p.get('name', '')} | {r['layers']} | {r['d_model']} | "
            f"{_ours_and_paper(r['n_heads'], p.get('n_heads'))} | "
            f"{_ours_and_paper(r['n_kv_heads'], p.get('n_kv_heads'))} | "
            f"{r['d_head']} | {r['q_width']} | {r['kv_width']} | {r['d_ff']} | {r['vocab_size']} | "
            f"{r['params'] / 1e6:.1f}M | "
            f"{_millions(p.get('params'))} | {r['embed_pct']:.1f} | {p.get('embed_pct', '')} | "
            f"{r['pit_extra_params']:,} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    names = [n for n, s in MODELS.items() if isinstance(s, ScratchSpec)] if args.all else TABLE3
    rows = architecture_table(names, paper_values()["table3"])
    print(json.dumps(rows, indent=2) if args.json else to_markdown(rows))
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "arch",
        help="Table 3: architectures and parameter counts",
        description="Paper Table 3 computed from the model definitions (meta device), with tied "
        "embeddings; PIT's extra parameters (L) in their own column.",
    )
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a Markdown table")
    p.add_argument("--all", action="store_true", help="include the tiny stand-ins")
    p.set_defaults(func=run)

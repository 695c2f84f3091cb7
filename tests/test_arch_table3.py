"""Table 3 as the paper prints it: 133M / 303M / 613M / 1.17B, with the XL row in the paper's Eq. 17 reading
(queries and output d x d, key/value width d / 4), and the XL model runs at that shape."""

from __future__ import annotations

import json

import torch

from pit.commands import main
from pit.core.interfaces import InterfaceConfig
from pit.models import build_model
from pit.models.configs import MODELS, ScratchSpec

PAPER_ROUNDED = {"scratch-133m": 133e6, "scratch-303m": 303e6, "scratch-613m": 613e6, "scratch-1.17b": 1.17e9}


def test_pit_arch_rounds_to_the_papers_counts(capsys):
    assert main(["arch", "--json"]) == 0
    rows = {r["model"]: r for r in json.loads(capsys.readouterr().out)}
    for name, paper in PAPER_ROUNDED.items():
        row = rows[name]
        assert float(f"{row['params']:.3g}") == paper, (name, row["params"])  # three significant figures
        assert row["q_width"] == row["d_model"] and row["kv_width"] * 4 == row["d_model"], row
        assert row["n_heads"] * row["d_head"] == row["q_width"] and row["n_kv_heads"] * row["d_head"] == row["kv_width"]
    assert [rows[n]["d_head"] for n in PAPER_ROUNDED] == [64, 64, 64, 80]
    assert rows["scratch-1.17b"]["params"] == 1_167_489_600
    assert rows["scratch-1.17b"]["paper"]["n_heads"] == 24  # the paper's head count, shown beside ours
    assert main(["arch"]) == 0
    assert "| 20 (paper 24) | 5 (paper 6) | 80 | 1600 | 400 |" in capsys.readouterr().out


def test_the_other_table3_shapes_are_unchanged():
    assert MODELS["scratch-133m"] == ScratchSpec(16, 768, 12, 3, 2304)
    assert MODELS["scratch-303m"] == ScratchSpec(24, 1024, 16, 4, 2816)
    assert MODELS["scratch-613m"] == ScratchSpec(32, 1280, 20, 5, 3584)


def test_xl_runs_at_its_shape():
    full = build_model("scratch-1.17b", InterfaceConfig(kind="tt"), device="meta")
    ids = torch.zeros(1, 8, dtype=torch.long, device="meta")
    assert full(ids, use_cache=False).logits.shape == (1, 8, 32000)
    one = build_model("scratch-1.17b", InterfaceConfig(kind="pit"), vocab_size=2048, num_hidden_layers=1).eval()
    attn = one.layers[0].attn
    assert attn.q_proj.weight.shape == (1600, 1600) and attn.k_proj.weight.shape == (400, 1600)
    with torch.no_grad():
        logits = one(torch.randint(0, 2048, (2, 8))).logits
    assert logits.shape == (2, 8, 2048) and torch.isfinite(logits).all()

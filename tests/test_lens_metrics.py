"""Logit-lens KL and cross-entropy in bits (tuned-lens convention, `pit diagnose` `lens`) against an independent
float64 computation, one window at a time with torch.nn.functional."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pit.analysis.diagnostics import diagnose, summary
from pit.analysis.layerwise import lens_metrics, window_starts
from pit.core.interfaces import InterfaceConfig
from pit.data.reader import TokenFile
from pit.models import build_model
from pit.models.access import interface_matrices
from pit.models.checkpoint import save_pretrained_atomic
from pit.reporting.tables import table2

V, POSITIONS, SEQ_LEN = 300, 12, 32
LN2 = math.log(2)


@pytest.fixture(scope="module")
def val_file(tmp_path_factory):
    """A synthetic val split with bigram structure, so the models' predictions are not uniform."""
    path = tmp_path_factory.mktemp("val") / "val.bin"
    rng = np.random.default_rng(0)
    tokens = np.empty(3000, dtype=np.uint16)
    tokens[0] = 0
    for i in range(1, len(tokens)):
        tokens[i] = (tokens[i - 1] + 1) % V if rng.random() < 0.7 else rng.integers(V)
    tokens.tofile(path)
    meta = {"corpus": "synthetic", "documents": 1, "dtype": "uint16", "eos_id": 0, "split": "val"}
    meta |= {"tokenizer": "synthetic", "tokenizer_sha256": "0" * 64, "tokens": len(tokens), "vocab_size": V}
    path.with_suffix(".json").write_text(json.dumps(meta))
    return path


def scratch_pit():
    torch.manual_seed(0)
    model = build_model("scratch-tiny", InterfaceConfig(kind="pit"), vocab_size=V).eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 2.0)  # a final norm that is not the identity
    return model


def gpt2_tt():
    torch.manual_seed(0)
    model = build_model("gpt2-tiny", vocab_size=V).eval()
    with torch.no_grad():  # ln_f not idempotent: applying it twice to the last state would show up
        model.transformer.ln_f.weight.uniform_(0.5, 2.0)
        model.transformer.ln_f.bias.normal_(0, 0.5)
    return model


@torch.no_grad()
def reference(model, data: TokenFile) -> dict:
    """Per window and per layer: the normed state's float64 lens log-probabilities, KL to the last layer's lens
    (F.kl_div) and cross-entropy on the next token (F.cross_entropy), in bits; the model's own CE likewise."""
    _, W_out = interface_matrices(model, float64=True)
    starts = window_starts(data, POSITIONS, SEQ_LEN, 0)
    kl, ce, own, entropy = np.zeros(0), np.zeros(0), 0.0, 0.0
    for start in starts:
        row = torch.from_numpy(np.asarray(data.tokens[start : start + SEQ_LEN + 1], dtype=np.int64))[None]
        ids, target = row[:, :-1], row[:, -1]
        if hasattr(model, "layers"):  # scratch: un-normed stream after the embedding and each block
            _, states = model.hidden_states(ids, output_hidden_states=True)
            normed = [model.norm(s[:, -1]) for s in states]
            logits = model(ids).logits[:, -1]
        else:  # HF GPT-2: its last hidden state already carries ln_f
            out = model(ids, output_hidden_states=True, use_cache=False)
            hs = out.hidden_states
            normed = [model.transformer.ln_f(s[:, -1]) for s in hs[:-1]] + [hs[-1][:, -1]]
            logits = out.logits[:, -1]
        lens = [F.log_softmax(f.double() @ W_out, dim=-1) for f in normed]
        kl_w = [F.kl_div(lp, lens[-1], reduction="sum", log_target=True).item() / LN2 for lp in lens]
        ce_w = [F.cross_entropy(f.double() @ W_out, target).item() / LN2 for f in normed]
        kl = np.asarray(kl_w) if not kl.size else kl + kl_w
        ce = np.asarray(ce_w) if not ce.size else ce + ce_w
        own += F.cross_entropy(logits.double(), target).item() / LN2
        entropy += -(lens[-1].exp() * lens[-1]).sum().item() / LN2
    n = len(starts)
    return {"kl_bits": kl / n, "ce_bits": ce / n, "final_ce_bits": own / n, "final_entropy_bits": entropy / n}


@pytest.mark.parametrize("make", [scratch_pit, gpt2_tt], ids=["scratch-pit", "gpt2-tt"])
def test_lens_matches_independent_float64_loop(val_file, make):
    model, data = make(), TokenFile(val_file)
    got = lens_metrics(model, data, positions=POSITIONS, seed=0, seq_len=SEQ_LEN, batch_size=5)
    ref = reference(model, data)
    n_layers = model.config.num_hidden_layers
    assert len(got["kl_bits"]) == len(got["ce_bits"]) == n_layers + 1
    np.testing.assert_allclose(got["kl_bits"], ref["kl_bits"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["ce_bits"], ref["ce_bits"], rtol=0, atol=1e-6)
    assert got["final_ce_bits"] == pytest.approx(ref["final_ce_bits"], abs=1e-6)
    assert got["final_entropy_bits"] == pytest.approx(ref["final_entropy_bits"], abs=1e-6)
    # normalised by the last layer's distance from the uniform distribution (a model that predicts nothing: None)
    log2v = np.log2(W := model.config.vocab_size)
    assert got["log2_vocab"] == pytest.approx(log2v) and W > 1
    assert got["kl_ratio"] == pytest.approx(
        np.mean(ref["kl_bits"][:-1]) / (log2v - ref["final_entropy_bits"]), abs=1e-6
    )
    gaps, gain = np.asarray(ref["ce_bits"][:-1]) - ref["ce_bits"][-1], log2v - ref["ce_bits"][-1]
    if gain > 1e-9:
        assert got["ce_gap"] == pytest.approx(gaps.mean() / gain, abs=1e-6)
    else:  # a last layer no better than uniform on the next token: the gap is undefined
        assert got["ce_gap"] is None
    assert abs(got["kl_bits"][-1]) < 1e-9  # the last layer's lens is the reference distribution
    assert all(k >= 0 for k in got["kl_bits"]) and max(got["kl_bits"][:-1]) > 1e-5  # layers really differ
    assert got["mean_kl_bits"] == pytest.approx(np.mean(got["kl_bits"][:-1]), abs=1e-12)
    assert got["mean_ce_bits"] == pytest.approx(np.mean(got["ce_bits"]), abs=1e-12)
    # the last lens is the model's head, up to the FP32 forward pass
    assert got["ce_bits"][-1] == pytest.approx(got["final_ce_bits"], abs=1e-4)
    again = lens_metrics(model, data, positions=POSITIONS, seed=0, seq_len=SEQ_LEN, batch_size=5)
    assert json.dumps(again) == json.dumps(got)  # seeded and deterministic (NaN == NaN as text)
    other_batches = lens_metrics(model, data, positions=POSITIONS, seed=0, seq_len=SEQ_LEN)  # FP32 batching only
    np.testing.assert_allclose(other_batches["kl_bits"], got["kl_bits"], rtol=0, atol=1e-9)


def test_identity_blocks_give_zero_kl(val_file):
    """Blocks that add nothing to the residual stream: every layer's lens is the final one, KL = 0 exactly."""
    model = scratch_pit()
    with torch.no_grad():
        for block in model.layers:
            block.attn.o_proj.weight.zero_()
            block.mlp.down_proj.weight.zero_()
    got = lens_metrics(model, TokenFile(val_file), positions=POSITIONS, seed=0, seq_len=SEQ_LEN)
    assert max(abs(k) for k in got["kl_bits"]) < 1e-12 and got["mean_kl_bits"] < 1e-12
    np.testing.assert_allclose(got["ce_bits"], got["ce_bits"][-1], rtol=0, atol=1e-12)
    assert got["ce_bits"][0] > 1.0  # a real cross-entropy, not a degenerate zero


def test_diagnose_writes_lens_and_table2_reads_it(val_file, tmp_path):
    model = scratch_pit()
    ckpt = tmp_path / "ck"
    save_pretrained_atomic(model, ckpt)
    d = diagnose(ckpt, val_file, positions=8, seq_len=16)
    lens_keys = {"kl_bits", "ce_bits", "mean_kl_bits", "mean_ce_bits", "final_ce_bits", "final_entropy_bits"}
    assert set(d["lens"]) == lens_keys | {"log2_vocab", "kl_ratio", "ce_gap"}
    assert len(d["lens"]["kl_bits"]) == len(d["layerwise"]) == model.config.num_hidden_layers + 1
    assert set(d["layerwise"][0]) == {"layer", "in_out_agreement", "in_final_agreement", "out_final_agreement"}
    assert "KL bits" in summary(d) and diagnose(ckpt, positions=8)["lens"] is None
    root = tmp_path / "diag"
    for kind, lens in (("pit", d["lens"]), ("tt", None)):  # tt: diagnostics written before `lens` existed
        run = root / "scratch" / "303m" / kind
        run.mkdir(parents=True)
        old = {k: v for k, v in d.items() if k != "lens"} if lens is None else d
        (run / "diagnostics.json").write_text(json.dumps(old))
    df = table2(root).set_index("method")
    rows = {m: df.loc[m] for m in df.index}
    pit_row = next(r for m, r in rows.items() if "pit" in m.lower())
    tt_row = next(r for m, r in rows.items() if "pit" not in m.lower())
    assert pit_row["lens_kl_bits"] == pytest.approx(d["lens"]["mean_kl_bits"])
    assert pit_row["lens_ce_bits"] == pytest.approx(d["lens"]["mean_ce_bits"])
    assert pd_missing(tt_row["lens_kl_bits"]) and pd_missing(tt_row["lens_ce_bits"])


def pd_missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))

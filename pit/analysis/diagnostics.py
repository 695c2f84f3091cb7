"""`pit diagnose`: the interface diagnostics of one checkpoint (paper Sections 3 and 5.5, Table 2, Figure 2),
all in float64: Delta_TI, raw and polar anchor agreement and the direct path (pit/core/metrics.py), the
direct path against bigram statistics, layerwise consistency and the logit lens's KL / cross-entropy in bits
(pit/analysis/layerwise.py) on held-out tokens, and the best context-free model the head can express
(pit/analysis/context_free.py) on the validation file's unigram counts. Formulas and conventions:
docs/diagnostics.md.
"""

from __future__ import annotations

import torch

from pit.analysis.context_free import fit_context_free
from pit.analysis.layerwise import (
    check_vocab,
    last_position_states,
    layerwise_consistency,
    lens_metrics,
    window_starts,
)
from pit.core.metrics import bigram_fit, interface_metrics
from pit.data.reader import TokenFile, token_counts
from pit.models.access import head_bias, interface_kind, interface_matrices
from pit.models.checkpoint import load_model
from pit.progress import Steps


@torch.no_grad()
def diagnose(
    checkpoint,
    val_data=None,
    positions: int = 512,
    bigram_tokens: int = 1_000_000,
    seed: int = 0,
    seq_len: int = 128,
    device: str = "cpu",
) -> dict:
    """All diagnostics of one checkpoint; the validation-data parts are None without `val_data`. Each phase after
    the model's load is a line on stderr as it starts, with the time since the start (a large model's diagnosis
    takes minutes)."""
    data = None if val_data is None else TokenFile(val_data)
    if data is not None:
        data.check_checkpoint(checkpoint)  # before the model loads
    steps = Steps("pit diagnose", total=1 if data is None else 4, unit="phase")  # after the load: bad input is 1 line
    model = load_model(checkpoint, device=device)
    E, W_out = interface_matrices(model, float64=True)
    steps.line(f"interface metrics of the {E.shape[0]} x {E.shape[1]} tables (float64)", 1)
    metrics = interface_metrics(E, W_out)
    out = {
        "checkpoint": str(checkpoint),
        "model": type(model).__name__,
        "interface": interface_kind(model),
        "vocab_size": E.shape[0],
        "dim": E.shape[1],
        "delta_ti": metrics["delta_ti"],
        "raw": metrics["raw"],
        "polar": metrics["polar"],
        "direct_path": {"asymmetry": metrics["asymmetry"], "bigram": None},
        "val": None,
        "layerwise": None,
        "lens": None,
        "context_free": None,
    }
    if data is not None:
        check_vocab(model, data)
        steps.line(f"bigram fit on {min(bigram_tokens, len(data))} tokens", 1)
        out["direct_path"]["bigram"] = bigram_fit(E, W_out, data.tokens[:bigram_tokens])
        steps.line(f"layerwise consistency and logit lens on {positions} windows", 1)
        batches = last_position_states(model, data, positions, seed, seq_len)  # one forward pass for both
        shared = {"batches": batches, "matrices": (E, W_out)}
        out["layerwise"] = layerwise_consistency(model, data, positions, seed, seq_len, **shared)
        out["lens"] = lens_metrics(model, data, positions, seed, seq_len, **shared)
        steps.line(f"best context-free model in span(W_out^T) on the unigram counts of {len(data)} tokens", 1)
        out["context_free"] = context_free(model, W_out, data)
        seq_len = min(seq_len, model.config.max_position_embeddings)
        out["val"] = {
            "path": str(val_data),
            "positions": len(window_starts(data, positions, seq_len, seed)),
            "seq_len": seq_len,
            "seed": seed,
            "bigram_tokens": min(bigram_tokens, len(data)),
        }
    return out


def context_free(model, W_out: torch.Tensor, data: TokenFile) -> dict:
    """diagnostics.json's `context_free`: H(q) of the whole validation file's token counts (the counts, and so the
    number, of pit.data.reader.unigram_entropy) and H_span of the model's output matrix W = W_out^T (V x d) with its
    head bias, if any (pit/analysis/context_free.py)."""
    counts = token_counts(data, minlength=W_out.shape[1])  # ids below the file's vocab_size <= the model's V
    return fit_context_free(W_out.T, counts, head_bias(model)).as_json()


def summary(d: dict) -> str:
    lines = [
        f"{d['checkpoint']}: {d['model']}, interface {d['interface']}, V = {d['vocab_size']}, d = {d['dim']}",
        f"  Delta_TI = ||W_out E - I||_F          {d['delta_ti']:.3e}",
    ]
    for variant in ("raw", "polar"):
        m = d[variant]
        lines.append(
            f"  {variant:<5}  cosine distance {m['cosine_distance']:.3e}   procrustes {m['procrustes_error']:.3e}"
            f"   principal angle {m['principal_angle']:.3e} rad"
        )
    lines.append(f"  direct path A = E W_out: asymmetry ||A - A^T|| / ||A|| = {d['direct_path']['asymmetry']:.3e}")
    if (bigram := d["direct_path"]["bigram"]) is not None:
        r = "n/a" if bigram["pearson"] is None else f"{bigram['pearson']:.4f}"
        lines.append(
            f"  bigram fit: pearson(A[a, b], log p(b | a)) = {r} over {bigram['bigrams']} bigrams "
            f"({bigram['tokens']} tokens)"
        )
    if d["layerwise"] is not None:
        lens = d.get("lens")
        own = "" if lens is None else f"; model CE {lens['final_ce_bits']:.3f} bits"
        lines.append(
            f"  layerwise consistency over {d['val']['positions']} positions (seq_len {d['val']['seq_len']}{own}):"
        )
        lines.append(
            "    layer   B_in=B_out   B_in=final   B_out=final" + ("" if lens is None else "   KL bits   CE bits")
        )
        for i, r in enumerate(d["layerwise"]):
            lines.append(
                f"    {r['layer']:>5}   {r['in_out_agreement']:>10.3f}   {r['in_final_agreement']:>10.3f}"
                f"   {r['out_final_agreement']:>11.3f}"
                + ("" if lens is None else f"   {lens['kl_bits'][i]:>7.3f}   {lens['ce_bits'][i]:>7.3f}")
            )
    if (cf := d.get("context_free")) is not None:
        lines.append(
            f"  context-free: unigram H(q) = {cf['unigram_entropy']:.4f} nats, best in span(W) H_span = "
            f"{cf['span_entropy']:.4f} (+{cf['span_entropy'] - cf['unigram_entropy']:.4f}; rank {cf['rank']})"
        )
    return "\n".join(lines)

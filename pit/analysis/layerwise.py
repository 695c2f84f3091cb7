"""Layerwise semantic consistency (paper Figure 2, Section 5.5): the last token's residual state after the
embedding and after every block, final norm applied, decoded two ways: through the input anchors B_in
(the row of E with the largest cosine) and through the output anchors (the logit lens, argmax of f W_out).
A consistent interface decodes both ways alike. The same states give the logit lens's KL to the final layer
and its next-token cross-entropy, in bits (`lens_metrics`). Used by `pit diagnose` (agreement rates) and by
`pit figure transition` (the decoded tokens of a few prompts).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pit.data.reader import TokenFile
from pit.errors import PitError
from pit.models.access import interface_matrices, residual_states


@torch.no_grad()
def decode_last_token(model, ids: torch.Tensor, E: torch.Tensor | None = None, W_out: torch.Tensor | None = None):
    """(per_layer, final) for the last position of each row of `ids` (B, T): per_layer lists, embedding output
    first, (via_in, via_out) LongTensors of shape (B,): argmax_i cos(f_l, E[i]) and argmax_i (f_l W_out)[i];
    final is the argmax of the model's own logits (B,). E, W_out default to the interface in float64."""
    if E is None or W_out is None:
        E, W_out = interface_matrices(model, float64=True)
    E_unit = E / E.norm(dim=1, keepdim=True).clamp(min=torch.finfo(E.dtype).tiny)
    states, logits = residual_states(model, ids)
    per_layer = []
    for f in states:
        f = f.to(E.dtype)
        per_layer.append(((f @ E_unit.T).argmax(-1), (f @ W_out).argmax(-1)))
    return per_layer, logits.argmax(-1)


def window_starts(data: TokenFile, positions: int, seq_len: int, seed: int) -> np.ndarray:
    """`positions` distinct non-overlapping windows of seq_len + 1 tokens, drawn with a seeded RNG."""
    starts = data.sequential_starts(seq_len)
    return np.sort(np.random.default_rng(seed).choice(starts, size=min(positions, len(starts)), replace=False))


@torch.no_grad()
def layerwise_consistency(
    model, data: TokenFile, positions: int = 512, seed: int = 0, seq_len: int = 128, batch_size: int = 16
) -> list[dict]:
    """Per layer l (0 = embedding output, l = block l), over the last position of `positions` held-out windows:
    how often B_in and B_out decode the same token, and how often each agrees with the final prediction."""
    check_vocab(model, data)
    seq_len = min(seq_len, model.config.max_position_embeddings)
    E, W_out = interface_matrices(model, float64=True)
    starts = window_starts(data, positions, seq_len, seed)
    hits = None
    for i in range(0, len(starts), batch_size):
        ids = data.windows(starts[i : i + batch_size], seq_len)[:, :-1].to(E.device)
        per_layer, final = decode_last_token(model, ids, E, W_out)
        batch = torch.stack([torch.stack([a == b, a == final, b == final]).sum(1) for a, b in per_layer])
        hits = batch if hits is None else hits + batch
    rates = (hits.double() / len(starts)).tolist()
    return [
        {"layer": layer, "in_out_agreement": r[0], "in_final_agreement": r[1], "out_final_agreement": r[2]}
        for layer, r in enumerate(rates)
    ]


def lens_bits(
    states: list[torch.Tensor], W_out: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(kl, ce), each (L + 1, B) in bits, of the logit lens p_l = softmax(f_l W_out) (Belrose et al. 2023):
    kl[l] = KL(p_L || p_l) = sum_v p_L(v) (log2 p_L(v) - log2 p_l(v)), p_L the lens of the last state,
    and ce[l] = -log2 p_l(targets). All in float64; kl[L] is exactly 0."""
    logp = [torch.log_softmax(f.to(W_out.dtype) @ W_out, dim=-1) for f in states]
    final = logp[-1]
    kl = torch.stack([(final.exp() * (final - lp)).sum(-1) for lp in logp])
    ce = torch.stack([-lp.gather(-1, targets[:, None]).squeeze(-1) for lp in logp])
    return kl / math.log(2), ce / math.log(2)


@torch.no_grad()
def lens_metrics(
    model, data: TokenFile, positions: int = 512, seed: int = 0, seq_len: int = 128, batch_size: int = 16
) -> dict:
    """The tuned-lens paper's logit-lens measures (Belrose et al. 2023), in bits, averaged over the
    windows and positions `layerwise_consistency` uses: the last input position of each window, whose next token
    is the window's extra last token. States are those of `residual_states` (final norm applied), decoded with
    the float64 W_out. Layer 0 is the embedding output, layer L the last block (whose lens is the model).

    kl_bits[l] = E[KL(p_L || p_l)], ce_bits[l] = E[-log2 p_l(x_{t+1})]; mean_kl_bits averages layers 0..L-1
    (kl_bits[L] = 0 by construction), mean_ce_bits all L + 1; final_ce_bits = E[-log2 p(x_{t+1})] from the
    model's own logits, upcast to float64."""
    check_vocab(model, data)
    seq_len = min(seq_len, model.config.max_position_embeddings)
    _, W_out = interface_matrices(model, float64=True)
    starts = window_starts(data, positions, seq_len, seed)
    kl_sum = ce_sum = final_sum = 0.0
    for i in range(0, len(starts), batch_size):
        rows = data.windows(starts[i : i + batch_size], seq_len).to(W_out.device)
        ids, targets = rows[:, :-1], rows[:, -1]
        states, logits = residual_states(model, ids)
        kl, ce = lens_bits(states, W_out, targets)
        kl_sum, ce_sum = kl_sum + kl.sum(1), ce_sum + ce.sum(1)
        final_lp = torch.log_softmax(logits.double(), dim=-1).gather(-1, targets[:, None])
        final_sum += -final_lp.sum().item() / math.log(2)
    kl_bits, ce_bits = (kl_sum / len(starts)).tolist(), (ce_sum / len(starts)).tolist()
    return {
        "kl_bits": kl_bits,
        "ce_bits": ce_bits,
        "mean_kl_bits": sum(kl_bits[:-1]) / max(len(kl_bits) - 1, 1),
        "mean_ce_bits": sum(ce_bits) / len(ce_bits),
        "final_ce_bits": final_sum / len(starts),
    }


def check_vocab(model, data: TokenFile) -> None:
    """The token file and the model share one vocabulary, else a PitError naming both sizes."""
    V = model.config.vocab_size
    if data.meta.get("vocab_size") != V:
        raise PitError(
            f"token file {str(data.path)!r} was tokenized with vocabulary size "
            f"{data.meta.get('vocab_size')} (tokenizer {data.meta.get('tokenizer')!r}); "
            f"the checkpoint has vocabulary size {V}"
        )

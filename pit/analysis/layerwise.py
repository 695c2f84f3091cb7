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


def decode_states(states: list[torch.Tensor], E: torch.Tensor, W_out: torch.Tensor) -> list[tuple]:
    """Per state f_l (B, d), embedding output first: (via_in, via_out) LongTensors of shape (B,), the row of E
    with the largest cosine and argmax_i (f_l W_out)[i]."""
    E_unit = E / E.norm(dim=1, keepdim=True).clamp(min=torch.finfo(E.dtype).tiny)
    return [((f.to(E.dtype) @ E_unit.T).argmax(-1), (f.to(E.dtype) @ W_out).argmax(-1)) for f in states]


@torch.no_grad()
def decode_last_token(model, ids: torch.Tensor, E: torch.Tensor | None = None, W_out: torch.Tensor | None = None):
    """(per_layer, final) for the last position of each row of `ids` (B, T): per_layer as `decode_states`;
    final is the argmax of the model's own logits (B,). E, W_out default to the interface in float64."""
    if E is None or W_out is None:
        E, W_out = interface_matrices(model, float64=True)
    states, logits = residual_states(model, ids)
    return decode_states(states, E, W_out), logits.argmax(-1)


def window_starts(data: TokenFile, positions: int, seq_len: int, seed: int) -> np.ndarray:
    """`positions` distinct non-overlapping windows of seq_len + 1 tokens, drawn with a seeded RNG."""
    starts = data.sequential_starts(seq_len)
    return np.sort(np.random.default_rng(seed).choice(starts, size=min(positions, len(starts)), replace=False))


@torch.no_grad()
def last_position_states(
    model, data: TokenFile, positions: int = 512, seed: int = 0, seq_len: int = 128, batch_size: int = 16
) -> list[tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]]:
    """The forward passes both diagnostics below read, done once: per batch of the `window_starts` windows
    (seq_len capped at the model's context), (states, logits, targets) = `residual_states` at the last input
    position and the window's extra last token (B,)."""
    check_vocab(model, data)
    seq_len = min(seq_len, model.config.max_position_embeddings)
    starts = window_starts(data, positions, seq_len, seed)
    device = next(model.parameters()).device
    batches = []
    for i in range(0, len(starts), batch_size):
        rows = data.windows(starts[i : i + batch_size], seq_len).to(device)
        batches.append((*residual_states(model, rows[:, :-1]), rows[:, -1]))
    return batches


@torch.no_grad()
def layerwise_consistency(
    model,
    data: TokenFile,
    positions: int = 512,
    seed: int = 0,
    seq_len: int = 128,
    batch_size: int = 16,
    batches=None,
    matrices=None,
) -> list[dict]:
    """Per layer l (0 = embedding output, l = block l), over the last position of `positions` held-out windows:
    how often B_in and B_out decode the same token, and how often each agrees with the final prediction.
    `batches`, `matrices`: `last_position_states` of the same arguments and `interface_matrices(model, float64=True)`,
    when the caller has them."""
    if batches is None:
        batches = last_position_states(model, data, positions, seed, seq_len, batch_size)
    E, W_out = interface_matrices(model, float64=True) if matrices is None else matrices
    hits, count = 0, 0
    for states, logits, _ in batches:
        final = logits.argmax(-1)
        pairs = decode_states(states, E, W_out)
        hits = hits + torch.stack([torch.stack([a == b, a == final, b == final]).sum(1) for a, b in pairs])
        count += len(final)
    rates = (hits.double() / count).tolist()
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
    model,
    data: TokenFile,
    positions: int = 512,
    seed: int = 0,
    seq_len: int = 128,
    batch_size: int = 16,
    batches=None,
    matrices=None,
) -> dict:
    """The tuned-lens paper's logit-lens measures (Belrose et al. 2023), in bits, averaged over the
    windows and positions `layerwise_consistency` uses: the last input position of each window, whose next token
    is the window's extra last token. States are those of `residual_states` (final norm applied), decoded with
    the float64 W_out. Layer 0 is the embedding output, layer L the last block (whose lens is the model).
    `batches`, `matrices`: as for `layerwise_consistency`.

    kl_bits[l] = E[KL(p_L || p_l)], ce_bits[l] = E[-log2 p_l(x_{t+1})]; mean_kl_bits averages layers 0..L-1
    (kl_bits[L] = 0 by construction), mean_ce_bits all L + 1; final_ce_bits = E[-log2 p(x_{t+1})] from the
    model's own logits, upcast to float64; final_entropy_bits = E[H(p_L)].

    A model that predicts nothing (p_L uniform) has every lens at KL 0, so the raw numbers reward it. Normalised by
    how far the last layer is from the uniform distribution, KL(p_L || u) = log2 V - H(p_L), and by how much its
    cross-entropy gains over the uniform one, log2 V - ce_bits[L]:

        kl_ratio = mean_kl_bits / (log2 V - final_entropy_bits)
        ce_gap   = mean_{l < L} (ce_bits[l] - ce_bits[L]) / (log2 V - ce_bits[L])

    0 = every layer decodes like the last; 1 = as far off as the uniform distribution (None, null in JSON, for a
    model no better than uniform)."""
    if batches is None:
        batches = last_position_states(model, data, positions, seed, seq_len, batch_size)
    _, W_out = interface_matrices(model, float64=True) if matrices is None else matrices
    kl_sum = ce_sum = final_sum = entropy_sum = 0.0
    count = 0
    for states, logits, targets in batches:
        kl, ce = lens_bits(states, W_out, targets)
        kl_sum, ce_sum = kl_sum + kl.sum(1), ce_sum + ce.sum(1)
        final_lp = torch.log_softmax(logits.double(), dim=-1).gather(-1, targets[:, None])
        final_sum += -final_lp.sum().item() / math.log(2)
        last = torch.log_softmax(states[-1].to(W_out.dtype) @ W_out, dim=-1)
        entropy_sum += -(last.exp() * last).sum().item() / math.log(2)
        count += len(targets)
    kl_bits, ce_bits = (kl_sum / count).tolist(), (ce_sum / count).tolist()
    log2_vocab = math.log2(W_out.shape[1])
    mean_kl = sum(kl_bits[:-1]) / max(len(kl_bits) - 1, 1)
    entropy = entropy_sum / count
    gaps = [c - ce_bits[-1] for c in ce_bits[:-1]]
    return {
        "kl_bits": kl_bits,
        "ce_bits": ce_bits,
        "mean_kl_bits": mean_kl,
        "mean_ce_bits": sum(ce_bits) / len(ce_bits),
        "final_ce_bits": final_sum / count,
        "final_entropy_bits": entropy,
        "log2_vocab": log2_vocab,
        "kl_ratio": _ratio(mean_kl, log2_vocab - entropy),
        "ce_gap": _ratio(sum(gaps) / max(len(gaps), 1), log2_vocab - ce_bits[-1]),
    }


def _ratio(num: float, den: float) -> float | None:
    """num / den; None where the denominator is not positive (a last layer no better than uniform): undefined, and
    JSON has no NaN."""
    return num / den if den > 1e-9 else None


def check_vocab(model, data: TokenFile) -> None:
    """The token file's ids are rows of the model's vocabulary (a model may have more rows: padding), else a PitError
    naming both sizes."""
    V = model.config.vocab_size
    if not isinstance(data.meta.get("vocab_size"), int) or data.meta["vocab_size"] > V:
        raise PitError(
            f"token file {str(data.path)!r} was tokenized with vocabulary size "
            f"{data.meta.get('vocab_size')} (tokenizer {data.meta.get('tokenizer')!r}); "
            f"the checkpoint has vocabulary size {V}"
        )

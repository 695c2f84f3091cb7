"""Layerwise semantic consistency (paper Figure 2, Section 5.5): the last token's residual state after the
embedding and after every block, final norm applied, decoded two ways: through the input anchors B_in
(the row of E with the largest cosine) and through the output anchors (the logit lens, argmax of f W_out).
A consistent interface decodes both ways alike. Used by `pit diagnose` (agreement rates) and by
`pit figure transition` (the decoded tokens of a few prompts).
"""

from __future__ import annotations

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


def check_vocab(model, data: TokenFile) -> None:
    """The token file and the model share one vocabulary, else a PitError naming both sizes."""
    V = model.config.vocab_size
    if data.meta.get("vocab_size") != V:
        raise PitError(
            f"token file {str(data.path)!r} was tokenized with vocabulary size "
            f"{data.meta.get('vocab_size')} (tokenizer {data.meta.get('tokenizer')!r}); "
            f"the checkpoint has vocabulary size {V}"
        )

"""Side effects of an update (post-training): what changed between a model before and after, away
from the task it was updated for.

On N held-out windows of pretraining text (the first N non-overlapping windows of the validation
token file, so every method is measured on the same tokens):

    kl           = mean over positions of KL(p_before || p_after), next-token distributions, float64
    kl_max       = the largest per-position KL (the worst-hit context)
    top1_changed = fraction of positions whose argmax token changed
    val_loss_before / val_loss_after / val_loss_change = next-token cross-entropy and its change

and the token interface of both models: Delta_TI (`delta_ti_before/after/change`), the relative
Frobenius change of E and W_out (`embedding_change`, `head_change`; exactly 0 for a frozen
interface) and, when the interface moved, the Table 2 raw/polar metrics of both (`<metric>_before`,
`<metric>_after`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pit.core import metrics
from pit.errors import PitError
from pit.models.access import interface_matrices


@torch.no_grad()
def next_token_side_effects(
    before, after, data, seq_len: int, windows: int, batch_size: int = 4, chunk: int = 1024
) -> dict:
    """KL(p_before || p_after), top-1 changes and the loss of both models on the same windows
    (float64, `chunk` positions at a time so memory stays bounded at any vocabulary)."""
    starts = data.sequential_starts(seq_len, windows)
    device = next(before.parameters()).device
    kl_sum = kl_max = changed = loss_b = loss_a = 0.0
    count = 0
    for i in range(0, len(starts), batch_size):
        batch = data.windows(starts[i : i + batch_size], seq_len).to(device)
        inputs, targets = batch[:, :-1], batch[:, 1:].flatten()
        logits_b = before(inputs, use_cache=False).logits.flatten(0, 1)
        logits_a = after(inputs, use_cache=False).logits.flatten(0, 1)
        for j in range(0, len(targets), chunk):
            logp_b = F.log_softmax(logits_b[j : j + chunk].double(), -1)
            logp_a = F.log_softmax(logits_a[j : j + chunk].double(), -1)
            kl = (logp_b.exp() * (logp_b - logp_a)).sum(-1)
            kl_sum += kl.sum().item()
            kl_max = max(kl_max, kl.max().item())
            changed += (logp_b.argmax(-1) != logp_a.argmax(-1)).sum().item()
            loss_b += F.nll_loss(logp_b, targets[j : j + chunk], reduction="sum").item()
            loss_a += F.nll_loss(logp_a, targets[j : j + chunk], reduction="sum").item()
        count += targets.numel()
    return {
        "kl": kl_sum / count,
        "kl_max": kl_max,
        "top1_changed": changed / count,
        "val_loss_before": loss_b / count,
        "val_loss_after": loss_a / count,
        "val_loss_change": (loss_a - loss_b) / count,
        "positions": count,
    }


@torch.no_grad()
def interface_side_effects(before, after) -> dict:
    """Delta_TI of both models and the relative change of E and W_out (float64); the Table 2
    metrics of both only when the interface moved (a frozen one reads as `pit diagnose` says).
    Each model's E and W_out are materialised once (for PIT Z T^-1 and T Z^T)."""
    (E0, W0), (E1, W1) = (interface_matrices(m) for m in (before, after))  # as trained, as model_delta_ti
    out = {"delta_ti_before": metrics.delta_ti(E0, W0), "delta_ti_after": metrics.delta_ti(E1, W1)}
    out["delta_ti_change"] = out["delta_ti_after"] - out["delta_ti_before"]
    E0, W0, E1, W1 = (t.detach().double() for t in (E0, W0, E1, W1))
    out["embedding_change"] = (torch.linalg.matrix_norm(E1 - E0) / torch.linalg.matrix_norm(E0)).item()
    out["head_change"] = (torch.linalg.matrix_norm(W1 - W0) / torch.linalg.matrix_norm(W0)).item()
    if out["embedding_change"] or out["head_change"]:
        for name, (E, W) in (("before", (E0, W0)), ("after", (E1, W1))):
            out.update({f"{k}_{name}": v for k, v in metrics.consistency_metrics(E, W).items()})
    return out


def side_effects(before, after, data, seq_len: int, windows: int, batch_size: int = 4) -> dict:
    """All side-effect numbers of the update before -> after (both in eval mode, same device)."""
    if before.config.vocab_size != after.config.vocab_size or before.config.vocab_size < data.meta["vocab_size"]:
        raise PitError(
            f"vocabulary sizes differ: before {before.config.vocab_size}, after {after.config.vocab_size}, "
            f"validation data {data.meta['vocab_size']}; expected one vocabulary (model rows >= data ids: padding)"
        )
    before.eval()
    after.eval()
    return {
        **next_token_side_effects(before, after, data, seq_len, windows, batch_size),
        **interface_side_effects(before, after),
        "windows": windows,
        "seq_len": seq_len,
    }

"""Chunked fused linear + cross-entropy: the language-model loss without the (tokens x V) logits.

Every head is logits = g M^T with g (N x d) and a table M (V x d) (`TokenInterface.head_input`:
PIT g = h T, M = Z; TT M = E; untied M = W_out^T). With targets y and n rows whose target is not
`ignore_index`, the loss of `F.cross_entropy(g @ M.T, y, ignore_index=...)` (mean reduction) and its
gradients are
    loss = (1/n) sum_{i valid} (logsumexp_j z_ij - z_{i,y_i}),        z = g M^T
    dz   = (softmax(z) - onehot(y)) / n      (zero on ignored rows)
    dg   = dz M,        dM = dz^T g
`linear_cross_entropy` walks over chunks of rows and, in the forward pass, computes the logits of one
chunk, its loss terms, dz (in place of the logits) and both gradient products, so no N x V tensor is
ever stored; the backward pass only scales dg and dM by the incoming gradient. dM is computed only
when M requires a gradient: PIT with a frozen Z skips that (V x N x d) GEMM entirely.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from pit.errors import PitError

CHUNK_SIZE = 1024  # rows of logits per chunk: 1024 x 50257 FP32 = 206 MB (GEMM speed: benchmarks/RESULTS.md)
ROW_ALIGN = 16  # logits rows are stored with a stride padded to 16 elements (64 bytes): GEMMs writing rows of odd
# length (V = 50257) are slower (benchmarks/RESULTS.md); the padding columns hold -inf, so softmax gives them 0


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, g, M, targets, ignore_index, chunk_size):
        need_g, need_M = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        acc = torch.promote_types(g.dtype, torch.float32)  # softmax and loss in at least FP32
        valid = targets != ignore_index
        count = int(valid.sum())
        scale = 1.0 / count if count else 0.0  # no valid row: loss nan (0/0), zero gradients, as F.cross_entropy
        t = targets.masked_fill(~valid, 0).unsqueeze(1)
        loss = torch.zeros((), dtype=acc, device=g.device)
        dg = torch.empty_like(g) if need_g else None
        dM = torch.empty_like(M) if need_M else None  # the first chunk's product overwrites it (beta = 0)
        V = M.shape[0]
        z = torch.empty(min(chunk_size, g.shape[0]), -(-V // ROW_ALIGN) * ROW_ALIGN, dtype=g.dtype, device=g.device)
        with torch.autocast(g.device.type, enabled=False):
            for s in range(0, g.shape[0], chunk_size):
                gc, tc, vc = g[s : s + chunk_size], t[s : s + chunk_size], valid[s : s + chunk_size]
                zc = z[: len(gc)]
                torch.mm(gc, M.T, out=zc[:, :V])
                zc[:, V:] = -math.inf
                p = zc.to(acc)  # zc itself unless g is a half type
                target_logit = p.gather(1, tc)
                top = p.amax(1, keepdim=True)
                torch.ops.aten._softmax.out(p, 1, False, out=p)  # in place: p = softmax(z)
                lse = top - p.amax(1, keepdim=True).log()  # logsumexp z = max z - log max softmax(z)
                loss += torch.where(vc, (lse - target_logit).squeeze(1), 0).sum()
                if need_g or need_M:
                    p.index_fill_(0, (~vc).nonzero().squeeze(1), 0)
                    p.scatter_add_(1, tc, -vc.to(acc).unsqueeze(1))  # p - onehot(y) on valid rows
                    dz = p[:, :V].to(g.dtype)
                    if need_g:
                        dg[s : s + chunk_size].addmm_(dz, M, beta=0, alpha=scale)
                    if need_M:
                        dM.addmm_(dz.T, gc, beta=0 if s == 0 else 1, alpha=scale)
        ctx.save_for_backward(dg, dM)
        return loss / count

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss):
        dg, dM = ctx.saved_tensors  # scaled in place: a second backward through the same graph fails loudly
        if bool(grad_loss != 1):
            for grad in (dg, dM):
                if grad is not None:
                    grad.mul_(grad_loss)
        return dg, dM, None, None, None


def linear_cross_entropy(
    g: torch.Tensor, M: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100, chunk_size: int = CHUNK_SIZE
) -> torch.Tensor:
    """mean_i CE(g_i M^T, y_i) over rows with y_i != ignore_index, equal to `naive_linear_cross_entropy` in value
    and gradients, computed chunk by chunk (module docstring). g (..., d), M (V, d), targets (...). Under autocast
    the GEMMs run in the autocast dtype, as the naive head matmul would; softmax and loss stay in FP32."""
    if chunk_size < 1:
        raise PitError(f"chunk_size {chunk_size}; expected an integer >= 1")
    if torch.is_autocast_enabled(g.device.type):
        dtype = torch.get_autocast_dtype(g.device.type)
        g, M = g.to(dtype), M.to(dtype)
    elif M.dtype != g.dtype:
        M = M.to(g.dtype)
    return _LinearCrossEntropy.apply(g.reshape(-1, g.shape[-1]), M, targets.reshape(-1), ignore_index, chunk_size)


def naive_linear_cross_entropy(
    g: torch.Tensor, M: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100
) -> torch.Tensor:
    """The reference: full (N x V) logits g M^T, then `F.cross_entropy` in at least FP32."""
    logits = g.reshape(-1, g.shape[-1]) @ M.to(g.dtype).T
    return F.cross_entropy(
        logits.to(torch.promote_types(logits.dtype, torch.float32)), targets.reshape(-1), ignore_index=ignore_index
    )

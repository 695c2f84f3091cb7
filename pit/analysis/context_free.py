"""The best context-free model a head can express (docs/diagnostics.md, section 6), exactly, in float64.

Every logit vector of a model with output matrix W (V x d, rows = tokens; PIT: W = W_out^T = Z T) and head bias b
(zero for most heads) is W h + b for some h in R^d. A model that ignores its context predicts softmax(W u + b) for
one fixed u, and the best such model on a token distribution q (the validation split's unigram frequencies) has
cross-entropy

    H_span = min_u  -sum_v q_v log softmax(W u + b)_v  =  min_u [ logsumexp(W u + b) - q^T (W u + b) ]

which is convex in u (a log-sum-exp of an affine map minus a linear term). H_span >= H(q) = -sum_v q_v log q_v,
the plain unigram entropy, with equality when log q - b lies in span(W) plus constants (a token with q_v = 0 adds
nothing to q^T (W u + b); its probability is only pushed down). A validation loss that does not beat H_span is
what the interface expresses without any context: the model is degenerate.

Newton's method on u is affine invariant, so it runs on the coordinates c of an orthonormal basis Q (V x r) of
span(W) (W u = Q c; r = rank W, from the thin SVD with numpy's pinv cutoff): the same iterates, better conditioned.
Gradient Q^T (p - q) (the projection of p - q onto span(W)), Hessian Q^T (diag p - p p^T) Q, p = softmax(Q c + b),
solved by its pseudo-inverse (the direction of the constant vector, where span(W) holds it, has curvature 0 and
gradient 0), with a backtracking (Armijo) line search.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from pit.core import linalg
from pit.data.reader import entropy

log = logging.getLogger(__name__)

JSON_KEYS = ("unigram_entropy", "span_entropy", "rank", "iterations", "grad_norm")
ARMIJO, MAX_HALVINGS = 1e-4, 60
EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class ContextFreeFit:
    """The optimum of `fit_context_free`: H_span and H(q) in nats/token, rank W, the Newton iterations taken, the
    final gradient norm ||Q^T (p - q)||_2, and the optimal context-free distribution p = softmax(W u* + b) (V,)."""

    span_entropy: float
    unigram_entropy: float
    rank: int
    iterations: int
    grad_norm: float
    probs: torch.Tensor

    def as_json(self) -> dict:
        """diagnostics.json's `context_free` entry."""
        return {key: getattr(self, key) for key in JSON_KEYS}


def span_basis(W: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(Q, r): an orthonormal basis (V x r) of the column space of W (V x d, d <= V) in float64, and r = rank W
    (singular values above max(V, d) eps s_max, numpy's pinv cutoff)."""
    U, S, _ = linalg.thin_svd(W.detach().double())
    s_max = float(S.max()) if S.numel() else 0.0
    rank = int((max(W.shape) * EPS * s_max < S).sum()) if s_max > 0 else 0
    order = torch.argsort(S, descending=True)[:rank]
    return U[:, order], rank


def _objective(Q, q, b, c) -> tuple[float, torch.Tensor]:
    """logsumexp(z) - q^T z at z = Q c + b, and p = softmax(z)."""
    z = Q @ c + b
    lse = torch.logsumexp(z, 0)
    return float(lse - q @ z), torch.exp(z - lse)


def _newton_step(Q, p, g) -> torch.Tensor:
    """-H^+ g for H = Q^T (diag p - p p^T) Q, eigenvalues below r eps lambda_max counted as 0 (the constant
    direction, and tokens whose probability is already below what float64 resolves next to the largest)."""
    Qp = Q.T @ p
    H = (Q * p[:, None]).T @ Q - torch.outer(Qp, Qp)
    w, X = torch.linalg.eigh((H + H.T) / 2)
    keep = w > max(len(w), 1) * EPS * max(float(w.max()), 0.0)  # none when no curvature is left
    Xk = X[:, keep]
    return -Xk @ ((Xk.T @ g) / w[keep])


def _line_search(Q, q, b, c, f, g, step):
    """(c, f, p) after the longest step t in 1, 1/2, 1/4, ... with Armijo's decrease f(c + t s) <= f + 1e-4 t g^T s
    (up to float64's resolution of f: near the optimum the decrease is below it), or None when none decreases f."""
    slope, slack = float(g @ step), 8 * EPS * max(1.0, abs(f))
    t = 1.0
    for _ in range(MAX_HALVINGS):
        f_new, p_new = _objective(Q, q, b, c + t * step)
        if f_new <= f + ARMIJO * t * slope + slack:
            return c + t * step, f_new, p_new
        t /= 2
    return None


def fit_context_free(W, q, bias=None, tol: float = 1e-9, max_iter: int = 200) -> ContextFreeFit:
    """H_span (module docstring) of the output matrix W (V x d) and head bias `bias` (V,; None: no bias) on the token
    distribution q (V,; non-negative weights such as token counts, normalised here), by Newton's method with
    backtracking until ||Q^T (p - q)||_2 < tol (Q an orthonormal basis of span(W)). All in float64."""
    q64 = np.asarray(q.cpu() if isinstance(q, torch.Tensor) else q, dtype=np.float64)
    if q64.shape != (W.shape[0],) or not (q64 >= 0).all() or not q64.sum() > 0:
        raise ValueError(f"q of shape {q64.shape}: expected {W.shape[0]} non-negative weights, not all zero")
    q64 = q64 / q64.sum()
    Q, rank = span_basis(W)
    qt = torch.from_numpy(q64).to(Q.device)
    b = torch.zeros_like(qt) if bias is None else bias.detach().to(Q.device, torch.float64)
    c = torch.zeros(rank, dtype=torch.float64, device=Q.device)
    f, p = _objective(Q, qt, b, c)
    g, it = Q.T @ (p - qt), 0
    while float(g.norm()) >= tol and it < max_iter:
        step = _newton_step(Q, p, g)
        moved = _line_search(Q, qt, b, c, f, g, step) if bool(step.any()) else None
        if moved is None:  # no direction left that float64 resolves
            break
        (c, f, p), it = moved, it + 1
        g = Q.T @ (p - qt)
    grad_norm = float(g.norm())
    if grad_norm >= tol:
        log.warning("context-free fit: gradient norm %.3g after %d Newton steps (tolerance %.3g)", grad_norm, it, tol)
    return ContextFreeFit(f, entropy(q64), rank, it, grad_norm, p)

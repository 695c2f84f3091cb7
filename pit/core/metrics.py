"""Interface metrics (paper Sections 3 and 5.5, Eq. 1-2 and 14, Table 2), float64, from E (V x d) and W_out (d x V).

* Delta_TI = ||W_out E - I_d||_F (Eq. 14).
* Anchor agreement between B_in and B_out (both V x d), in two variants:
      raw:   B_in = E,           B_out = pinv(W_out)           (Eqs. 1-2)
      polar: B_in = polar(E),    B_out = polar(W_out^T)        (Section 5.5's wording)
  measured by the mean cosine distance of matching rows, the relative orthogonal-Procrustes error
  and the largest principal angle between the column spaces.
* The direct path A = E W_out (V x V, the token-to-logit path that skips every block): its relative
  asymmetry ||A - A^T||_F / ||A||_F and how well A[a, b] tracks the empirical bigram log p(b | a).

No V x V matrix is ever formed, and only three V x d factorizations are (joint_frame): every anchor metric is
invariant under an orthonormal change of basis except the row-wise cosine, so the rest is computed on 2d x d
coordinate matrices. Formulas and conventions: docs/diagnostics.md.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pit.core.linalg import pinv_singular_values, single_thread, small_svd
from pit.errors import PitError

CONSISTENCY_KEYS = [
    (variant, key, short)
    for variant in ("raw", "polar")
    for key, short in (("cosine_distance", "cosine"), ("procrustes_error", "procrustes"), ("principal_angle", "angle"))
]


@torch.no_grad()
def delta_ti(E: torch.Tensor, W_out: torch.Tensor) -> float:
    """Delta_TI = ||W_out E - I_d||_F (Eq. 14), in float64 (nan for a diverged interface)."""
    E, W = E.detach().double(), W_out.detach().double()
    return torch.linalg.matrix_norm(W @ E - torch.eye(E.shape[1], dtype=torch.float64, device=E.device)).item()


def cosine_distance(B_in: torch.Tensor, B_out: torch.Tensor) -> float:
    """mean_i (1 - cos(B_in[i], B_out[i])); a zero row against a zero row counts as cos = 1,
    a zero row against a non-zero row as cos = 0."""
    n_in, n_out = B_in.norm(dim=1), B_out.norm(dim=1)
    both = (n_in > 0) & (n_out > 0)
    cos = torch.where(
        both, (B_in * B_out).sum(1) / torch.where(both, n_in * n_out, 1.0), ((n_in == 0) & (n_out == 0)).to(B_in.dtype)
    )
    return (1 - cos.clamp(-1.0, 1.0)).mean().item()  # |cos| <= 1; the clamp removes round-off beyond it


def procrustes_error(B_in: torch.Tensor, B_out: torch.Tensor) -> float:
    """min_{R orthogonal} ||B_in R - B_out||_F / ||B_out||_F with R = U Vh from the SVD of the
    d x d matrix B_in^T B_out = U S Vh. The residual is evaluated directly (one V x d x d product):
    the identity ||B_in||^2 + ||B_out||^2 - 2 ||B_in^T B_out||_* cancels to ~1e-8 relative at best."""
    with single_thread():
        U, _, Vh = small_svd(B_in.T @ B_out)
    return (torch.linalg.matrix_norm(B_in @ (U @ Vh) - B_out) / torch.linalg.matrix_norm(B_out)).item()


def principal_angle(B_in: torch.Tensor, B_out: torch.Tensor) -> float:
    """Largest principal angle (radians) between the column spaces, from the sine side:
    sin(theta_max) = ||(I - Q_out Q_out^T) Q_in||_2 with Q_in, Q_out from thin QRs, the projection
    applied as Q_in - Q_out (Q_out^T Q_in); the spectral norm is that of its (small) R factor."""
    Q_in, Q_out = torch.linalg.qr(B_in).Q, torch.linalg.qr(B_out).Q
    residual_R = torch.linalg.qr(Q_in - Q_out @ (Q_out.T @ Q_in)).R
    with single_thread():
        sin = torch.linalg.matrix_norm(residual_R, ord=2).item()
    return math.asin(min(max(sin, 0.0), 1.0))


def anchor_agreement(B_in: torch.Tensor, B_out: torch.Tensor) -> dict:
    return {
        "cosine_distance": cosine_distance(B_in, B_out),
        "procrustes_error": procrustes_error(B_in, B_out),
        "principal_angle": principal_angle(B_in, B_out),
    }


def direct_path_asymmetry(E: torch.Tensor, W_out: torch.Tensor) -> float:
    """||A - A^T||_F / ||A||_F for A = E W_out, without forming A: with the thin QR
    [E, W_out^T] = Q [R1, R2] (V x 2d), A = Q (R1 R2^T) Q^T, so both norms are those of the
    2d x 2d core C = R1 R2^T (equal to the trace formulas of docs/diagnostics.md, without their
    cancellation)."""
    d = E.shape[1]
    R = torch.linalg.qr(torch.cat([E, W_out.T], dim=1)).R
    C = R[:, :d] @ R[:, d:].T
    return (torch.linalg.matrix_norm(C - C.T) / torch.linalg.matrix_norm(C)).item()


def _as_float64(E, W_out) -> tuple[torch.Tensor, torch.Tensor]:
    E, W_out = torch.as_tensor(E).detach().double(), torch.as_tensor(W_out).detach().double()
    if not (torch.isfinite(E).all() and torch.isfinite(W_out).all()):
        raise PitError("the interface has non-finite entries (a diverged run?); its metrics are undefined")
    if E.ndim != 2 or W_out.ndim != 2 or W_out.shape != (E.shape[1], E.shape[0]):
        raise PitError(
            f"input embedding E has shape {tuple(E.shape)} and output projection W_out has shape "
            f"{tuple(W_out.shape)}; expected E (V, d) and W_out (d, V)"
        )
    return E, W_out


def joint_frame(E: torch.Tensor, W_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """E and W_out^T in one orthonormal basis [Q_E, Q_P] (V x 2d) of their joint column space, so that every
    metric below works on 2d x d coordinate matrices. Thin QRs E = Q_E R_E and W_out^T = Q_W R_W, then block
    Gram-Schmidt, run twice ("twice is enough"): Q_W = Q_E M + Q_P R_P. Returns (Q_E, R_E, Q_W, R_W, M, R_P);
    Q_P itself is never needed, only its triangular factor."""
    Q_E, R_E = torch.linalg.qr(E)
    Q_W, R_W = torch.linalg.qr(W_out.T)
    M = Q_E.T @ Q_W
    Y = Q_W - Q_E @ M
    M2 = Q_E.T @ Y
    Y -= Q_E @ M2
    return Q_E, R_E, Q_W, R_W, M + M2, torch.linalg.qr(Y, mode="r").R


def _agreement(in_coords, out_coords, in_rows, out_rows) -> dict:
    """Anchor agreement from the coordinates of B_in, B_out in an orthonormal basis (procrustes error and
    principal angle are invariant under it) and their rows (the cosine distance is not)."""
    return {
        "cosine_distance": cosine_distance(in_rows, out_rows),
        "procrustes_error": procrustes_error(in_coords, out_coords),
        "principal_angle": principal_angle(in_coords, out_coords),
    }


@torch.no_grad()
def interface_metrics(E, W_out) -> dict:
    """Delta_TI, raw and polar anchor agreement, and the direct path's asymmetry for E (V x d), W_out (d x V).
    All from three thin QRs of V x d matrices (joint_frame) and the SVDs of their d x d factors
    R_E = Ue Se Vhe, R_W = Uw Sw Vhw: polar(E) = Q_E Ue Vhe, polar(W_out^T) = Q_W Uw Vhw and
    pinv(W_out) = Q_W Uw Sw^-1 Vhw (with pinv_of_wide's cutoff)."""
    E, W_out = _as_float64(E, W_out)
    Q_E, R_E, Q_W, R_W, M, R_P = joint_frame(E, W_out)
    Ue, _, Vhe = small_svd(R_E)
    Uw, Sw, Vhw = small_svd(R_W)
    pinv_W = (Uw * pinv_singular_values(Sw, W_out.shape)) @ Vhw
    zeros = torch.zeros_like(R_E)

    def of_W(X):  # coordinates of Q_W X
        return torch.cat([M @ X, R_P @ X])

    polar_E, polar_W = Ue @ Vhe, Uw @ Vhw
    return {
        "delta_ti": delta_ti(E, W_out),
        "raw": _agreement(torch.cat([R_E, zeros]), of_W(pinv_W), E, Q_W @ pinv_W),
        "polar": _agreement(torch.cat([polar_E, zeros]), of_W(polar_W), Q_E @ polar_E, Q_W @ polar_W),
        "asymmetry": direct_path_asymmetry(torch.cat([R_E, zeros]), of_W(R_W).T),
    }


@torch.no_grad()
def consistency_metrics(E: torch.Tensor, W_out: torch.Tensor) -> dict:
    """The Table 2 metrics as flat keys (`raw_cosine`, ..., `polar_angle`), as the training logs them; nan for
    every key when the interface has non-finite entries (a diverged run: nothing to measure)."""
    if not (torch.isfinite(E).all() and torch.isfinite(W_out).all()):
        return {f"{variant}_{short}": float("nan") for variant, _, short in CONSISTENCY_KEYS}
    m = interface_metrics(E, W_out)
    return {f"{variant}_{short}": m[variant][key] for variant, key, short in CONSISTENCY_KEYS}


@torch.no_grad()
def bigram_fit(E, W_out, tokens, chunk: int = 16384) -> dict:
    """Pearson correlation, over the distinct bigrams (a, b) observed in `tokens`, between the
    empirical log p(b | a) = log n(a, b) - log n(a, .) and the direct-path score A[a, b] = E[a] . W_out[:, b].
    Only the needed rows of E and columns of W_out are gathered."""
    E, W_out = _as_float64(E, W_out)
    V = E.shape[0]
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.size < 2:
        raise PitError(f"bigram fit needs at least 2 tokens; got {tokens.size}")
    if tokens.min() < 0 or tokens.max() >= V:
        raise PitError(f"token ids span [{tokens.min()}, {tokens.max()}]; expected ids in [0, {V - 1}]")
    pairs, counts = np.unique(tokens[:-1] * V + tokens[1:], return_counts=True)
    a, b = pairs // V, pairs % V
    log_p = np.log(counts) - np.log(np.bincount(tokens[:-1], minlength=V)[a])
    a, b = torch.from_numpy(a).to(E.device), torch.from_numpy(b).to(E.device)
    score = torch.cat([(E[a[i : i + chunk]] * W_out[:, b[i : i + chunk]].T).sum(1) for i in range(0, len(a), chunk)])
    score = score.cpu().numpy()
    pearson = None if len(pairs) < 2 or log_p.std() == 0 or score.std() == 0 else float(np.corrcoef(log_p, score)[0, 1])
    return {"pearson": pearson, "bigrams": int(len(pairs)), "tokens": int(tokens.size)}

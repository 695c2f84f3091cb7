"""The linear algebra PIT needs, each piece once: Gram matrices, thin SVD, polar decomposition (Eq. 7),
pseudo-inverse of a wide matrix, the inverse square root behind the polar retraction (Eq. 18), powers of an
SPD matrix (teacher inits T = c H^a) and the Stiefel initialisation (Algorithm 1). Tall V x d matrices are
only multiplied; factorizations are d x d.
"""

from __future__ import annotations

import contextlib
import logging

import numpy as np
import scipy.linalg
import torch

from pit.errors import PitError

log = logging.getLogger(__name__)


@contextlib.contextmanager
def cpu_threads(n: int | None):
    """Run the block on n CPU threads (None: unchanged), then restore the caller's count, so a library
    call never changes the thread count of the process that made it."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def single_thread():
    """Run small (d x d) LAPACK factorizations on one thread: multithreaded eigh/svd of a d x d matrix is
    much slower than single-threaded when the cores are busy (benchmarks/RESULTS.md, "small factorizations")."""
    return cpu_threads(1)


def at_least_fp32(t: torch.Tensor) -> torch.Tensor:
    """FP32 for half types; FP32/float64 stay as they are (float64 for gradcheck and diagnostics)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def compute_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype matmuls on t's device run in: autocast's (bf16 on GPUs) while it is on, else t's own (also on
    devices without autocast, such as `meta`)."""
    device = t.device.type
    # compiled code runs on a real device; Dynamo (torch 2.11) cannot trace is_autocast_available: a graph break
    available = torch.compiler.is_compiling() or torch.amp.is_autocast_available(device)
    on = available and torch.is_autocast_enabled(device)
    return torch.get_autocast_dtype(device) if on else t.dtype


def gram(Z: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
    """Z^T Z in float64, from FP32 products over row chunks summed in float64 (accurate and fast)."""
    G = torch.zeros(Z.shape[1], Z.shape[1], dtype=torch.float64, device=Z.device)
    for i in range(0, Z.shape[0], chunk):
        c = at_least_fp32(Z[i : i + chunk])
        G += (c.T @ c).double()
    return G


def orthonormality_error(Z: torch.Tensor) -> float:
    """||Z^T Z - I||_F, computed in float64."""
    Z64 = Z.detach().double()
    return torch.linalg.matrix_norm(Z64.T @ Z64 - torch.eye(Z.shape[1], dtype=torch.float64, device=Z.device)).item()


def small_svd(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A = U diag(S) Vh for a small square A (d x d), on one thread. torch's CPU SVD is LAPACK's divide and conquer
    (gesdd), which on matrices very close to the identity can fail to converge (polar(E)^T polar(W_out^T) of a PIT
    interface of scratch-1.17b's shape) or, worse, return factors that are not an SVD at all (the same matrix of a
    TT interface at Cerebras-GPT-1.3B's shape: U^T U off the identity by 2 in Frobenius norm, and a Procrustes error
    of 0.046 where the exact one is 0). So the factors are checked (svd_defect) and, where gesdd failed, the SVD is
    redone with the QR-iteration driver gesvd (through SciPy), with a warning. Otherwise the result is torch's."""
    with single_thread():
        try:
            U, S, Vh = torch.linalg.svd(A)
            problem = svd_defect(A, U, S, Vh)
        except torch.linalg.LinAlgError as err:
            problem = str(err).split(":", 1)[-1].strip()
        if problem is None:
            return U, S, Vh
    log.warning("SVD of a %s matrix: %s; using LAPACK's gesvd instead", tuple(A.shape), problem)
    return svd_gesvd(A)


def svd_defect(A, U, S, Vh) -> str | None:
    """None when U, Vh are orthonormal and U diag(S) Vh reproduces A, both to sqrt(eps) (a backward-stable SVD
    is ~d eps off); otherwise what is wrong."""
    tol = torch.finfo(A.dtype).eps ** 0.5
    eye = torch.eye(A.shape[0], dtype=A.dtype, device=A.device)
    orth = max((U.T @ U - eye).abs().max().item(), (Vh @ Vh.T - eye).abs().max().item())
    recon = (torch.linalg.matrix_norm((U * S) @ Vh - A) / torch.linalg.matrix_norm(A).clamp(min=1e-300)).item()
    if orth <= tol and recon <= tol:
        return None
    return f"the factors are off (orthonormality {orth:.3g}, reconstruction {recon:.3g}; tolerance {tol:.3g})"


def svd_gesvd(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A = U diag(S) Vh by LAPACK's gesvd (QR iteration: slower than gesdd, and converges where it does not)."""
    U, S, Vh = scipy.linalg.svd(A.detach().cpu().numpy(), full_matrices=False, lapack_driver="gesvd")
    return tuple(torch.from_numpy(np.ascontiguousarray(x)).to(A.device) for x in (U, S, Vh))


def thin_svd(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A = U diag(S) Vh for a tall A (V x d): thin QR A = Q R, then the SVD of the small R."""
    Q, R = torch.linalg.qr(A)
    Ur, S, Vh = small_svd(R)
    return Q @ Ur, S, Vh


def polar(A: torch.Tensor, *, method: str = "svd", check_rank: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Thin polar decomposition A = U H (Eq. 7) in float64: U (V x d) with orthonormal columns, H (d x d) SPD.

    method "svd": from A = P S Vh, U = P Vh and H = Vh^T S Vh; accurate for badly conditioned A (diagnostics).
    method "gram": from A^T A = Q S^2 Q^T, H = Q S Q^T and U = A Q S^-1 Q^T; one V x d x d product and a d x d
    eigh, cheaper for tall A, its error grows with cond(A)^2 (teacher init, where A is a trained embedding).
    `check_rank`: a (nearly) rank-deficient A, whose H is not invertible, is an error naming its condition number.
    """
    A = A.detach().double()
    if method == "gram":
        with single_thread():
            evals, Q = torch.linalg.eigh(A.T @ A)
        s_min, s_max = evals.min().clamp(min=0).sqrt(), evals.max().sqrt()
    elif method == "svd":
        P, S, Vh = thin_svd(A)
        s_min, s_max = S.min(), S.max()
    else:
        raise PitError(f"polar method {method!r} is unknown; expected 'svd' or 'gram'")
    if check_rank and s_min <= s_max * 1e-6:
        raise PitError(
            f"matrix of shape {tuple(A.shape)} is (nearly) rank deficient: condition number "
            f"{(s_max / s_min.clamp(min=1e-300)).item():.3g}; expected full column rank for a polar "
            "decomposition"
        )
    if method == "gram":
        s = evals.sqrt()
        return A @ ((Q / s) @ Q.T), (Q * s) @ Q.T
    return P @ Vh, (Vh.T * S) @ Vh


def pinv_of_wide(W: torch.Tensor) -> torch.Tensor:
    """pinv(W) (V x d) of a wide W (d x V) from the thin SVD W^T = U S Vh: pinv(W) = U S^-1 Vh.
    Singular values below max(V, d) * eps * s_max count as zero (numpy/torch's default cutoff)."""
    U, S, Vh = thin_svd(W.T)
    return (U * pinv_singular_values(S, W.shape)) @ Vh


def pinv_singular_values(S: torch.Tensor, shape) -> torch.Tensor:
    """1 / S, with singular values below max(shape) * eps * s_max (numpy/torch's pinv cutoff) mapped to 0."""
    cutoff = max(shape) * torch.finfo(S.dtype).eps * S.max()
    return torch.where(cutoff < S, 1 / S, torch.zeros_like(S))


def inverse_sqrt_minus_identity(G: torch.Tensor, tol: float = 1e-10, max_terms: int = 40) -> torch.Tensor:
    """G^{-1/2} - I for an SPD matrix G (float64 in). Near the identity (the retraction regime,
    G = I + X with ||X||_F < 1/2) the binomial series (I + X)^{-1/2} - I = sum_{k>=1} binom(-1/2, k) X^k,
    one matmul a term, in FP32 (X is small, so FP32 keeps ~1e-7 of a ~1e-3 correction), stopped when
    a term falls below `tol`; otherwise a float64 eigendecomposition."""
    eye = torch.eye(G.shape[0], dtype=G.dtype, device=G.device)
    X = G - eye
    if torch.linalg.matrix_norm(X) < 0.5:
        X = X.float()
        term, S = X * -0.5, X * -0.5
        for k in range(2, max_terms):
            if torch.linalg.matrix_norm(term) < tol:
                break
            term = (term @ X) * ((0.5 - k) / k)  # binom(-1/2, k) X^k from the previous term
            S = S + term
        return S.double()
    with single_thread():
        evals, evecs = torch.linalg.eigh(G)
    return (evecs * evals.rsqrt()) @ evecs.T - eye


def spd_power(A: torch.Tensor, p: float) -> torch.Tensor:
    """A^p of a symmetric positive definite A (d x d), in float64: from A = Q diag(w) Q^T (eigh, one thread),
    A^p = Q diag(w^p) Q^T. p = -1 is the inverse, p = 1/2 the SPD square root."""
    A = A.detach().double()
    with single_thread():
        w, Q = torch.linalg.eigh(A)
    if not bool((w > 0).all()):
        raise PitError(f"matrix is not positive definite (smallest eigenvalue {w.min().item():.3g}); expected SPD")
    return (Q * w.pow(p)) @ Q.T


def spd_geometric_mean(A: torch.Tensor) -> float:
    """det(A)^(1/d) of an SPD A (the geometric mean of its eigenvalues), from the Cholesky factor in float64."""
    with single_thread():
        L = torch.linalg.cholesky(A.detach().double())
    return torch.diagonal(L).log().mean().mul(2).exp().item()


def random_stiefel(vocab_size: int, dim: int, seed: int) -> torch.Tensor:
    """Scratch-mode Z: Q of a thin QR of a seeded Gaussian V x d matrix (Algorithm 1, line 6).

    QR runs in float64 with the sign convention diag(R) > 0, so the result is unique for a seed.
    """
    g = torch.Generator().manual_seed(seed)
    Q, R = torch.linalg.qr(torch.randn(vocab_size, dim, generator=g, dtype=torch.float64))
    return (Q * torch.sign(torch.diagonal(R))).float()

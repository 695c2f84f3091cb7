"""Floating-point rounding-error bounds: how far two evaluations of the same quantity may differ on two machines.

Machines differ in the order in which they add the terms of a product (vector width, blocking, threads: AMD or
Intel, AVX2 or AVX-512), so a float32 result differs between them in its last bits; the bounds below do not depend
on the order. With u the unit roundoff (float32: u = 2^-24 ~ 6.0e-8; float64: 2^-53 ~ 1.1e-16), a k-term inner
product computed in floating point has the error

    |fl(x . y) - x . y| <= gamma_k |x| . |y|,  gamma_k = k u / (1 - k u)             (Higham 2002, Thm 3.1)

in the worst case, and <= lam sqrt(k) u |x| . |y| with probability at least 1 - 2 exp(-lam^2 / 2) when the rounding
errors are independent with mean zero (Higham & Mary 2019, "A new approach to probabilistic rounding error
analysis"). The worst case needs adversarial data; these bounds use the probabilistic form with the factor stated.
The test suite's tolerances (tests/tolerances.py) and `pit verify`'s floors for PIT's structural zeros
(pit/tracking/verify.py) are these bounds; docs/reproducibility.md, "Bit-identical, or within tolerance".
"""

from __future__ import annotations

import math

U32 = 2.0**-24  # float32 unit roundoff
U64 = 2.0**-53  # float64 unit roundoff


def product(k: int, u: float = U32, lam: float = 1.0) -> float:
    """Relative error of one k-term inner product: lam sqrt(k) u (probabilistic bound, lam = 1 by default)."""
    return lam * math.sqrt(k) * u


def delta_ti_bound(d: int, kappa: float = 1.0) -> float:
    """Delta_TI = ||W_out E - I_d||_F of a PIT interface held in float32 (E = Z T^-1, W_out = T Z^T, T = L L^T).
    In exact arithmetic it is 0. Three float32 steps round: T^-1 from the triangular factor, E = Z T^-1 and
    W_out = T Z^T, each a d-term product. With ||Z||_F = sqrt(d) (orthonormal columns) and ||T^-1||_F ~ sqrt(d)
    kappa(T) / ||T||_2, each perturbs W_out E by at most ~ sqrt(d) u . ||Z||_F ||T^-1||_F ||T||_2 = u d^(3/2)
    kappa(T) in Frobenius norm, so Delta_TI <= 3 u d^(3/2) kappa(T) (the product W_out E itself is formed in
    float64 by the metric). Measured: 0.01-0.2 of u d^(3/2) for d = 32..1,600 (benchmarks/RESULTS.md)."""
    return 3 * U32 * d**1.5 * kappa


def orthonormality_bound(d: int) -> float:
    """||Z^T Z - I_d||_F of a float32 Z with orthonormal columns (a QR or polar factor stored in float32, or after
    the retraction Z <- Z + Z S): the float32 sum and the d-term product Z S round each entry of Z by ~ u
    (|z| + sqrt(d) |z| |S|), which moves Z^T Z by at most ~ 2 u ||Z||_F (1 + sqrt(d) ||S||_2) <= u d for the
    retraction's ||S||_2 << 1."""
    return U32 * d


def relative_bound(d: int, depth: int = 1, kappa: float = 1.0, u: float = U32) -> float:
    """Relative difference ||a - b|| / ||b|| of two evaluations of the same function that round differently
    (another kernel, another order of the products, a matrix rebuilt from its factors): `depth` d-term products in a
    chain, each adding lam sqrt(d) u kappa relative, with lam = 4 (a maximum over many entries rather than one
    entry: P(|error| > 4 sigma) ~ 6e-5 per entry). PIT's anchor metrics (Procrustes error, principal angle) of an
    exactly consistent interface are 0 up to relative_bound(d, 3, kappa(T))."""
    return depth * product(d, u, lam=4.0) * kappa


def network_depth(layers: int) -> int:
    """`depth` of `relative_bound` for a decoder of `layers` blocks: 6 products per block (q/k/v, scores, values,
    out, MLP in, MLP out) plus the embedding and the head."""
    return 6 * layers + 2

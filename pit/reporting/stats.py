"""The statistics of the claims table (docs/study.md, "Statistics"): exact tests of paired differences over seeds.

- sign_flip: the exact paired randomization test of the mean difference (Fisher's sign-flip test) and the
  confidence interval that inverts it. Under H0 the n paired differences d_i are symmetric about 0, so each of the
  2^n sign patterns is equally likely. One-sided p_upper = #{patterns s: sum s_i d_i >= sum d_i} / 2^n, which is
  (1 + #{non-empty subsets S: mean_S(d) <= 0}) / 2^n (flipping S lowers the sum by 2 sum_S d); p_lower likewise with
  >= 0; the two-sided p is min(1, 2 min(p_upper, p_lower)). A subset mean within 1e-12 max|d_i| of 0 counts as 0 (a
  subset that sums to 0 up to round-off). Its smallest value is 2 / 2^n (0.031 for n = 6).
  The interval at level alpha (Hartigan 1969): the 2^n - 1 subset means split the line into 2^n intervals that hold
  the centre of symmetry with equal probability, so [m_(k), m_(2^n - k)] with k = floor(alpha 2^n / 2) (m_(j) the
  j-th smallest subset mean) has coverage >= 1 - alpha, and excludes 0 exactly when p <= alpha; k = 0 (n too small
  for alpha) gives (-inf, inf).
- fisher_p: Fisher's exact two-sided test of two proportions (a binary outcome per run, e.g. diverged or not).
- holm: Holm-Bonferroni adjusted p-values over a family of tests (Holm 1979): with the m p-values sorted,
  p_adj(i) = max_{j <= i} min(1, (m - j + 1) p(j)); a test is rejected at level alpha when p_adj <= alpha.
- min_detectable: the smallest true mean difference the design detects with probability `power` at level alpha
  (two-sided): (t_{1 - alpha/2, n-1} + t_{power, n-1}) sd / sqrt(n), the normal-theory approximation of the exact
  test's power; infinite where the exact test cannot reach alpha at all (2 / 2^n > alpha).
- t_interval: mean +- t(0.975, n-1) sd / sqrt(n), the 95% Student-t interval of a mean (the arms' own spread).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EXACT_MAX_N = 20  # 2^20 sign patterns: the exact test and interval up to here (the profiles use <= 10 seeds)


def t_interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width) of the 95% Student-t interval; half-width NaN for n = 1, mean NaN for n = 0."""
    from scipy.stats import t

    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def subset_means(values: list[float]) -> np.ndarray:
    """The means of all 2^n - 1 non-empty subsets of `values`, sorted (float64)."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    if n > EXACT_MAX_N:
        raise ValueError(f"{n} paired values; the exact test enumerates at most {EXACT_MAX_N}")
    masks = (np.arange(1, 2**n)[:, None] >> np.arange(n)) & 1
    return np.sort(masks @ x / masks.sum(axis=1))


@dataclass(frozen=True)
class SignFlip:
    """The exact sign-flip test of one set of paired differences: its n, mean, two-sided p and the interval."""

    n: int
    mean: float
    p: float
    low: float
    high: float


def sign_flip(values: list[float], alpha: float = 0.05) -> SignFlip:
    """The exact two-sided sign-flip p of the mean of `values` and the (1 - alpha) interval that inverts it (module
    docstring). NaN p and interval for n < 1."""
    n = len(values)
    if n == 0:
        return SignFlip(0, math.nan, math.nan, math.nan, math.nan)
    means = subset_means(values)
    means[np.abs(means) <= 1e-12 * float(np.max(np.abs(values)))] = 0.0  # a subset summing to 0 is 0
    upper = (1 + int(np.sum(means <= 0))) / 2**n
    lower = (1 + int(np.sum(means >= 0))) / 2**n
    k = math.floor(alpha * 2**n / 2 + 1e-9)
    low, high = (-math.inf, math.inf) if k == 0 else (float(means[k - 1]), float(means[len(means) - k]))
    return SignFlip(n, float(np.mean(values)), min(1.0, 2 * min(upper, lower)), low, high)


def smallest_p(n: int) -> float:
    """The smallest two-sided p the exact sign-flip test can give with n paired values: 2 / 2^n."""
    return min(1.0, 2.0 / 2**n)


def min_detectable(n: int, sd: float, alpha: float, power: float = 0.8) -> float:
    """The smallest true mean difference detected with probability `power` at two-sided level alpha (module
    docstring); inf where the exact test cannot reach alpha with n values, NaN for n < 2 or a non-finite sd."""
    from scipy.stats import t

    if n < 2 or not math.isfinite(sd):
        return math.nan
    if smallest_p(n) > alpha:
        return math.inf
    return float((t.ppf(1 - alpha / 2, n - 1) + t.ppf(power, n - 1)) * sd / math.sqrt(n))


def fisher_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Fisher's exact two-sided p for k1 of n1 against k2 of n2 (NaN when an arm has no runs)."""
    from scipy.stats import fisher_exact

    if n1 == 0 or n2 == 0:
        return math.nan
    return float(fisher_exact([[k1, n1 - k1], [k2, n2 - k2]], alternative="two-sided").pvalue)


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order; NaN entries are not in the family and stay NaN."""
    family = [(p, i) for i, p in enumerate(pvalues) if not math.isnan(p)]
    family.sort()
    m = len(family)
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(family):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted

"""The statistics of the claims table (docs/study.md, "Statistics"): paired differences over seeds.

- t_interval: mean +- t(0.975, n-1) sd / sqrt(n), the 95% Student-t interval of a mean.
- t_test_p: the two-sided p of the one-sample t-test of mean = 0 (paired differences), t = mean / (sd / sqrt(n)).
  Differences that are all equal (sd = 0: e.g. a binary outcome, "diverged at every seed") leave t undefined; there
  the exact sign-flip p of the same mean stands in, 2 / 2^n (0.25 for n = 3), never a spurious 0.
- sign_flip_p: the exact two-sided sign-flip permutation p of the same mean, over all 2^n sign patterns
  (p = #{patterns with |mean| >= |observed mean|} / 2^n); its smallest value is 2 / 2^n, so it is reported
  where n >= 6 (2 / 64 < 0.05).
- holm: Holm-Bonferroni adjusted p-values over a family of tests (Holm 1979): with the m p-values sorted,
  p_adj(i) = max_{j <= i} min(1, (m - j + 1) p(j)); a test is rejected at level alpha when p_adj <= alpha.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

PERMUTATION_MIN_N = 6  # the smallest n whose exact sign-flip p can fall below 0.05


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


def t_test_p(values: list[float]) -> float:
    """Two-sided p of the one-sample t-test of mean 0 (NaN for n < 2); equal values (sd = 0): the exact sign-flip p."""
    from scipy.stats import t

    n = len(values)
    if n < 2:
        return math.nan
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    if sd == 0 or sd < 1e-12 * abs(mean):
        return sign_flip_p(values, min_n=1)
    return float(2 * t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))


def sign_flip_p(values: list[float], min_n: int = PERMUTATION_MIN_N) -> float:
    """The exact two-sided sign-flip permutation p of the mean (NaN below `min_n` values)."""
    n = len(values)
    if n < min_n:
        return math.nan
    x = np.asarray(values, dtype=np.float64)
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    means = np.abs(signs @ x) / n
    observed = abs(x.mean())
    return float(np.mean(means >= observed - 1e-12 * max(observed, 1.0)))


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

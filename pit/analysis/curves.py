"""Measures of a training-loss curve (one loss per optimizer step) for the stability claims (docs/study.md).

A single step's loss is one batch's: at small batches it moves by several tenths of a nat from batch to batch, so
every measure here works on a smoothed curve and against the noise measured on the same run.

- noise sigma: the per-step loss noise, 1.4826 MAD(diff loss) / sqrt(2) (first differences remove the slow trend;
  the MAD ignores spikes).
- smoothed curve: m_t = mean(loss_{t-w+1..t}), the trailing mean over `window` steps (t >= window).
- early rise: max over the first `fraction` of the steps of m_t - m_w (the rise of the smoothed loss above its
  first smoothed value; 0 when it only falls), its noise floor (the 95th percentile of the same statistic on flat
  curves of iid N(0, sigma^2) losses of the same length, seeded), and the excess max(0, rise - floor): ~0 on a
  flat noisy curve, > 0 only for a rise the batch noise does not explain.
- spikes: episodes (runs of consecutive steps) whose finite loss exceeds the median of the previous `window` finite
  losses by more than `k` sigma, after warmup; non-finite steps are not spikes (they are skipped steps, counted on
  their own, and a run that ends in them has diverged).
- max rise: max over t after warmup of m_t - min_{s <= t} m_s, the largest regression of the smoothed loss above
  its best value so far (nats).
"""

from __future__ import annotations

import math

import numpy as np

NOISE_DRAWS = 2000  # flat curves simulated for the early-rise noise floor
NOISE_QUANTILE = 0.95


def finite(losses) -> np.ndarray:
    x = np.asarray(losses, dtype=np.float64)
    return x[np.isfinite(x)]


def noise_sigma(losses) -> float:
    """1.4826 MAD(first differences) / sqrt(2): the per-step noise of a curve (NaN below 3 finite losses)."""
    x = finite(losses)
    if len(x) < 3:
        return math.nan
    d = np.diff(x)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2))


def smoothed(losses, window: int) -> np.ndarray:
    """Trailing means m_t over `window` steps, for t = window..T (len T - window + 1; empty when T < window)."""
    x = np.asarray(losses, dtype=np.float64)
    if len(x) < window:
        return np.empty(0)
    c = np.concatenate([[0.0], np.cumsum(x)])
    return (c[window:] - c[:-window]) / window


def rise_statistic(losses, window: int) -> float:
    """max_t m_t - m_window over a stretch of losses (0 when the smoothed curve never rises above its start)."""
    m = smoothed(losses, window)
    return float(max(0.0, (m - m[0]).max())) if len(m) else math.nan


def early_window(steps: int, fraction: float, window: int) -> int:
    """Steps in the early window: ceil(fraction x steps), at least two smoothing windows."""
    return max(math.ceil(fraction * steps), 2 * window)


def noise_floor(sigma: float, length: int, window: int, seed: int = 0) -> float:
    """The NOISE_QUANTILE of rise_statistic on flat curves of `length` iid N(0, sigma^2) losses."""
    if not math.isfinite(sigma) or length < window:
        return math.nan
    rng = np.random.default_rng(seed)
    draws = rng.normal(0.0, sigma, size=(NOISE_DRAWS, length))
    c = np.concatenate([np.zeros((NOISE_DRAWS, 1)), np.cumsum(draws, axis=1)], axis=1)
    m = (c[:, window:] - c[:, :-window]) / window
    return float(np.quantile(np.maximum(0.0, (m - m[:, :1]).max(axis=1)), NOISE_QUANTILE))


def early_rise(losses, fraction: float = 0.1, window: int = 10) -> dict:
    """{early_rise, early_rise_noise, early_rise_excess, loss_noise} of a curve (module docstring); the early
    window is early_window(len(losses), fraction, window) steps."""
    x = np.asarray(losses, dtype=np.float64)
    length = min(len(x), early_window(len(x), fraction, window))
    head = x[:length]
    sigma = noise_sigma(x)
    rise = rise_statistic(head[np.isfinite(head)], window)
    floor = noise_floor(sigma, length, window)
    return {
        "early_rise": rise,
        "early_rise_noise": floor,
        "early_rise_excess": max(0.0, rise - floor) if math.isfinite(rise) and math.isfinite(floor) else math.nan,
        "loss_noise": sigma,
    }


def spikes(losses, warmup: int = 0, window: int = 20, k: float = 5.0) -> int:
    """Spike episodes after warmup (module docstring); non-finite losses are not spikes."""
    x = np.asarray(losses, dtype=np.float64)
    sigma = noise_sigma(x)
    flags = []
    for t in range(max(warmup, window), len(x)):
        past = finite(x[t - window : t])
        flags.append(
            math.isfinite(x[t]) and len(past) > 0 and math.isfinite(sigma) and x[t] - np.median(past) > k * sigma
        )
    return sum(1 for i, f in enumerate(flags) if f and (i == 0 or not flags[i - 1]))


def max_rise(losses, warmup: int = 0, window: int = 10) -> float:
    """max over t after warmup of m_t - min_{s <= t} m_s on the smoothed curve (NaN when it is too short); non-finite
    losses are left out."""
    m = smoothed(finite(losses), window)
    if len(m) == 0:
        return math.nan
    regress = m - np.minimum.accumulate(m)
    start = max(0, warmup - window + 1)
    return float(regress[start:].max()) if len(regress) > start else math.nan

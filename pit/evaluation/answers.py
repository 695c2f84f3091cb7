"""Final numeric answers of math word problems (GSM8K, SVAMP): extraction and comparison.

The answer of a text is, in this order of preference, the first number after the last "####"
(GSM8K's answer marker), the first number after the last "answer is", or else the last number in
the text. Numbers may carry a sign, a "$", thousands separators ("1,234"), decimals ("42.0") and an
exponent ("2e3"); "3/4" is read as 0.75. A number a float cannot hold (beyond about 1.8e308: "1e999",
400 digits, or a fraction whose denominator is such a number) is unreadable: when it is the answer,
the text has no answer (it is wrong, whatever the reference); the words "inf" and "nan" are not numbers.
Two answers are equal when both are finite and `math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)`:
42.0 == 42, and float noise in a reference such as SVAMP's "Answer: 2.9999999" is forgiven.
"""

from __future__ import annotations

import math
import re

NUMBER = re.compile(
    r"(?<![\w.])([-−]?)\s?\$?\s?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?([eE][-+]?\d+)?(?:\s?/\s?(\d+)(?![\d.]))?"
)
MARKERS = (re.compile(r"####"), re.compile(r"answer is", re.IGNORECASE))
REL_TOL = ABS_TOL = 1e-6


def numbers(text: str) -> list[float]:
    """All numbers in `text`, in order; an unreadable one (see the module docstring) is nan. Digits are read by
    `float` (no limit on their count, inf beyond the float range), never by `int`."""
    found = []
    for sign, whole, frac, exponent, denominator in NUMBER.findall(text):
        value, below = float(whole.replace(",", "") + frac + exponent), float(denominator or 0)
        if below != 0:  # "3/0" is read as 3
            value /= below  # an infinite denominator: inf / inf or 0.0, made nan below
            value = value if math.isfinite(below) else math.nan
        found.append(math.nan if not math.isfinite(value) else -value if sign else value)
    return found


def extract_answer(text: str) -> float | None:
    """The final numeric answer of `text` (see the module docstring), or None when it has no (readable) number."""
    for marker in MARKERS:
        hits = list(marker.finditer(text))
        if hits and (after := numbers(text[hits[-1].end() :])):
            return after[0] if math.isfinite(after[0]) else None
    found = numbers(text)
    return found[-1] if found and math.isfinite(found[-1]) else None


def same_number(a: float | None, b: float | None) -> bool:
    """Numeric equality with the module's tolerance; None (no answer), inf and nan never match."""
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return False
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)

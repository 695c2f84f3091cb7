"""Final numeric answers of math word problems (GSM8K, SVAMP): extraction and comparison.

The answer of a text is, in this order of preference, the first number after the last "####"
(GSM8K's answer marker), the first number after the last "answer is", or else the last number in
the text. Numbers may carry a sign, a "$", thousands separators ("1,234") and decimals ("42.0");
"3/4" is read as 0.75. Two answers are equal when `math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)`:
42.0 == 42, and float noise in a reference such as SVAMP's "Answer: 2.9999999" is forgiven.
"""

from __future__ import annotations

import math
import re

NUMBER = re.compile(r"(?<![\w.])([-−]?)\s?\$?\s?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:\s?/\s?(\d+)(?![\d.]))?")
MARKERS = (re.compile(r"####"), re.compile(r"answer is", re.IGNORECASE))
REL_TOL = ABS_TOL = 1e-6


def numbers(text: str) -> list[float]:
    """All numbers in `text`, in order."""
    found = []
    for sign, whole, frac, denominator in NUMBER.findall(text):
        value = float(whole.replace(",", "") + frac)
        if denominator and int(denominator) != 0:
            value /= int(denominator)
        found.append(-value if sign else value)
    return found


def extract_answer(text: str) -> float | None:
    """The final numeric answer of `text` (see the module docstring), or None when it has no number."""
    for marker in MARKERS:
        hits = list(marker.finditer(text))
        if hits and (after := numbers(text[hits[-1].end() :])):
            return after[0]
    found = numbers(text)
    return found[-1] if found else None


def same_number(a: float | None, b: float | None) -> bool:
    """Numeric equality with the module's tolerance; None (no answer) never matches."""
    return a is not None and b is not None and math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)

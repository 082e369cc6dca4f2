"""Small statistics shared by the layers that measure: the Wilson score interval."""

from __future__ import annotations

import math

Z_95 = 1.959963984540054


def wilson(successes: int, runs: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95% by default); (0, 1) without runs."""
    if runs <= 0:
        return 0.0, 1.0
    p = successes / runs
    denominator = 1 + z * z / runs
    centre = (p + z * z / (2 * runs)) / denominator
    half = z * math.sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs)) / denominator
    low = 0.0 if successes <= 0 else max(0.0, centre - half)  # exact at the ends, no float dust
    high = 1.0 if successes >= runs else min(1.0, centre + half)
    return low, high

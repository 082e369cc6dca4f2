"""A measured size as a person reads it (`1.2GB`): for `status` and the housekeeper alike."""

from __future__ import annotations


def human_size(n: int) -> str:
    """`1.2GB`: a measured size, rounded for a person (decimal units, as configuration)."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000:
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1000
    return f"{value:.1f}TB"

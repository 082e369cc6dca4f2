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


# What one file, folder or link costs a disk at least (a block): `max_tree` and `max_tmp`
# count each entry so, so that 100,000 empty files are 400MB, not nothing.
ENTRY_BYTES = 4096


def on_disk(size: int) -> int:
    """What an entry of `size` bytes counts against a bound: whole 4 KiB blocks, one at least."""
    return max(ENTRY_BYTES, -(-size // ENTRY_BYTES) * ENTRY_BYTES)

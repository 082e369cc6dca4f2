"""The arms of an experiment: all supports, then one arm per support removed."""

from __future__ import annotations

import math
from dataclasses import dataclass

# What a run gives the agent besides the task, and what removing each one means:
# rules: no rule selection (no `# Rules from earlier runs`, no refusing rule);
# progress: no `# Progress so far`; feedback: no `# What failed last time` and no
# `# Reviewer feedback` between attempts; nudges: `max_nudges = 0`.
SUPPORTS = ("rules", "progress", "feedback", "nudges")
Z_95 = 1.959963984540054


@dataclass(frozen=True)
class Arm:
    """One arm: its name ("all" or "no-SUPPORT") and the supports it goes without."""

    name: str
    without: tuple[str, ...] = ()


def parse_supports(text: str) -> list[str]:
    """`rules,progress` as a list; ValueError naming the allowed ones for anything else."""
    wanted = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in wanted if part not in SUPPORTS]
    if unknown:
        raise ValueError(
            f"unknown support {unknown[0]!r}; --without takes a comma-separated list of "
            + ", ".join(SUPPORTS)
        )
    if not wanted:
        raise ValueError("--without names no support; e.g. --without rules,nudges")
    return list(dict.fromkeys(wanted))


def arms_for(without: list[str]) -> list[Arm]:
    """All supports, then one arm per removed support, in the order given."""
    return [Arm("all")] + [Arm(f"no-{support}", (support,)) for support in without]


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

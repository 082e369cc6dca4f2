"""The arms of an experiment: all supports, then one arm per support removed."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.stats import Z_95, wilson

# What a run gives the agent besides the task, and what removing each one means:
# rules: no rule selection (no `# Rules from earlier runs`, no refusing rule);
# progress: no `# Progress so far`; feedback: no `# What failed last time` and no
# `# Reviewer feedback` between attempts; nudges: `max_nudges = 0`.
SUPPORTS = ("rules", "progress", "feedback", "nudges")
__all__ = ["SUPPORTS", "Z_95", "Arm", "arms_for", "parse_supports", "wilson"]


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

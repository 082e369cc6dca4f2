"""The report's lines of what held runs back: spent budgets and usage-limit waits."""

from __future__ import annotations

from typing import Any


def _budget_line(event: dict[str, Any]) -> str:
    scope = f"loop {event.get('loop')}" if event.get("loop") else "the home"
    return (
        f"{str(event.get('ts', ''))[:16]}Z budget of {scope} spent: {event.get('tokens')} of "
        f"{event.get('limit')} tokens on {event.get('day')}; new runs waited until "
        f"{str(event.get('until', ''))[:16]}"
    )


def _quota_line(event: dict[str, Any]) -> str:
    return (
        f"{str(event.get('ts', ''))[:16]}Z {event.get('loop')} run {event.get('run')} parked on "
        f"the usage limit of {event.get('profile')!r} until {str(event.get('resume_at'))[:16]}"
    )


HOLD_EVENTS = {"budget_exhausted": _budget_line, "quota_wait": _quota_line}

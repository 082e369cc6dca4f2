"""A run's aftermath state from what was found (pure), and the windows it is kept at."""

from __future__ import annotations

from datetime import datetime, timedelta

from daemon.state.aftermath import WINDOWS, Aftermath, AftermathState, WindowMark

MOSTLY = 0.5  # "most of its lines removed": more than this share gone, by removals


def verdict(record: Aftermath, until: datetime | None = None) -> AftermathState:
    """kept, edited or reverted, from the person's commits (those dated up to `until`) and the
    lines still there; `gone` and `pending` are decided by the follower, from the target."""
    theirs = [c for c in record.commits if until is None or c.date <= until]
    if any(c.revert for c in theirs):
        return "reverted"
    landed, kept = record.lines_landed, record.lines_kept
    removed = sum(c.removed - c.added for c in theirs)
    if landed and (landed - kept) > MOSTLY * landed and removed > MOSTLY * landed:
        return "reverted"
    if theirs and kept < landed:
        return "edited"
    return "kept"


def changed_share(record: Aftermath) -> float:
    """The share of the run's lines no longer there as landed."""
    if not record.lines_landed:
        return 0.0
    return max(0, record.lines_landed - record.lines_kept) / record.lines_landed


def mark_windows(record: Aftermath, now: datetime) -> list[str]:
    """Keep the state of each window reached by `now` and not kept yet; the windows kept."""
    marked = []
    for name, days in WINDOWS:
        deadline = record.landed_at + timedelta(days=days)
        if name in record.windows or now < deadline:
            continue
        state = record.state if record.state in ("gone", "pending") else verdict(record, deadline)
        record.windows[name] = WindowMark(
            state=state,
            checked_at=now,
            lines_kept=record.lines_kept,
            commits=sum(1 for c in record.commits if c.date <= deadline),
        )
        marked.append(name)
    return marked


def due(record: Aftermath, now: datetime) -> bool:
    """Whether a window has been reached that is not kept yet. The windows grow longer, so
    the first not kept decides (asked of every followed run at every look: one sum)."""
    for name, days in WINDOWS:
        if name not in record.windows:
            return now >= record.landed_at + timedelta(days=days)
    return False

"""The daemon's console: one line per run start, end and escalation, for a person watching
`loopd run` in a terminal (the event log and state/ hold the rest)."""

from __future__ import annotations

import sys
from typing import TextIO

from daemon.people.digest import one_line
from daemon.people.terminal import clean
from daemon.state.records import RunRecord, escalates, is_experiment


def started_line(run: RunRecord) -> str:
    """The line of a run that starts (or resumes after a restart)."""
    why = f": {one_line(run.trigger.reason, 80)}" if run.trigger.reason else ""
    return clean(f"loopd: run {run.id} started (loop {run.loop}, {run.trigger.kind}{why})")


def ended_lines(run: RunRecord) -> list[str]:
    """The line of a run that ended, and one more when it was escalated."""
    if run.outcome is None:
        return [clean(f"loopd: run {run.id} stopped in phase {run.phase}; it resumes later")]
    reason = f": {one_line(run.reason, 160)}" if run.reason else ""
    lines = [f"loopd: run {run.id} ended {run.outcome}{reason}"]
    if escalates(run.outcome, run.cause) and not is_experiment(run):
        lines.append(_escalated_line(run))
    return [clean(line) for line in lines]


def _escalated_line(run: RunRecord) -> str:
    """Where the person finds the escalation: the run's own file, or the open one a repeat
    counted in (a repeat files none of its own), or only the run when none was written."""
    head = f"loopd: run {run.id} escalated ({run.cause or 'unknown'}): "
    held = run.escalation
    if not held:  # not written (state/ full, a crash before it): the record alone
        return head + f"no escalation file yet; `loopd show {run.id}`"
    if held != run.id:
        return (
            head + f"counted in open escalation {held}, state/escalations/{held}.md, "
            f"or `loopd show {run.id}`"
        )
    return head + f"state/escalations/{run.id}.md, or `loopd show {run.id}`"


def say(lines: list[str], out: TextIO | None = None) -> None:
    """Print `lines` at once (a console read live)."""
    stream = out or sys.stdout
    for line in lines:
        print(line, file=stream, flush=True)

"""How an attempt's sessions ended, beyond its record (runs/sessions.py makes it; the attempt,
judging and the Temporal worker read it), and what a tree counts against a size bound."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.runparts.checks import ChecksResult
from daemon.sizes import ENTRY_BYTES, on_disk
from daemon.state.records import AttemptRecord


@dataclass
class CheckedCommit:
    """Checks that ran on a commit at the end of a session; judging reuses them."""

    commit: str
    checks: ChecksResult


def tree_size(path: Path, stop_past: int) -> int:
    """What the files, folders and links under `path` count against a size bound (each
    entry at least 4 KiB: `sizes.on_disk`; links not followed), counting stopped once past
    `stop_past`."""
    total = 0
    for root, dirs, files in os.walk(path):
        total += ENTRY_BYTES * len(dirs)
        for name in files:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += on_disk(info.st_size if stat.S_ISREG(info.st_mode) else 0)
            if total > stop_past:
                return total
    return total


@dataclass
class AttemptResult:
    """How the attempt ended, beyond its record."""

    record: AttemptRecord
    start_error: str = ""  # the agent could not be started
    over_budget: bool = False  # the run's tokens passed max_tokens
    quota_exceeded: str = ""  # why the usage limit outlasts max_wait: the run escalates
    login_refused: str = ""  # the agent's words for its refused login: the run escalates
    # The agent gave up again after its one nudge (or with none left): why, in its words.
    gave_up: str = ""
    # A check failed as on the base for the environment's sake: the run's reason (cause
    # `environment`, runs/sameoutput.py).
    environment: str = ""
    checked: CheckedCommit | None = None
    parked: bool = False  # parked on a usage limit, the wait left to the engine (engine_waits)
    quota_hold: Any = None  # the QuotaHold of the usage limit it ended on, if any
    agent_ended: bool = False  # the last session's agent ended by itself (loopd killed none)
    # It ended so while loopd was stopping, within the grace: the attempt ended as any other
    # and is judged (its checks run) with the time left, not recorded interrupted.
    ended_in_grace: bool = False

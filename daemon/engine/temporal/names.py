"""Names on the engine: workflow and schedule ids, task queues. Pure; no Temporal import."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

HOME_WORKFLOW_ID = "loopd/.home"  # loop names cannot start with a dot
DEFAULT_QUEUE = "default"  # the worker queue of loops without `runs_on`


def controller_id(loop: str) -> str:
    """The one workflow per loop that receives every trigger."""
    return f"loopd/{loop}"


def run_workflow_id(loop: str, run_id: str) -> str:
    return f"loopd/{loop}/{run_id}"


def run_prefix(loop: str) -> str:
    return f"loopd/{loop}/"


def schedule_id(loop: str) -> str:
    """The loop's Temporal Schedule (its cron in the loop's time zone)."""
    return f"loopd/{loop}"


def dst_schedule_id(loop: str) -> str:
    """Fires around daylight-saving changes that the loop's cron makes and Temporal would not."""
    return f"loopd/{loop}/dst"


def fire_id(loop: str) -> str:
    """The Fire workflow a schedule starts (the server appends the fire's time)."""
    return f"loopd/{loop}/fire"


def worker_queue(task_queue: str, runs_on: str) -> str:
    """The queue whose workers run a loop's attempts: `loopd-NAME`, `loopd-default`."""
    return f"{task_queue}-{runs_on or DEFAULT_QUEUE}"


def worker_id(home: Path) -> str:
    """This machine and home, stable across restarts: a worker comes back to its own queue."""
    digest = hashlib.sha256(f"{socket.gethostname()}:{home.resolve()}".encode()).hexdigest()
    return f"{socket.gethostname()[:24]}-{digest[:8]}"


def own_queue(shared: str, worker: str) -> str:
    """One worker's own queue: the steps that need its files (checks, post-mortem) go here."""
    return f"{shared}@{worker}"

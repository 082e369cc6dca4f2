"""What `trigger` and `escalations resolve --retry` print of a trigger file the daemon takes:
the RUN_ID it queued (or joined) it as, on the first line."""

from __future__ import annotations

import time
from typing import Any

from daemon.cli.common import daemon_pid
from daemon.home import Home
from daemon.state.eventtypes import Event

# How long `trigger` and `escalations resolve --retry` wait for the daemon to take the file.
TAKE_TIMEOUT = 30.0


def await_run_id(home: Home, tail: Any, inbox_id: str, timeout: float = TAKE_TIMEOUT) -> Any:
    """The daemon's `trigger` or `trigger_skipped` event for inbox file `inbox_id`, or None
    when no daemon takes it within `timeout` seconds (or none runs)."""
    deadline = time.monotonic() + timeout
    while True:
        for event in tail.read():
            if event.get("inbox") != inbox_id:
                continue
            if event.get("type") == Event.TRIGGER_SKIPPED:
                return event
            if event.get("type") == Event.TRIGGER and event.get("run"):
                return event
        if daemon_pid(home) is None or time.monotonic() > deadline:
            return None
        time.sleep(0.1)


def report_run_id(home: Home, tail: Any, inbox_id: str, loop: str) -> int:
    """Print the RUN_ID the daemon queued (or joined) for a trigger file, on the first line."""
    pid = daemon_pid(home)
    if pid is None:
        print(
            f"queued state/inbox/{inbox_id} for {loop}; no daemon is running, so it has no "
            f"RUN_ID yet: `loopd --home {home.root} run` takes it and gives it one "
            "(`loopd runs` then lists it)"
        )
        return 0
    event = await_run_id(home, tail, inbox_id)
    if event is None:
        print(
            f"queued state/inbox/{inbox_id} for {loop}; the daemon (pid {pid}) has not taken it "
            f"yet: `loopd runs {loop}` lists it with its RUN_ID once it has"
        )
        return 0
    if event.get("type") == Event.TRIGGER_SKIPPED:
        print(f"the daemon skipped the trigger for {loop}: {event.get('why', 'overlap policy')}")
        return 1
    run_id = event["run"]
    print(run_id, flush=True)
    how = "joined the run already queued" if event.get("joined") else "queued"
    print(f"{how} for {loop} (daemon pid {pid}); `loopd logs {run_id} -f` follows it")
    return 0

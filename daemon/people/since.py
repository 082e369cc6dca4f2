"""What happened since a moment: the events and the runs of a report's window."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from daemon.state.events import iso
from daemon.state.store import StateStore

# A run that started this long before `since` may still have finished inside the window.
_RUN_LOOKBACK = timedelta(days=1)


def events_since(store: StateStore, since: datetime) -> list[dict[str, Any]]:
    """Events at or after `since`, reading each file once and parsing only lines in range."""
    since_text = iso(since)
    current = store.events.path
    files = [current]
    rotated = sorted(
        current.parent.glob("events-*.jsonl"),
        key=lambda p: int(p.stem.split("-")[1]) if p.stem.split("-")[1].isdigit() else 0,
    )
    try:
        with current.open("rb") as fh:
            first = fh.readline()
        first_ts = first[8:35].decode("ascii", "replace") if first.startswith(b'{"ts": "') else ""
    except OSError:
        first_ts = ""
    if rotated and (not first_ts or first_ts > since_text):
        files.insert(0, rotated[-1])  # the window reaches back into the last rotated file
    out = []
    for path in files:
        try:
            fh = path.open("rb")
        except OSError:
            continue
        with fh:
            for raw in fh:
                if (
                    raw.startswith(b'{"ts": "')
                    and raw[8:35].decode("ascii", "replace") < since_text
                ):
                    continue
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                if str(event.get("ts", "")) >= since_text:
                    out.append(event)
    return out


def run_ids_since(store: StateStore, since: datetime) -> list[str]:
    """The ids of the runs that may have started or finished at or after `since`."""
    floor = (since - _RUN_LOOKBACK).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return [i for i in store.run_ids() if i[:16] >= floor]

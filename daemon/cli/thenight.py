"""`loopd runs --night DATE`: a night as `loopd report` counts it, noon to noon in the home's
`[limits] timezone` (report_nights.night_of), and the runs that began in it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from daemon.cli.common import CommandError
from daemon.people.report_nights import NOON, night_of
from daemon.state.runids import listed_run_ids

# A run's id is stamped when it is queued (UTC, `YYYYMMDDTHHMMSSZ-...`); it starts then or
# later, never before. Ids from the night's end on are not read, nor ids older than SLACK
# before its start: a run that waited in the queue longer than that is not listed.
SLACK = timedelta(hours=12)


class Night:
    """One night in one zone: its bounds, and the runs that began in it."""

    def __init__(self, day: date, tz: tzinfo | None) -> None:
        self.day, self.tz = day, tz
        start = datetime.combine(day, time(), tzinfo=tz) + NOON
        if tz is None:
            start = start.replace(tzinfo=None).astimezone()  # the machine's zone, as the report
        self.start, self.end = start, start + timedelta(days=1)

    @classmethod
    def parse(cls, text: str, loaded: Any) -> Night:
        """`--night YYYY-MM-DD` in the home's zone; a usage error naming the form."""
        try:
            day = date.fromisoformat(text)
        except ValueError:
            raise CommandError(f"--night {text!r}: write a date, e.g. --night 2026-03-11") from None
        zone = getattr(loaded.daemon.limits, "timezone", "") if loaded.daemon_ok else ""
        return cls(day, ZoneInfo(zone) if zone else None)

    def holds(self, moment: datetime) -> bool:
        return night_of(moment, self.tz) == self.day

    def runs(self, store: Any, loop: str | None) -> Iterator[Any]:
        """The night's readable runs, newest first, reading only the ids near it."""
        low = (self.start - SLACK).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        high = self.end.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        for run_id in reversed(listed_run_ids(store.runs_dir, loop)):
            stamp = run_id[:16]
            if stamp >= high:
                continue
            if stamp < low:
                break  # ids sort by time: every later one is older still
            try:
                run = store.load_run(run_id)
            except (FileNotFoundError, OSError, ValueError):
                continue
            if run.started is not None and self.holds(run.started):
                yield run

"""The cron timer: which scheduled fires are due, missed or caught up, persisted across restarts.

Per loop it keeps one cursor, `handled_until`: every scheduled fire at or before it has been
handled (turned into a trigger, or reported missed). The cursor is written to
`state/schedule.toml` before a trigger is handed out, so a restart never fires twice.
"""

from __future__ import annotations

import threading
import tomllib
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import tomli_w

from daemon.config import LoopConfig
from daemon.regularfile import STATE_MAX, read_regular
from daemon.scheduling.cron import Schedule
from daemon.state.atomic import write_atomic
from daemon.state.events import iso
from daemon.state.records import Trigger
from daemon.state.store import UnreadableFile, warn_on_stderr

# A fire this late at a tick still runs as `schedule`; later than this the daemon was
# stalled or the machine slept, and the fire is a miss that `catch_up` may run once.
LATE_GRACE = timedelta(minutes=1)
# A cursor further ahead of now than this means the wall clock stepped back (an NTP
# correction, a wrong clock set right): the schedule goes on from the new now, with a
# `clock_stepped_back` event. A smaller step keeps the cursor, so a fire just handled is never
# fired again by a clock that wobbled back a few minutes.
STEP_BACK_TOLERANCE = timedelta(minutes=15)
# How long before its fire the daemon's timer hands out a scheduled run (`loopd run` passes
# it; 0 fires at the second): the run's tree, its sandbox and the agent's process are made
# meanwhile, and the agent is let go at the scheduled second (runs/sessions.py), so a fire's
# agent starts within milliseconds of it whatever the preparing costs.
FIRE_LEAD = timedelta(seconds=5)
# At most this many misses are listed per loop per call; the last one listed says `more`.
MISSED_LIMIT = 1000
# Windows searched backwards for the latest fire before now; each holds few fires.
_LATEST_SPANS = (
    timedelta(minutes=1),
    timedelta(hours=1),
    timedelta(days=1),
    timedelta(days=31),
    timedelta(days=366),
)
_NO_LIMIT = 10_000_000
_HEADER = (
    "# Written by loopd. Every scheduled fire of a loop at or before its handled_until\n"
    "# has been run, caught up or reported missed; a restart never fires it again.\n"
)


class Fired(NamedTuple):
    """One loop's outcome of a timer call: at most one trigger, and the misses to record."""

    trigger: Trigger | None
    missed: list[dict[str, Any]]  # fields of one `schedule_missed` event each (with `loop`)


class _Entry:
    """One scheduled loop: its schedule, catch-up window and cursor."""

    def __init__(self, config: LoopConfig, handled_until: datetime) -> None:
        self.key = (tuple(config.schedule), config.timezone)
        self.schedule = Schedule(config.schedule, config.timezone)
        self.catch_up = config.catch_up
        self.handled_until = handled_until
        self.next_fire = self.schedule.next_fire(handled_until)

    def advance(self, handled_until: datetime) -> None:
        self.handled_until = max(self.handled_until, handled_until)
        self.next_fire = self.schedule.next_fire(self.handled_until)


class CronTimer:
    """Scheduled fires of every loop with a `schedule`; the clock is passed in."""

    def __init__(
        self,
        state_path: Path,
        warn: Callable[[UnreadableFile], None] = warn_on_stderr,
        lead: timedelta = timedelta(0),
    ) -> None:
        self.path = state_path
        self.warn = warn  # told when the cursor file cannot be read
        self.lead = lead  # a fire is handed out this early, its trigger `not_before` it
        self._entries: dict[str, _Entry] = {}
        self._missed: list[dict[str, Any]] = []
        self._stepped: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    # the daemon's calls ----------------------------------------------------------
    def start(self, loops: Mapping[str, LoopConfig], now: datetime) -> list[Fired]:
        """On daemon start: report fires missed while loopd was down, catch up the latest.

        A loop seen for the first time starts from `now` (nothing missed). For the others,
        every fire in (handled_until, now] is a miss; when the latest is within `catch_up`,
        one `catch-up` trigger is produced for the loop, however many were missed.
        """
        stored = self._read()
        out: list[Fired] = []
        with self._lock:
            self._entries = {}
            for name, config in loops.items():
                if not (config.enabled and config.schedule):
                    continue
                # A new loop starts from now. A cursor a little ahead of now (the clock went
                # back a few minutes) is kept: those fires were handled already.
                entry = _Entry(config, stored.get(name, now))
                self._entries[name] = entry
                self._step_back(name, entry, now)
                fired = self._handle(name, entry, now, on_time=False)
                if fired.trigger is not None or fired.missed:
                    out.append(fired)
                entry.advance(now)
            self._write()
        return out

    def due(self, now: datetime) -> list[Trigger]:
        """Each tick: one `schedule` trigger per loop whose next fire is <= now.

        Several fires since the last tick give one trigger (the latest); the earlier ones
        are misses. A latest fire more than LATE_GRACE old (the daemon stalled, the machine
        slept) is a miss too, caught up as at start when within `catch_up`. Misses wait in
        `take_missed()`. A fire at most `lead` ahead is handed out now, as a trigger that
        runs `not_before` it (its cursor moves to the fire). The cursor is written before the
        triggers are returned.
        """
        out: list[Trigger] = []
        with self._lock:
            handled = False
            for name, entry in self._entries.items():
                handled = self._step_back(name, entry, now) or handled
                if entry.next_fire is None:
                    continue
                if entry.next_fire > now:
                    if entry.next_fire - now <= self.lead:
                        out.append(self._ahead(name, entry, now))
                        handled = True
                    continue
                fired = self._handle(name, entry, now, on_time=True)
                entry.advance(now)
                handled = True
                self._missed.extend(fired.missed)
                if fired.trigger is not None:
                    out.append(fired.trigger)
            if handled:
                self._write()  # before the triggers leave: no double fire after a crash
        return out

    def take_missed(self) -> list[dict[str, Any]]:
        """Misses found by `due` since the last call: one `schedule_missed` event each."""
        with self._lock:
            missed, self._missed = self._missed, []
        return missed

    def take_stepped(self) -> list[dict[str, Any]]:
        """Cursors moved back to a clock that stepped back: one `clock_stepped_back` event each."""
        with self._lock:
            stepped, self._stepped = self._stepped, []
        return stepped

    def update(self, loops: Mapping[str, LoopConfig], now: datetime) -> None:
        """The configuration was reloaded: new or changed schedules start from now."""
        with self._lock:
            before = {name: entry.handled_until for name, entry in self._entries.items()}
            entries: dict[str, _Entry] = {}
            for name, config in loops.items():
                if not (config.enabled and config.schedule):
                    continue
                old = self._entries.get(name)
                key = (tuple(config.schedule), config.timezone)
                if old is not None and old.key == key:
                    entry = _Entry(config, old.handled_until)  # catch_up may have changed
                else:
                    entry = _Entry(config, now)
                entries[name] = entry
            self._entries = entries
            after = {name: entry.handled_until for name, entry in entries.items()}
            if after != before:
                self._write()

    def next_wake(self) -> datetime | None:
        """When `due` next has a fire to hand out (UTC): the earliest next fire of any loop,
        less the lead. The driver's timer is armed for it."""
        with self._lock:
            fires = [e.next_fire for e in self._entries.values() if e.next_fire is not None]
        return min(fires) - self.lead if fires else None

    def next_fire(self, loop: str) -> datetime | None:
        """The loop's next scheduled fire (UTC), for status; None when it has no schedule."""
        with self._lock:
            entry = self._entries.get(loop)
            return entry.next_fire if entry else None

    # internals -------------------------------------------------------------------
    def _step_back(self, name: str, entry: _Entry, now: datetime) -> bool:
        """A cursor far ahead of now: the clock stepped back; go on from now (True if so)."""
        if entry.handled_until - now <= STEP_BACK_TOLERANCE:
            return False
        self._stepped.append(
            {"loop": name, "handled_until": iso(entry.handled_until), "clock": iso(now)}
        )
        entry.handled_until = now
        entry.next_fire = entry.schedule.next_fire(now)
        return True

    def _ahead(self, name: str, entry: _Entry, now: datetime) -> Trigger:
        """The loop's next fire, a moment ahead: its trigger, to run not before it."""
        fire = entry.next_fire
        assert fire is not None
        entry.advance(fire)
        reason = f"scheduled for {_local(entry, fire)}"
        return Trigger(loop=name, kind="schedule", reason=reason, ts=now, not_before=fire)

    def _handle(self, name: str, entry: _Entry, now: datetime, on_time: bool) -> Fired:
        """Fires in (handled_until, now]: at most one trigger, every other one a miss."""
        since = entry.handled_until
        latest = _latest_fire(entry.schedule, since, now)
        if latest is None:
            return Fired(None, [])
        listed = entry.schedule.fires_between(since, now, limit=MISSED_LIMIT)
        cut = listed[-1] < latest
        local = _local(entry, latest)
        why = "loopd was busy or the machine slept" if on_time else "loopd was not running"
        trigger = None
        if on_time and now - latest <= LATE_GRACE:
            listed = [fire for fire in listed if fire != latest]
            trigger = Trigger(loop=name, kind="schedule", reason=f"scheduled for {local}", ts=now)
        elif now - latest <= entry.catch_up:
            reason = f"catching up the fire of {local}, missed because {why}"
            trigger = Trigger(loop=name, kind="catch-up", reason=reason, ts=now)
        missed: list[dict[str, Any]] = [
            {"loop": name, "fire": iso(fire), "why": why} for fire in listed
        ]
        if cut and missed:
            missed[-1]["unlisted_until"] = iso(latest)  # more misses than MISSED_LIMIT
        return Fired(trigger, missed)

    def _read(self) -> dict[str, datetime]:
        try:
            data = tomllib.loads(read_regular(self.path, cap=STATE_MAX).decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:  # a TOML error, a byte that is not UTF-8
            # Unreadable: start every loop from now. That can miss fires but never repeats one.
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
            self.warn(UnreadableFile(self.path, f"{reason}; every schedule starts from now"))
            return {}
        out: dict[str, datetime] = {}
        for name, entry in (data.get("loops") or {}).items():
            value = entry.get("handled_until") if isinstance(entry, dict) else None
            if isinstance(value, datetime) and value.tzinfo is not None:
                out[name] = value
        return out

    def _write(self) -> None:
        data = {
            "loops": {
                name: {"handled_until": entry.handled_until}
                for name, entry in sorted(self._entries.items())
            }
        }
        write_atomic(self.path, _HEADER + tomli_w.dumps(data))


def _local(entry: _Entry, fire: datetime) -> str:
    """A fire as its reason names it: the minute in the loop's zone."""
    return fire.astimezone(entry.schedule.timezone).isoformat(timespec="minutes")


def _latest_fire(schedule: Schedule, since: datetime, now: datetime) -> datetime | None:
    """The latest fire in (since, now], searched in growing windows back from now."""
    for span in _LATEST_SPANS:
        start = max(since, now - span)
        fires = schedule.fires_between(start, now, limit=_NO_LIMIT)
        if fires:
            return fires[-1]
        if start == since:
            return None
    fires = schedule.fires_between(since, now, limit=_NO_LIMIT)
    return fires[-1] if fires else None

"""Five-field cron with its standard meaning, computed by APScheduler 3's CronTrigger.

APScheduler numbers weekdays from Monday and requires both day fields to match; standard
cron numbers them from Sunday (0 and 7) and fires when either restricted day field matches.
Each field is expanded here into explicit values, so the translation is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:  # APScheduler is imported where triggers are built: `loopd check` needs none
    from apscheduler.triggers.base import BaseTrigger

_NAMES = {
    "month": ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
    "dow": ["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
}
_FIELDS = (  # name, low, high
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day", 1, 31),
    ("month", 1, 12),
    ("dow", 0, 7),
)
_LABELS = {"day": "day-of-month", "dow": "day-of-week"}  # as error messages name them
_DST_LOOKBACK = timedelta(hours=3)  # longer than any daylight-saving shift
_SECOND = timedelta(seconds=1)
_APS_DOW = ["sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun"]
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _number(token: str, name: str, field: str) -> int:
    names = _NAMES.get(name)
    if names and token.lower() in names:
        return names.index(token.lower()) + (1 if name == "month" else 0)
    if not token.isdigit():
        raise ValueError(f"{token!r} is not a number in the {field} field")
    return int(token)


def _expand(text: str, name: str, low: int, high: int) -> list[int]:
    values: set[int] = set()
    field = _LABELS.get(name, name)
    for part in text.split(","):
        if not part:
            raise ValueError(f"empty list item in the {field} field")
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"step {step_text!r} in the {field} field must be a number > 0")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            start, end = _number(a, name, field), _number(b, name, field)
        else:
            start = _number(base, name, field)
            end = high if step_text else start
        if not (low <= start <= high and low <= end <= high):
            raise ValueError(f"{part!r} is outside {low}-{high} in the {field} field")
        if start > end:
            raise ValueError(f"range {part!r} runs backwards in the {field} field")
        values.update(range(start, end + 1, step))
    return sorted(values)


def parse_timezone(name: str) -> tzinfo:
    """Resolve an IANA timezone name such as `UTC` or `Europe/Berlin`."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(
            f"unknown timezone {name!r}: use an IANA name such as 'UTC' or 'Europe/Berlin'"
        ) from exc


@dataclass(frozen=True)
class CronExpression:
    """One five-field cron expression in standard meaning."""

    text: str
    minute: tuple[int, ...]
    hour: tuple[int, ...]
    day: tuple[int, ...]
    month: tuple[int, ...]
    dow: tuple[int, ...]  # 0 = Sunday .. 6 = Saturday
    day_restricted: bool
    dow_restricted: bool

    @classmethod
    def parse(cls, text: str) -> CronExpression:
        """Parse `m h dom mon dow`; raise ValueError saying what is wrong."""
        expanded = _MACROS.get(text.strip().lower(), text)
        fields = expanded.split()
        if len(fields) != 5:
            raise ValueError(
                f"cron expression {text!r} has {len(fields)} fields; write five: "
                "minute hour day-of-month month day-of-week, such as '0 2 * * *'"
            )
        parsed = {}
        for (name, low, high), value in zip(_FIELDS, fields, strict=True):
            try:
                parsed[name] = _expand(value, name, low, high)
            except ValueError as exc:
                raise ValueError(f"cron expression {text!r}: {exc}") from None
        dow = sorted({d % 7 for d in parsed["dow"]})
        return cls(
            text=text,
            minute=tuple(parsed["minute"]),
            hour=tuple(parsed["hour"]),
            day=tuple(parsed["day"]),
            month=tuple(parsed["month"]),
            dow=tuple(dow),
            day_restricted=not fields[2].startswith("*"),
            dow_restricted=not fields[4].startswith("*"),
        )

    def trigger(self, timezone: tzinfo) -> BaseTrigger:
        from apscheduler.triggers.combining import OrTrigger
        from apscheduler.triggers.cron import CronTrigger

        """The APScheduler trigger that fires exactly when this expression does."""

        def join(values: tuple[int, ...]) -> str:
            return ",".join(str(v) for v in values)

        common = {
            "minute": join(self.minute),
            "hour": join(self.hour),
            "month": join(self.month),
            "second": "0",
            "timezone": timezone,
        }
        days = join(self.day)
        weekdays = ",".join(_APS_DOW[d] for d in self.dow)
        if self.day_restricted and self.dow_restricted:
            return OrTrigger(
                [
                    CronTrigger(day=days, day_of_week="*", **common),
                    CronTrigger(day="*", day_of_week=weekdays, **common),
                ]
            )
        return CronTrigger(day=days, day_of_week=weekdays, **common)


class Schedule:
    """A loop's cron expressions in its timezone."""

    def __init__(self, expressions: list[str], timezone: str = "UTC") -> None:
        self.timezone = parse_timezone(timezone)
        self.expressions = [CronExpression.parse(e) for e in expressions]
        # Triggers in UTC walk wall-clock time; _next_of reads it in the loop's zone.
        self._triggers = [e.trigger(UTC) for e in self.expressions]

    def next_fire(self, after: datetime) -> datetime | None:
        """The first fire time strictly after `after` (aware), as an aware UTC datetime."""
        after = after.astimezone(UTC)
        fires = [self._next_of(trigger, after) for trigger in self._triggers]
        found = [fire for fire in fires if fire is not None]
        return min(found) if found else None

    def _next_of(self, trigger: BaseTrigger, after: datetime) -> datetime | None:
        # The trigger walks wall-clock time (it runs in UTC, which has no DST), and each wall
        # time is read in the loop's zone as PEP 495's fold=0 does: a repeated wall time
        # fires once, at its first occurrence; one inside a DST gap fires shifted forward by
        # the gap. Gap fires are the only ones that land later than their place in the walk,
        # so near a change the walk starts before it and goes on until no earlier instant
        # can follow. That keeps fires unique, in order, and strictly after `after`.
        tz = self.timezone
        since = after - _DST_LOOKBACK
        if since.astimezone(tz).utcoffset() == after.astimezone(tz).utcoffset():
            since = after
        wall = since.astimezone(tz).replace(tzinfo=None, microsecond=0)
        best: datetime | None = None
        while True:
            fire = trigger.get_next_fire_time(None, (wall + _SECOND).replace(tzinfo=UTC))
            if fire is None:
                return best
            wall = fire.replace(tzinfo=None)
            if best is not None and wall >= best.astimezone(tz).replace(tzinfo=None):
                return best
            instant = wall.replace(tzinfo=tz).astimezone(UTC)
            if instant > after and (best is None or instant < best):
                best = instant

    def fires_between(self, after: datetime, until: datetime, limit: int = 10000) -> list[datetime]:
        """Fire times in (after, until], oldest first, at most `limit`."""
        out: list[datetime] = []
        current = after
        while len(out) < limit:
            fire = self.next_fire(current)
            if fire is None or fire > until:
                break
            out.append(fire)
            current = fire
        return out

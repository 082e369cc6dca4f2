"""Five-field cron with its standard meaning, computed by APScheduler 3's CronTrigger.

APScheduler numbers weekdays from Monday and requires both day fields to match; standard
cron numbers them from Sunday (0 and 7) and fires when either restricted day field matches.
Each field is expanded here into explicit values, so the translation is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger

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


def _number(token: str, field: str, low: int) -> int:
    names = _NAMES.get(field)
    if names and token.lower() in names:
        return names.index(token.lower()) + (1 if field == "month" else 0)
    if not token.isdigit():
        raise ValueError(f"{token!r} is not a number in the {field} field")
    return int(token)


def _expand(text: str, field: str, low: int, high: int) -> list[int]:
    values: set[int] = set()
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
            start, end = _number(a, field, low), _number(b, field, low)
        else:
            start = _number(base, field, low)
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
        self._triggers = [e.trigger(self.timezone) for e in self.expressions]

    def next_fire(self, after: datetime) -> datetime | None:
        """The first fire time strictly after `after` (aware datetimes)."""
        fires = []
        start = after.astimezone(self.timezone) + timedelta(seconds=1)
        start = start.replace(microsecond=0)
        for trigger in self._triggers:
            fire = trigger.get_next_fire_time(None, start)
            if fire is not None:
                fires.append(fire)
        return min(fires) if fires else None

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

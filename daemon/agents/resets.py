"""When a usage limit resets, read from the words an agent CLI ends with.

The forms the agent CLIs use (recorded from the real CLIs or their source):
- Claude Code: "resets 9am (Europe/Berlin)", "resets 6:20pm", "resets Apr 17, 7pm (Asia/Riyadh)",
  "resets Apr 23 at 4pm (America/Recife)", "resets Oct 24", older "Your limit will reset at
  5pm (Europe/Warsaw)." and "Claude AI usage limit reached|1762952400" (epoch seconds);
- Codex: "try again at 12:16 PM.", "try again at Sep 20th, 2026 4:00 PM." (the codex
  process's own zone, none printed), older "try again in 2 days 17 hours 14 minutes.";
- Gemini: "Your quota will reset after 2h52m39s.", "Please retry in 34.07s";
- OpenAI-compatible servers: "Please try again in 20s.", ISO times "reset at
  2026-12-01T09:00:00Z", and a `Retry-After` header's value (seconds or an HTTP date).

A clock time is its next occurrence in the zone named in brackets, else in `zone` (the loop's);
a month and day more than a day in the past is next year's. Relative forms count from `now`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from daemon.retry import parse_retry_after

UTC = ZoneInfo("UTC")
_MONTHS = {
    name: n
    for n, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
_MONTH = r"(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"

_ISO = re.compile(
    r"(?:reset|regain access|try again|retry)[^0-9\n]{0,40}"
    r"(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}(?::\d{2})?)(?:\.\d+)?\s*"
    r"(?P<off>Z|UTC|GMT|[+-]\d{2}:?\d{2})?",
    re.IGNORECASE,
)
_ISO_SPACED = re.compile(
    r"on (?P<date>\d{4}-\d{2}-\d{2}) at (?P<time>\d{2}:\d{2}) (?:UTC|GMT)", re.IGNORECASE
)
_EPOCH = re.compile(r"limit reached\|(?P<epoch>\d{9,11})", re.IGNORECASE)
_RETRY_AFTER = re.compile(
    r"retry-after[\"']?\s*[:=]\s*[\"']?"
    r"(?P<value>\d+(?:\.\d+)?|[A-Z][a-z]{2}, \d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT)",
    re.IGNORECASE,
)
_CODEX_AT = re.compile(
    rf"try again at\s+(?:{_MONTH}\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?,\s*(?P<year>\d{{4}}),?\s+)?"
    r"(?P<h>\d{1,2}):(?P<m>\d{2})\s*(?P<ap>AM|PM)",
    re.IGNORECASE,
)
_WORDS = re.compile(
    r"try again in\s+((?:\d+\s*(?:days?|hours?|minutes?|seconds?)[\s,]*(?:and\s+)?)+)",
    re.IGNORECASE,
)
_WORD_UNITS = {"day": 86400, "hour": 3600, "minute": 60, "second": 1}
_COMPACT = re.compile(
    r"(?:reset after|resets? in|retry in|retry after|try again in)\s+"
    r"((?:\d+(?:\.\d+)?\s?(?:ms|h|m|s)(?![a-z])\s*)+)",
    re.IGNORECASE,
)
_COMPACT_UNITS: dict[str, float] = {"ms": 0.001, "h": 3600, "m": 60, "s": 1}
_CLAUDE = re.compile(
    r"\breset(?:s| at)\s+"
    rf"(?:{_MONTH}\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?,?\s*(?:at\s+)?)?"
    r"(?:(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<ap>am|pm))?"
    r"(?:\s*\((?P<tz>[A-Za-z_+\-0-9/]+)\))?",
    re.IGNORECASE,
)


def zone_named(name: str, fallback: tzinfo) -> tzinfo:
    """The IANA zone `name`, or `fallback` when it names none."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return fallback


def _hour(h: str, ap: str) -> int:
    return int(h) % 12 + (12 if ap.lower() == "pm" else 0)


def _next_at(
    now: datetime,
    zone: tzinfo,
    hour: int,
    minute: int,
    month: int | None = None,
    day: int | None = None,
    year: int | None = None,
) -> datetime | None:
    """The next such wall-clock time in `zone` (this year's date, or next year's if long past)."""
    local = now.astimezone(zone)
    try:
        if month is not None and day is not None:
            when = datetime(year or local.year, month, day, hour, minute, tzinfo=zone)
            if year is None and when < local - timedelta(days=1):
                when = when.replace(year=local.year + 1)
            return when
        when = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    except ValueError:  # Feb 30, hour 25: not a time
        return None
    return when if when > local else when + timedelta(days=1)


def parse_reset(
    text: str, now: datetime, zone: tzinfo, agent_zone: tzinfo | None = None
) -> datetime | None:
    """The moment `text` says the limit resets, or None when it names none.

    `zone` is the loop's time zone (for a clock time without a zone); `agent_zone` the zone
    the agent process runs in (Codex prints its local time without naming it).
    """
    match = _ISO.search(text) or _ISO_SPACED.search(text)
    if match:
        return _iso_moment(match)
    match = _EPOCH.search(text)
    if match:
        return datetime.fromtimestamp(int(match["epoch"]), UTC)
    match = _RETRY_AFTER.search(text)
    if match:
        seconds = parse_retry_after(match["value"], now)
        return None if seconds is None else now + timedelta(seconds=seconds)
    match = _CODEX_AT.search(text)
    if match:
        month = _MONTHS[match["mon"].lower()[:3]] if match["mon"] else None
        return _next_at(
            now,
            agent_zone or zone,
            _hour(match["h"], match["ap"]),
            int(match["m"]),
            month,
            int(match["day"]) if match["day"] else None,
            int(match["year"]) if match["year"] else None,
        )
    match = _WORDS.search(text)
    if match:
        total = sum(
            int(n) * _WORD_UNITS[unit.lower()]
            for n, unit in re.findall(r"(\d+)\s*(day|hour|minute|second)", match[1], re.I)
        )
        return now + timedelta(seconds=total)
    match = _COMPACT.search(text)
    if match:
        seconds = sum(
            float(n) * _COMPACT_UNITS[unit]
            for n, unit in re.findall(r"(\d+(?:\.\d+)?)\s?(ms|h|m|s)(?![a-z])", match[1])
        )
        return now + timedelta(seconds=seconds)
    return _claude_moment(text, now, zone)


def _iso_moment(match: re.Match[str]) -> datetime | None:
    """An ISO date and time (`Z`, `UTC`, `+0100`, `+01:00` or no offset: UTC), or None."""
    offset = (match.groupdict().get("off") or "UTC").upper()
    offset = "+00:00" if offset in ("Z", "UTC", "GMT") else offset
    if len(offset) == 5:  # +0100
        offset = f"{offset[:3]}:{offset[3:]}"
    try:
        return datetime.fromisoformat(f"{match['date']}T{match['time']}{offset}")
    except ValueError:
        return None


def _claude_moment(text: str, now: datetime, zone: tzinfo) -> datetime | None:
    """The first clock time or date in Claude's words (`resets 3pm (Europe/Paris)`), or None."""
    for match in _CLAUDE.finditer(text):
        if not (match["h"] or match["mon"]):
            continue
        where = zone_named(match["tz"], zone) if match["tz"] else zone
        hour = _hour(match["h"], match["ap"]) if match["h"] else 0
        month = _MONTHS[match["mon"].lower()[:3]] if match["mon"] else None
        return _next_at(
            now,
            where,
            hour,
            int(match["m"] or 0),
            month,
            int(match["day"]) if match["day"] else None,
        )
    return None

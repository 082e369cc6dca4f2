"""The one real clock; everything else takes `now` or a clock passed in from here."""

from __future__ import annotations

import os
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def utc_now() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


def local_zone(environ: dict[str, str] | None = None) -> tzinfo:
    """This machine's time zone (or `TZ`'s), with its daylight saving rules where known."""
    env = os.environ if environ is None else environ
    names = [env.get("TZ", "").lstrip(":")]
    try:
        target = os.path.realpath("/etc/localtime")
        if "/zoneinfo/" in target:
            names.append(target.split("/zoneinfo/", 1)[1])
    except OSError:
        pass
    for name in names:
        if name:
            try:
                return ZoneInfo(name)
            except (ZoneInfoNotFoundError, ValueError):
                continue
    return datetime.now().astimezone().tzinfo or UTC

"""What a client of the listener sends, kept small: its text capped, its refusals sampled.

Nothing a client sends before its signature is checked may grow `state/` without bound:

- every string it chose (a repository name, a delivery id, a ref, a forwarded address) is
  cut to `MAX_SHOWN` printable characters (the rest said as a count) and redacted before it
  reaches an event, a log line or an answer (`shown`);
- refusals are sampled (`RefusalSampler`): per window of `WINDOW` seconds and per service
  and status, the first `SAMPLED` are written as `webhook_refused` events and the rest only
  counted; once the window is over (at the next refusal or the daemon's next tick) their
  number is written as one `webhook_refusals_counted` event. /metrics counts every one.

So a flood of any size writes at most `SAMPLED + 1` events per service, status and window.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from daemon.redact import redact

MAX_SHOWN = 120  # characters of a client's string kept in an event or an answer
WINDOW = 60.0  # seconds
SAMPLED = 10  # refusals written whole per service, status and window


def shown(value: str, cap: int = MAX_SHOWN) -> str:
    """A client's string as loopd writes it anywhere: printable, at most `cap` characters
    and a count of the rest, secrets redacted."""
    head = "".join(c if c.isprintable() else "?" for c in value[:cap])
    more = len(value) - cap
    return redact(head + (f"... ({more:,} more characters)" if more > 0 else ""))


@dataclass
class _Window:
    started: float
    since: datetime
    written: int = 0
    counted: int = 0


@dataclass
class Counted:
    """Refusals of one service and status that a window counted without writing them."""

    kind: str
    status: int
    count: int
    since: datetime


class RefusalSampler:
    """Which refusals get an event of their own; thread-safe (the listener's requests share it)."""

    def __init__(self, monotonic: Callable[[], float], clock: Callable[[], datetime]) -> None:
        self.monotonic = monotonic
        self.clock = clock
        self._windows: dict[tuple[str, int], _Window] = {}
        self._lock = threading.Lock()

    def admit(self, kind: str, status: int) -> tuple[bool, list[Counted]]:
        """Count a refusal: whether it is among its window's first `SAMPLED` (its event is
        written), and the counts of the windows over by now (`due`), to write first."""
        now = self.monotonic()
        with self._lock:
            over = self._over(now)
            window = self._windows.get((kind, status))
            if window is None:
                window = self._windows[(kind, status)] = _Window(now, self.clock())
            if window.written < SAMPLED:
                window.written += 1
                return True, over
            window.counted += 1
            return False, over

    def due(self) -> list[Counted]:
        """The counts of the windows that are over, each once; their windows end."""
        now = self.monotonic()
        with self._lock:
            return self._over(now)

    def _over(self, now: float) -> list[Counted]:
        out = []
        for key, window in list(self._windows.items()):
            if now - window.started < WINDOW:
                continue
            del self._windows[key]
            if window.counted:
                out.append(Counted(key[0], key[1], window.counted, window.since))
        return out

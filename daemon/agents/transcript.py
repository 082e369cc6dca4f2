"""An attempt's transcript: `transcript.jsonl`, one redacted JSON object a line, capped.

Each line is `{"ts", "stream", "type", ...the event's fields that differ from their
defaults..., "raw"}` (see the shared transcript format). Every string is redacted before it
is written. The file stops growing at `cap_bytes`: agent lines stop first (a reserve is kept
for loopd's own lines), and `close()` appends exactly one `{"type": "truncated"}` marker
saying how many lines and bytes of the agent's output were dropped; the marker always fits
under the cap. One Transcript object serves a whole attempt (every process of it, nudges
included); close it once, when the attempt ends.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.agents.base import AgentEvent
from daemon.clock import utc_now
from daemon.redact import PRIVATE_KEY_MARK, Redactor, redact_value
from daemon.state.atomic import open_private


def _size(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


def timestamp(now: datetime) -> str:
    """`2026-11-29T02:00:01.123456Z`."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _replace_strings(value: Any, original: str, replacement: str) -> Any:
    """Inside a private key block: the line itself becomes its redaction, other text a mark."""
    if isinstance(value, str):
        if value == original:
            return replacement
        return PRIVATE_KEY_MARK if value else value
    if isinstance(value, dict):
        return {key: _replace_strings(item, original, replacement) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_replace_strings(item, original, replacement) for item in value]
    return value


class Transcript:
    """Writes one attempt's transcript.jsonl: redacted, capped, thread-safe."""

    def __init__(self, path: Path, cap_bytes: int) -> None:
        self.path = Path(path)
        self.cap_bytes = int(cap_bytes)
        reserve = min(8192, self.cap_bytes // 4)
        self._agent_limit = self.cap_bytes - reserve
        self._loopd_limit = self.cap_bytes - min(512, reserve)
        self._lock = threading.Lock()
        self._fh = open_private(self.path)
        self._size = self.path.stat().st_size
        self._redactors = {"stdout": Redactor(), "stderr": Redactor()}
        self._agent_capped = False
        self.dropped_lines = 0
        self.dropped_bytes = 0
        self._first_drop: datetime | None = None
        self._last_now: datetime | None = None
        self._closed = False

    @property
    def size(self) -> int:
        return self._size

    @property
    def truncated(self) -> bool:
        return self.dropped_lines > 0

    def write_line(self, now: datetime, stream: str, line: str, events: list[AgentEvent]) -> None:
        """Append what one line of the agent's output gave: its events, the first with `raw`.

        The line is kept as `raw` unless it gave exactly one text or raw event holding it;
        a line that gave no event is kept as a raw event. A private key block spread over
        several lines of one stream is redacted whole.
        """
        with self._lock:
            if self._agent_capped or self._closed:
                self._drop(now, _size(line))
                return
            redactor = self._redactors.setdefault(stream, Redactor())
            red_line = redactor.line(line)
            if not events:
                events = [AgentEvent(type="raw", text=line)]
            plain = len(events) == 1 and events[0].type in ("text", "raw")
            plain = plain and events[0].text == line
            ts = timestamp(now)
            records = []
            for index, event in enumerate(events):
                fields = event.model_dump(exclude_defaults=True)
                if redactor.touched:
                    fields = _replace_strings(fields, line, red_line)
                else:
                    fields = {
                        key: red_line if key == "text" and value == line else redact_value(value)
                        for key, value in fields.items()
                    }
                record: dict[str, Any] = {"ts": ts, "stream": stream, **fields}
                if index == 0 and not plain:
                    record["raw"] = red_line
                records.append(record)
            encoded = b"".join(self._encode(record) for record in records)
            self._append(now, encoded, agent=True, dropped=_size(line))

    def write_loopd(self, now: datetime, type: str, **fields: Any) -> None:
        """Append a line of loopd's own: process started or exited, stall, nudge."""
        record = {"ts": timestamp(now), "stream": "loopd", "type": type, **redact_value(fields)}
        with self._lock:
            self._write(now, record, agent=False, dropped=0)

    def close(self) -> None:
        """Write the truncation marker when something was dropped, and close the file."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self.dropped_lines:
                    now = self._last_now or utc_now()
                    marker = {
                        "ts": timestamp(now),
                        "stream": "loopd",
                        "type": "truncated",
                        "cap_bytes": self.cap_bytes,
                        "dropped_lines": self.dropped_lines,
                        "dropped_bytes": self.dropped_bytes,
                        "first_dropped": timestamp(self._first_drop or now),
                    }
                    data = self._encode(marker)
                    self._fh.write(data)
                    self._size += len(data)
                self._fh.flush()
            finally:
                self._fh.close()

    def __enter__(self) -> Transcript:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _encode(record: dict[str, Any]) -> bytes:
        text = json.dumps(record, ensure_ascii=False, default=str)
        return (text + "\n").encode("utf-8", "replace")

    def _write(self, now: datetime, record: dict[str, Any], *, agent: bool, dropped: int) -> None:
        if self._closed or (agent and self._agent_capped):
            self._drop(now, dropped)
            return
        self._append(now, self._encode(record), agent=agent, dropped=dropped)

    def _append(self, now: datetime, data: bytes, *, agent: bool, dropped: int) -> None:
        self._last_now = now
        limit = self._agent_limit if agent else self._loopd_limit
        if self._closed or self._size + len(data) > limit:
            if agent:
                self._agent_capped = True
            self._drop(now, dropped or len(data))
            return
        self._fh.write(data)
        self._fh.flush()
        self._size += len(data)

    def _drop(self, now: datetime, size: int) -> None:
        self._last_now = now
        self.dropped_lines += 1
        self.dropped_bytes += size
        if self._first_drop is None:
            self._first_drop = now

"""loopd's desk: where the agent's tool calls of one attempt arrive, and are checked and done.

A unix socket in the run's scratch folder (the one folder of loopd's that the sandbox shows
the agent, and only its own run's), served by a thread while the attempt's agent works. Each
call is one JSON line (agents/deskwire.py) carrying the run's token, made fresh for each
attempt and written only into the agent's own tool configuration: a call with another token
(another run's, or none) is refused, so one run cannot write into another even without a
sandbox. Calls are served one at a time, at most CALLS_PER_MINUTE a minute and CALLS_PER_ATTEMPT
an attempt; the files they write are capped (state/agentrecords.py). What a call does is
the work's (runs/deskwork.py); every call, done or refused, is an event.
"""

from __future__ import annotations

import hmac
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from daemon.agents.deskwire import (
    REQUEST_MAX,
    SOCKET_NAME,
    BadArguments,
    DeskReply,
    DeskRequest,
    ToolInput,
    bind_socket,
    read_line,
    validated,
)
from daemon.runparts.stop import RunStopped

CALLS_PER_MINUTE = 30
CALLS_PER_ATTEMPT = 300
READ_TIMEOUT = 10.0  # seconds a caller may take to send its line
ACCEPT_POLL = 0.2  # seconds between looks at whether the desk is closing


class DeskError(Exception):
    """A call the work could not do; the message is what the agent reads."""


# The work: a tool's name and validated arguments -> the text the agent reads (DeskError).
Work = Callable[[str, ToolInput], str]
# What a refused call leaves: (tool, why) -> an event.
Refused = Callable[[str, str], None]


class RateLimit:
    """At most `per_minute` calls in any minute and `total` in all (monotonic clock)."""

    def __init__(self, per_minute: int, total: int, clock: Callable[[], float]) -> None:
        self.per_minute, self.total, self.clock = per_minute, total, clock
        self.recent: deque[float] = deque()
        self.count = 0

    def refusal(self) -> str:
        """Why the next call is refused, or "" (and then it is counted)."""
        now = self.clock()
        while self.recent and now - self.recent[0] >= 60.0:
            self.recent.popleft()
        if self.count >= self.total:
            return f"too many calls: at most {self.total} in an attempt"
        if len(self.recent) >= self.per_minute:
            return f"too many calls: at most {self.per_minute} a minute; wait a little"
        self.recent.append(now)
        self.count += 1
        return ""


class Desk:
    """The attempt's desk: `open()` before the agent starts, `close()` after it ended."""

    def __init__(
        self,
        scratch: Path,
        work: Work,
        refused: Refused,
        *,
        limit: RateLimit | None = None,
    ) -> None:
        self.path = scratch / SOCKET_NAME
        self.token = secrets.token_urlsafe(32)
        self.work = work
        self.refused = refused
        self.limit = limit or RateLimit(CALLS_PER_MINUTE, CALLS_PER_ATTEMPT, time.monotonic)
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()

    def open(self) -> Desk:
        self._sock = bind_socket(self.path)
        self._sock.settimeout(ACCEPT_POLL)
        self._thread = threading.Thread(target=self._serve, name="loopd-desk", daemon=True)
        self._thread.start()
        return self

    def close(self, wait: float = 60.0) -> None:
        """Stop taking calls; a call under way finishes first (up to `wait` seconds)."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join(wait)
        if self._sock is not None:
            self._sock.close()
        try:
            self.path.unlink()
        except OSError:
            pass

    def __enter__(self) -> Desk:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._closing.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(READ_TIMEOUT)
                try:
                    reply = self.answer(read_line(conn, REQUEST_MAX))
                except (OSError, ValueError) as exc:
                    reply = DeskReply(ok=False, text=f"loopd could not read the call: {exc}")
                    self.refused("", "unreadable")
                try:
                    conn.sendall(reply.model_dump_json().encode() + b"\n")
                except OSError:
                    pass  # the caller went away; what it asked is done and recorded

    def answer(self, line: bytes) -> DeskReply:
        """The reply to one request line: checked, validated, done."""
        try:
            request = DeskRequest.model_validate_json(line)
        except ValidationError:
            self.refused("", "malformed")
            return DeskReply(ok=False, text="loopd could not read the call (not a desk request)")
        if not hmac.compare_digest(request.token.encode(), self.token.encode()):
            self.refused(request.tool, "token")
            return DeskReply(ok=False, text="refused: this tool is not bound to this run")
        refusal = self.limit.refusal()
        if refusal:
            self.refused(request.tool, "rate")
            return DeskReply(ok=False, text=f"{request.tool}: refused, {refusal}")
        try:
            arguments = validated(request.tool, request.arguments)
        except BadArguments as exc:
            self.refused(request.tool, "arguments")
            return DeskReply(ok=False, text=str(exc))
        try:
            return DeskReply(ok=True, text=self.work(request.tool, arguments))
        except DeskError as exc:
            self.refused(request.tool, str(exc)[:200])
            return DeskReply(ok=False, text=f"{request.tool}: {exc}")
        except RunStopped:
            return DeskReply(ok=False, text=f"{request.tool}: the run is stopping")
        except Exception as exc:  # a fault of loopd's: the agent is told, the desk goes on
            self.refused(request.tool, f"error: {type(exc).__name__}")
            return DeskReply(ok=False, text=f"{request.tool}: loopd failed to do it ({exc})")

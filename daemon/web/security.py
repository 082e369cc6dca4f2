"""The console's guards: the login token (a 0600 file of the home), its cookie, the CSRF token
of every form, the Origin check of every POST, and the rate limit on failed logins."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from collections import deque
from pathlib import Path

TOKEN_FILE = "web-token"  # under state/
COOKIE = "loopd_console"
# Failed logins a peer may make in WINDOW seconds before it gets 429 until the window passes.
FAILURES_ALLOWED = 10
WINDOW = 60.0


def token_path(state: Path) -> Path:
    return state / TOKEN_FILE


def login_token(state: Path) -> str:
    """The home's login token: made on first start, readable by its owner only (0600)."""
    path = token_path(state)
    if path.is_file():
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)  # a token others can read is no login: close it first
        token = path.read_text().strip()
        if len(token) >= 32:
            return token
    state.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as fh:
        fh.write(token + "\n")
    os.chmod(path, 0o600)
    return token


def session_value(token: str) -> str:
    """The cookie's value: derived from the token, so the token itself never sits in a cookie."""
    return hmac.new(token.encode(), b"loopd-console-session", hashlib.sha256).hexdigest()


def csrf_value(token: str) -> str:
    """The CSRF token every form carries: tied to the login token, unknown to other sites."""
    return hmac.new(token.encode(), b"loopd-console-csrf", hashlib.sha256).hexdigest()


def same(given: str | None, expected: str) -> bool:
    """A constant-time comparison of what a request sent with what it should have sent."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def origin_allowed(origin: str | None, referer: str | None, host: str | None) -> bool:
    """A POST comes from the console's own pages: its Origin (else Referer) names the Host it
    was sent to. Neither header at all is refused: browsers send Origin on every POST."""
    if not host:
        return False
    source = origin or referer
    if not source or source == "null":
        return False
    rest = source.split("://", 1)[-1]
    return rest.split("/", 1)[0] == host


class FailureLimit:
    """Failed logins per peer address in a sliding window: past FAILURES_ALLOWED, refused."""

    def __init__(self, allowed: int = FAILURES_ALLOWED, window: float = WINDOW) -> None:
        self.allowed, self.window = allowed, window
        self.failures: dict[str, deque[float]] = {}
        self.lock = threading.Lock()

    def _recent(self, peer: str, now: float) -> deque[float]:
        seen = self.failures.setdefault(peer, deque())
        while seen and now - seen[0] > self.window:
            seen.popleft()
        return seen

    def blocked(self, peer: str) -> bool:
        with self.lock:
            return len(self._recent(peer, time.monotonic())) >= self.allowed

    def failed(self, peer: str) -> None:
        with self.lock:
            now = time.monotonic()
            self._recent(peer, now).append(now)
            if len(self.failures) > 10_000:  # a flood of addresses keeps no unbounded memory
                self.failures = {p: d for p, d in self.failures.items() if self._recent(p, now)}

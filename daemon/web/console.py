"""One home's console and the guards in front of its routes: logged in, not rate limited, and for
a POST: not read-only, from the console's own origin, with its CSRF token."""

from __future__ import annotations

import atexit
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.web.security import (
    COOKIE,
    FailureLimit,
    csrf_value,
    origin_allowed,
    same,
    session_value,
)

HERE = Path(__file__).resolve().parent
SAID_KEPT = 100  # the actions' messages kept for their pages


@dataclass
class Console:
    """One home's console: where it reads, its token, and whether it may act."""

    home: str
    token: str
    read_only: bool = False
    limit: FailureLimit = field(default_factory=FailureLimit)
    # What the last actions' commands said, by a random key the redirect carries: a link
    # cannot put words of its own on a page (`?said=` names a kept message, not its text).
    said: dict[str, str] = field(default_factory=dict)
    # Where `loopd report --html` writes the /report page and plotly's bundle (0700, its own).
    folder: str = field(default_factory=lambda: _own_folder())
    # Whether the server is stopping: a live log's stream ends then (its page connects again
    # to the next console), where it would hold the stop until its run ended.
    stopping: Callable[[], bool] = lambda: False

    def keep_said(self, text: str) -> str:
        """Keep what an action's command said; the key to show it by."""
        key = secrets.token_urlsafe(12)
        self.said[key] = text
        while len(self.said) > SAID_KEPT:
            self.said.pop(next(iter(self.said)))
        return key

    @property
    def session(self) -> str:
        return session_value(self.token)

    @property
    def csrf(self) -> str:
        return csrf_value(self.token)


def _own_folder() -> str:
    """A 0700 folder of this process's own, removed when it exits (plotly's bundle is 5 MB)."""
    folder = tempfile.mkdtemp(prefix="loopd-console-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def templates() -> Any:
    """Jinja2 over the package's templates, every value HTML-escaped."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its name: nothing a page shows is raw
        undefined=jinja2.StrictUndefined,
    )


def peer(request: Any) -> str:
    return request.client.host if request.client else "?"


def refusal(status: int, text: str) -> Any:
    from starlette.responses import PlainTextResponse

    return PlainTextResponse(text + "\n", status_code=status)


def guard(console: Console, request: Any) -> Any | None:
    """None when the request may go on; else the response that refuses it."""
    address = peer(request)
    if console.limit.blocked(address):
        return refusal(429, "too many failed logins from this address; wait a minute")
    if not same(request.cookies.get(COOKIE), console.session):
        console.limit.failed(address)
        return refusal(401, "not logged in: open the address `loopd web --url` prints")
    return None


async def post_guard(console: Console, request: Any) -> tuple[Any | None, Any]:
    """The refusal of a POST (or None) and its form: logged in, allowed, same origin, CSRF."""
    refused = guard(console, request)
    if refused is not None:
        return refused, None
    if console.read_only:
        return refusal(403, "the console is read-only (`loopd web --read-only`)"), None
    headers = request.headers
    if not origin_allowed(headers.get("origin"), headers.get("referer"), headers.get("host")):
        return refusal(403, "refused: the request did not come from the console's own pages"), None
    form = await request.form()
    if not same(form.get("csrf"), console.csrf):
        return refusal(403, "refused: the form's CSRF token is missing or wrong"), None
    return None, form

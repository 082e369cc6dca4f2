"""`[notify] webhook`: a JSON POST with retries and exponential backoff (stdlib urllib)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import daemon
from daemon.people.notify.base import Notifier, NotifyError


class WebhookNotifier(Notifier):
    """POSTs `{"text": message, ...payload}` as JSON; 2xx is delivered, else retried."""

    name = "webhook"

    def __init__(
        self,
        url: str,
        timeout: float = 5.0,
        attempts: int = 4,
        backoff: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"[notify] webhook {url!r} is not an http(s) URL")
        self.url = url
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self._sleep = sleep

    def _where(self) -> str:
        # The URL's path and query often hold a token; name only the host.
        return urlsplit(self.url).netloc

    def send(self, message: str, payload: dict[str, Any]) -> None:
        body = json.dumps({"text": message, **payload}, default=str).encode("utf-8")
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": f"loopd/{daemon.__version__}",
            },
        )
        last = ""
        for attempt in range(self.attempts):
            if attempt:
                self._sleep(self.backoff * 2 ** (attempt - 1))
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    response.read(65536)
                    return
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    break  # the request itself is wrong; repeating it will not help
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                last = str(reason) or type(exc).__name__
        raise NotifyError(
            f"[notify] webhook at {self._where()} failed after {attempt + 1} tries: {last}"
        )

"""`[notify] webhook`: a JSON POST, retried by the webhook retry policy (stdlib urllib)."""

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
from daemon.retry import WEBHOOK, RetryPolicy, retry_after_of


class WebhookNotifier(Notifier):
    """POSTs `{"text": message, ...payload}` as JSON; 2xx is delivered, else retried.

    `sleep(seconds)` waits between tries; when it returns True the wait was cut short (loopd
    is exiting): one more try is made at once, and then no other.
    """

    name = "webhook"

    def __init__(
        self,
        url: str,
        timeout: float = 5.0,
        retry: RetryPolicy = WEBHOOK,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"[notify] webhook {url!r} is not an http(s) URL")
        self.url = url
        self.timeout = timeout
        self.retry = retry
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
        tries = 0
        cut_short = False
        while True:
            tries += 1
            retry_after = None
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    response.read(65536)
                    return
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    break  # the request itself is wrong; repeating it will not help
                retry_after = retry_after_of(dict(exc.headers.items()))
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                last = str(reason) or type(exc).__name__
            if cut_short:
                break
            wait = self.retry.next_wait(tries, retry_after)
            if wait is None:
                if retry_after is not None and not self.retry.gives_up(tries):
                    last += f"; the server asks to retry after {retry_after:g}s"
                break
            cut_short = bool(self._sleep(wait))
        raise NotifyError(f"[notify] webhook at {self._where()} failed after {tries} tries: {last}")

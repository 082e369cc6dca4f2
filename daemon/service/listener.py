"""`[listen]`: one small HTTP listener in the daemon: webhooks, /metrics, /healthz.

uvicorn (h11) serves a plain ASGI app on its own thread; the socket is bound by `start()`,
so a taken port is a clear error at start. TLS is the reverse proxy's job (docs/hosted.md). The
routes: POST /hooks/github, /hooks/gitea (also /hooks/forgejo), /hooks/gitlab; GET /metrics
and /healthz. Webhook bodies are capped at `max_body` and deliveries rate-limited per source
address before anything else is read.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import Any

from daemon.config import ListenConfig
from daemon.service.context import ConfigFatal
from daemon.service.webhook_desk import Answer, RateLimit, WebhookDesk

ROUTES = {
    "/hooks/github": "github",
    "/hooks/gitea": "gitea",
    "/hooks/forgejo": "gitea",
    "/hooks/gitlab": "gitlab",
}


class Listener:
    """The server thread; `desk` judges webhooks (none: a worker's), `metrics` answers /metrics."""

    def __init__(
        self,
        config: ListenConfig,
        desk: WebhookDesk | None,
        metrics: Any,
        healthy: Callable[[], bool],
        monotonic: Callable[[], float],
        key: str = "loopd.toml: [listen] bind",
    ) -> None:
        self.config = config
        self.desk = desk
        self.key = key  # what the person wrote the address as, for a bind's error
        self.metrics = metrics
        self.healthy = healthy
        self.limit = RateLimit(config.rate_limit, monotonic)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port = config.port

    def start(self) -> None:
        """Bind, then serve on a thread; ConfigFatal when the address cannot be bound."""
        import uvicorn

        family = socket.AF_INET6 if ":" in self.config.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.config.host, self.config.port))
        except OSError as exc:
            sock.close()
            raise ConfigFatal(
                f"{self.key} = {self.config.bind!r}: cannot listen there "
                f"({exc.strerror or exc}); choose a free port or stop what holds it"
            ) from None
        sock.listen(512)
        sock.set_inheritable(False)  # agents must not inherit it
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            http="h11",
            loop="asyncio",
            lifespan="off",
            ws="none",
            interface="asgi3",
            access_log=False,
            log_level="warning",
            server_header=False,
            date_header=False,
            timeout_keep_alive=5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="loopd-listen", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # the ASGI app ----------------------------------------------------------------------------
    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/healthz" and method in ("GET", "HEAD"):
            ok = self.healthy()
            return await _reply(send, 200 if ok else 503, "ok\n" if ok else "unhealthy\n")
        if path == "/metrics" and method in ("GET", "HEAD"):
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            body = generate_latest(self.metrics.registry)
            return await _reply(send, 200, body, CONTENT_TYPE_LATEST)
        kind = ROUTES.get(path) if self.desk is not None else None
        if kind is None:
            return await _reply(send, 404, "not found\n")
        if method != "POST":
            return await _reply(send, 405, "POST only\n")
        answer = await self._webhook(kind, scope, receive)
        return await _reply(send, answer.status, answer.text)

    async def _webhook(self, kind: str, scope: dict[str, Any], receive: Any) -> Answer:
        assert self.desk is not None  # no route leads here without one
        source = (scope.get("client") or ("?", 0))[0]
        cap = self.config.max_body
        if not self.limit.allow(source):
            return self.desk.refuse(kind, 429, "too many deliveries from this address", source)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            declared = int(headers.get("content-length", "0"))
        except ValueError:
            declared = 0
        if declared > cap:
            return self.desk.refuse(kind, 413, f"body over {cap} bytes", source)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return Answer(400, "")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > cap:
                return self.desk.refuse(kind, 413, f"body over {cap} bytes", source)
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        # On a thread: the desk's writes (the replay store, the event, the trigger) wait on the
        # disk, and the server's loop reads the other connections' deliveries meanwhile.
        return await asyncio.to_thread(self.desk.handle, kind, headers, b"".join(chunks), source)


async def _reply(
    send: Any, status: int, body: str | bytes, content_type: str = "text/plain; charset=utf-8"
) -> None:
    data = body.encode() if isinstance(body, str) else body
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})

"""`[listen]`: one small HTTP listener in the daemon: webhooks, /metrics, /healthz.

uvicorn (h11) serves a plain ASGI app on its own thread; the socket is bound by `start()`,
so a taken port is a clear error at start. TLS is the reverse proxy's job (docs/hosted.md). The
routes: POST /hooks/github, /hooks/gitea (also /hooks/forgejo), /hooks/gitlab; GET /metrics
and /healthz. Webhook bodies are capped at `max_body` and deliveries rate-limited per source
address before anything else is read.

The source address is the connection's peer. Only when the peer is one of `trusted_proxies`
is its `X-Forwarded-For` believed: the source is then the last address of that header that
is not a trusted proxy (a proxy appends the client's address; what the client wrote comes
before it). uvicorn's own reading of proxy headers is off, so that nothing else decides it.
A connection must send its headers within `read_timeout` (else it is closed) and then its
body within `read_timeout` (else 408); at most `MAX_CONNECTIONS` are open at once.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from collections.abc import Callable
from typing import Any

from daemon.config import ListenConfig
from daemon.service.context import ConfigFatal
from daemon.service.refusals import shown
from daemon.service.webhook_desk import Answer, RateLimit, WebhookDesk
from daemon.state.space import no_space

MAX_CONNECTIONS = 256  # open at once; more are closed as they come
UI = "/ui"  # where `[listen] ui = true` serves the console

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
        ui: Any = None,
    ) -> None:
        self.config = config
        self.ui = ui  # with `[listen] ui = true`: the console's ASGI app, served under /ui/
        self.desk = desk
        self.key = key  # what the person wrote the address as, for a bind's error
        self.metrics = metrics
        self.healthy = healthy
        self.limit = RateLimit(config.rate_limit, monotonic)
        self.trusted = [ipaddress.ip_network(p, strict=False) for p in config.trusted_proxies]
        self.read_timeout = config.read_timeout.total_seconds()
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
            http=_deadline_protocol(self.read_timeout),
            # Who sent a delivery is decided here (`source_of`), from `trusted_proxies` alone:
            # uvicorn would otherwise believe X-Forwarded-For from 127.0.0.1.
            proxy_headers=False,
            forwarded_allow_ips="",
            h11_max_incomplete_event_size=16_384,  # headers over 16 KB: 400
            loop="asyncio",
            lifespan="off",
            ws="none",
            interface="asgi3",
            access_log=False,
            # Not "warning": uvicorn says "Invalid HTTP request received." per bad request, a
            # line a client could have the log grow by without bound.
            log_level="error",
            server_header=False,
            date_header=False,
            timeout_keep_alive=5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="loopd-listen", daemon=True
        )
        self._thread.start()

    def stopping(self) -> bool:
        """Whether the listener has been asked to stop (its open streams end then)."""
        return self._server is not None and bool(self._server.should_exit)

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
        if self.ui is not None and (path == UI or path.startswith(UI + "/")):
            if path == UI:  # the pages' links are relative to /ui/
                return await _reply(send, 308, "", headers=[(b"location", b"ui/")])
            # ASGI: `path` keeps the prefix, `root_path` names it; the console routes the rest.
            return await self.ui(
                {**scope, "root_path": scope.get("root_path", "") + UI}, receive, send
            )
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
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        peer = (scope.get("client") or ("?", 0))[0]
        source = source_of(peer, headers.get("x-forwarded-for", ""), self.trusted)
        cap = self.config.max_body
        if not self.limit.allow(source):
            return self.desk.refuse(kind, 429, "too many deliveries from this address", source)
        try:
            declared = int(headers.get("content-length", "0"))
        except ValueError:
            declared = 0
        if declared > cap:
            return self.desk.refuse(kind, 413, f"body over {cap} bytes", source)
        try:
            async with asyncio.timeout(self.read_timeout):
                body = await _body(receive, cap)
        except TimeoutError:
            why = f"the body did not arrive within {self.config.read_timeout.total_seconds():g} s"
            return self.desk.refuse(kind, 408, why, source)
        if body is None:
            return Answer(400, "")  # the client went away
        if len(body) > cap:
            return self.desk.refuse(kind, 413, f"body over {cap} bytes", source)
        # On a thread: the desk's writes (the replay store, the event, the trigger) wait on the
        # disk, and the server's loop reads the other connections' deliveries meanwhile.
        try:
            return await asyncio.to_thread(self.desk.handle, kind, headers, body, source)
        except Exception as exc:  # noqa: BLE001 - one delivery never takes the listener down
            if no_space(exc):
                return self.desk.full(kind, source)  # the sender retries a 503
            # An event and its type, no traceback: the log holds nothing a client sent.
            return self.desk.refuse(kind, 500, f"loopd failed on it ({type(exc).__name__})", source)


async def _body(receive: Any, cap: int) -> bytes | None:
    """The request's body, or the first `cap + 1` bytes of it; None when the client left."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        if size > cap or not message.get("more_body"):
            return b"".join(chunks)


def source_of(peer: str, forwarded: str, trusted: list[Any]) -> str:
    """Whom a delivery is counted as: its peer, unless the peer is a trusted proxy; then the
    last address of `X-Forwarded-For` that is not one (capped: the header is the client's)."""
    if not _trusted(peer, trusted):
        return peer
    for hop in reversed([h.strip() for h in forwarded.split(",")]):
        if hop and not _trusted(hop, trusted):
            return shown(hop, 64)
    return peer


def _trusted(address: str, trusted: list[Any]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in trusted)


def _deadline_protocol(timeout: float) -> Any:
    """uvicorn's h11 protocol, with a deadline for each request's headers: a connection that
    has not sent them all `timeout` seconds after it opened, or after its data began to come
    (keep-alive), is closed. uvicorn has none: a client trickling a byte at a time held a
    connection for ever. A connection beyond `MAX_CONNECTIONS` open is closed at once."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class DeadlineProtocol(H11Protocol):
        _deadline: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > MAX_CONNECTIONS:
                # Each would hold a descriptor the daemon's runs need, for read_timeout.
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and self._waiting():
                self._arm()
            super().data_received(data)
            if self._deadline is not None and not self._waiting():
                self._deadline.cancel()
                self._deadline = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            super().connection_lost(exc)

        def _waiting(self) -> bool:
            """No request under way: its headers are still to come."""
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(timeout, self._late)

        def _late(self) -> None:
            self._deadline = None
            if self._waiting() and not self.transport.is_closing():
                self.transport.close()

    return DeadlineProtocol


async def _reply(
    send: Any,
    status: int,
    body: str | bytes,
    content_type: str = "text/plain; charset=utf-8",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    data = body.encode() if isinstance(body, str) else body
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(data)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})

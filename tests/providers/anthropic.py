"""A scripted Anthropic Messages API server: real HTTP on 127.0.0.1, for Claude Code's tests.

`POST /v1/messages` answers from a script, streamed as the API streams (server-sent events:
`message_start`, `content_block_start`, a `ping`, `content_block_delta` (`text_delta`,
`input_json_delta`), `content_block_stop`, `message_delta` with `stop_reason` and the output
usage, `message_stop`), or as one JSON message when the request does not ask for a stream.
`POST /v1/messages/count_tokens` answers `{"input_tokens": N}` (a rough count), `HEAD` any path
200 (Claude Code 2.1.332 sends `HEAD /api/hello` at its start unless
CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC is set). Anything else gets Anthropic's
`not_found_error`. Every request is recorded (`requests`, `messages_requests`). In print mode
Claude Code 2.1.332 sends nothing else to its base URL: no title or summary call on a small
model (its requests carry the agent's tools; a side request would carry none).

A script is a list of specs or a callable over the request body. A spec:

    "some text"                                   an assistant text
    {"text": "...", "tool_use": [{"name": N, "input": {...}, "id": optional}]}
                                                  text (optional) then tool_use blocks
    {"status": 429, "error_type": T, "message": M, "headers": {...}}
                                                  an error in Anthropic's body format
    rate_limited(now, seconds) / unauthorized()   Anthropic's real 429 and 401 answers
    {"hang": SECONDS, ...}                        wait before answering (until the server stops)
    {"stream_pause": {"after": K, "seconds": S}}  stream K events, then go silent for S
Optional keys: "usage" {input_tokens, output_tokens, cache_creation_input_tokens,
cache_read_input_tokens}, "stop_reason", "model".
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Spec = str | dict[str, Any]
Script = Iterable[Spec] | Callable[[dict[str, Any]], Spec]

_HIDDEN_HEADERS = {"authorization", "x-api-key", "proxy-authorization", "cookie"}
# Anthropic's own words for a 429 (the body's `error.message`).
RATE_LIMIT_MESSAGE = (
    "This request would exceed the rate limit for your organization "
    "(00000000-0000-0000-0000-000000000000) of 50 requests per minute. For details, refer to: "
    "https://docs.claude.com/en/api/rate-limits. You can see the response headers for current "
    "usage. Please reduce the prompt length or the maximum tokens requested, or try again "
    "later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss "
    "your options for a rate limit increase."
)


def rfc3339(moment: datetime) -> str:
    """A moment as Anthropic's rate-limit headers write it (`2026-12-07T04:00:00Z`)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def rate_limited(now: datetime, seconds: int, kind: str = "requests") -> dict[str, Any]:
    """A 429 `rate_limit_error` as the API sends it: its body, `retry-after` and the
    `anthropic-ratelimit-*` headers, the exhausted `kind` resetting `seconds` after `now`."""
    reset = rfc3339(now + timedelta(seconds=seconds))
    later = rfc3339(now + timedelta(seconds=1))
    headers = {"retry-after": str(seconds)}
    for name in ("requests", "tokens", "input-tokens", "output-tokens"):
        spent = name == kind
        headers[f"anthropic-ratelimit-{name}-limit"] = "50" if name == "requests" else "40000"
        headers[f"anthropic-ratelimit-{name}-remaining"] = "0" if spent else "39000"
        headers[f"anthropic-ratelimit-{name}-reset"] = reset if spent else later
    return {
        "status": 429,
        "error_type": "rate_limit_error",
        "message": RATE_LIMIT_MESSAGE,
        "headers": headers,
    }


def unauthorized() -> dict[str, Any]:
    """A 401 `authentication_error`, as the API answers a key it does not know."""
    return {"status": 401, "error_type": "authentication_error", "message": "invalid x-api-key"}


def request_text(body: dict[str, Any]) -> str:
    """Every text of a request (system and messages, tool results included), joined."""
    parts = [_text(body.get("system"))]
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            parts.append(_text(message.get("content")))
    return "\n".join(parts)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            _text(block.get("text", block.get("content")))
            for block in content
            if isinstance(block, dict)
        )
    return ""


def _rough_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: AnthropicServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", owner.port), _Handler)


class _Stopped(Exception):
    """The server stopped while an answer waited."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 60

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # the request log is `AnthropicServer.requests`

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_HEAD(self) -> None:  # noqa: N802
        self._handle("HEAD")

    def _handle(self, method: str) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        owner._log(method, self.path, dict(self.headers.items()), body)
        try:
            if method == "POST" and path == "/v1/messages" and isinstance(body, dict):
                self._messages(body)
            elif method == "POST" and path == "/v1/messages/count_tokens":
                text = request_text(body) if isinstance(body, dict) else ""
                self._json(200, {"input_tokens": _rough_tokens(text)})
            elif method == "HEAD":  # Claude Code's reachability check (`HEAD /api/hello`)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self._error(404, "not_found_error", f"no route for {method} {path}")
        except _Stopped:
            self._drop()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _messages(self, body: dict[str, Any]) -> None:
        owner = self.server.owner
        spec = owner._next_spec(body)
        if isinstance(spec, str):
            spec = {"text": spec}
        if spec.get("hang") and owner._stopping.wait(float(spec["hang"])):
            raise _Stopped
        if spec.get("status"):
            kind = spec.get("error_type", "api_error")
            self._error(int(spec["status"]), kind, spec.get("message", ""), spec.get("headers"))
            return
        message = _message(body, spec)
        if body.get("stream"):
            self._stream(message, spec)
        else:
            self._json(200, message)

    def _stream(self, message: dict[str, Any], spec: dict[str, Any]) -> None:
        owner = self.server.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        pause = spec.get("stream_pause") or {}
        for index, chunk in enumerate(_events(message)):
            if pause and index == int(pause.get("after", 1)):
                if owner._stopping.wait(float(pause.get("seconds", 0))):
                    raise _Stopped
            self._chunk(chunk)
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _error(
        self, status: int, kind: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        payload = {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": "req_" + uuid.uuid4().hex[:24],
        }
        self._json(status, payload, headers)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _message(body: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """The whole assistant message a spec stands for."""
    content: list[dict[str, Any]] = []
    if spec.get("text"):
        content.append({"type": "text", "text": str(spec["text"])})
    for call in spec.get("tool_use") or []:
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or "toolu_" + uuid.uuid4().hex[:24],
                "name": call["name"],
                "input": call.get("input", {}),
            }
        )
    stop = spec.get("stop_reason") or ("tool_use" if spec.get("tool_use") else "end_turn")
    written = sum(_rough_tokens(json.dumps(block)) for block in content)
    usage = {
        "input_tokens": _rough_tokens(request_text(body)),
        "output_tokens": written,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        **(spec.get("usage") or {}),
    }
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": spec.get("model") or body.get("model") or "claude-scripted",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def _events(message: dict[str, Any]) -> Iterator[bytes]:
    """The message as the API streams it: every block started, filled by deltas, stopped."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield _sse("message_start", {"type": "message_start", "message": start})
    yield _sse("ping", {"type": "ping"})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opened, text = {"type": "text", "text": ""}, block["text"]
            deltas = [
                {"type": "text_delta", "text": text[i : i + 40]} for i in range(0, len(text), 40)
            ]
        else:
            opened = {**block, "input": {}}
            encoded = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [
                {"type": "input_json_delta", "partial_json": encoded[i : i + 40]}
                for i in range(0, len(encoded), 40)
            ]
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": opened},
        )
        for delta in deltas:
            yield _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


class AnthropicServer:
    """An Anthropic Messages API server on 127.0.0.1 that answers from a script."""

    def __init__(self, script: Script | None = None, *, port: int = 0) -> None:
        self._lock = threading.Lock()
        self._replies: deque[Spec] = deque()
        self._responder: Callable[[dict[str, Any]], Spec] | None = None
        self.requests: list[dict[str, Any]] = []
        self.port = port
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.script(script)

    def script(self, script: Script | None) -> None:
        """Replace the script: a list of specs, or a callable (request body) -> spec."""
        with self._lock:
            self._replies.clear()
            self._responder = script if callable(script) else None
            if script is not None and not callable(script):
                self._replies.extend(script)

    def _next_spec(self, body: dict[str, Any]) -> Spec:
        with self._lock:
            responder = self._responder
            if responder is None:
                if self._replies:
                    return self._replies.popleft()
                return {"status": 500, "error_type": "api_error", "message": "script exhausted"}
        return responder(body)

    def _log(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        shown = {k: v for k, v in headers.items() if k.lower() not in _HIDDEN_HEADERS}
        key = headers.get("x-api-key") or headers.get("X-Api-Key") or ""
        entry = {"method": method, "path": path, "headers": shown, "key": key, "body": body}
        with self._lock:
            self.requests.append(entry)

    def messages_requests(self) -> list[dict[str, Any]]:
        """The bodies of every `POST /v1/messages`, in order."""
        with self._lock:
            entries = list(self.requests)
        return [
            e["body"]
            for e in entries
            if e["method"] == "POST" and e["path"].split("?", 1)[0] == "/v1/messages"
        ]

    @property
    def base_url(self) -> str:
        """What ANTHROPIC_BASE_URL takes: the origin, without `/v1`."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> AnthropicServer:
        self._stopping.clear()
        server = _Server(self)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> AnthropicServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""A scripted OpenAI Responses API server (what Codex CLI calls): real HTTP on 127.0.0.1.

`POST /v1/responses` with `"stream": true` is answered with server-sent events as the real
API sends them (`event: NAME` and `data: {...}` per event, each with its `sequence_number`):
`response.created`, `response.in_progress`, then per output item `response.output_item.added`,
its deltas (`response.output_text.delta` for a message,
`response.function_call_arguments.delta` for a function call), its `...done` events and
`response.output_item.done`, and last `response.completed` with the response's `usage`
(`input_tokens`, `input_tokens_details.cached_tokens`, `output_tokens`,
`output_tokens_details.reasoning_tokens`, `total_tokens`). `GET /v1/models` lists `models`
(Codex CLI 0.171 asks for no model list from a provider of its config: it sends only
`POST /v1/responses`, with `Authorization: Bearer KEY` when the provider names an `env_key`).

Each request to /v1/responses takes the next spec of its script, or asks a callable with the
request's body. A spec:

    "some text"  or  {"text": "..."}             an assistant message
    {"calls": [{"name": N, "arguments": {...} | "...", "call_id": optional}], "text": optional}
                                                function calls (after the text, if any)
    {"status": 429, "body": {...}, "headers": {NAME: VALUE}}
                                                an HTTP error, as is (see the helpers below)
    {"failed": {"code": ..., "message": ...}}   a `response.failed` event in the stream
    {"hang": SECONDS}                           the stream opened (`response.created` sent),
                                                then nothing until SECONDS pass or the server
                                                stops: a model that went silent
Optional in an answer: "usage" {"input_tokens", "cached_tokens", "output_tokens"} (default:
counted roughly from the request and the reply), "headers" {NAME: VALUE}.

`requests` records every request (method, path, headers without credentials, body, and
whether an Authorization header came); `responses_requests()` gives the /v1/responses bodies.
The helpers `usage_limit_reached`, `insufficient_quota` and `invalid_api_key` build the
answers OpenAI really sends for a usage limit (the ChatGPT backend's 429 with its `x-codex-*`
headers), an API key out of quota (429), and a refused key (401).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Spec = str | dict[str, Any]
Script = Iterable[Spec] | Callable[[dict[str, Any]], Spec]

_HIDDEN_HEADERS = {"authorization", "api-key", "x-api-key", "proxy-authorization", "cookie"}


# -- the real error answers ---------------------------------------------------------------------


def usage_limit_reached(resets_at: datetime, now: datetime, plan: str = "plus") -> Spec:
    """The ChatGPT backend's 429 when a Codex plan's usage limit is reached (body and headers)."""
    reset = int(resets_at.timestamp())
    seconds = max(0, int((resets_at - now).total_seconds()))
    body = {
        "error": {
            "type": "usage_limit_reached",
            "message": "The usage limit has been reached",
            "plan_type": plan,
            "resets_at": reset,
            "eligible_promo": None,
            "resets_in_seconds": seconds,
        }
    }
    headers = {
        "x-codex-active-limit": "codex",
        "x-codex-plan-type": plan,
        "x-codex-primary-used-percent": "100",
        "x-codex-secondary-used-percent": "41",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-over-secondary-limit-percent": "0",
        "x-codex-secondary-window-minutes": "10080",
        "x-codex-primary-reset-after-seconds": str(seconds),
        "x-codex-secondary-reset-after-seconds": str(seconds + 86_400),
        "x-codex-primary-reset-at": str(reset),
        "x-codex-secondary-reset-at": str(reset + 86_400),
        "x-codex-credits-has-credits": "False",
        "x-codex-credits-balance": "0",
        "x-codex-credits-unlimited": "False",
        "x-oai-request-id": str(uuid.uuid4()),
    }
    return {"status": 429, "body": body, "headers": headers}


def insufficient_quota() -> Spec:
    """The OpenAI API's 429 for a key whose account is out of quota (no reset is named)."""
    body = {
        "error": {
            "message": "You exceeded your current quota, please check your plan and billing "
            "details. For more information on this error, read the docs: "
            "https://platform.openai.com/docs/guides/error-codes/api-errors.",
            "type": "insufficient_quota",
            "param": None,
            "code": "insufficient_quota",
        }
    }
    return {"status": 429, "body": body, "headers": {"x-request-id": "req_" + uuid.uuid4().hex}}


def invalid_api_key(shown: str = "sk-test") -> Spec:
    """The OpenAI API's 401 for a key it does not know."""
    body = {
        "error": {
            "message": f"Incorrect API key provided: {shown}****. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    return {"status": 401, "body": body, "headers": {"x-request-id": "req_" + uuid.uuid4().hex}}


# -- reading a request ----------------------------------------------------------------------------


def input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's `input` items (a plain string input as one user message)."""
    items = body.get("input")
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": [{"text": items}]}]
    return [item for item in items or [] if isinstance(item, dict)]


def item_text(item: dict[str, Any]) -> str:
    """A message item's text (its content parts joined)."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


# -- the event stream -----------------------------------------------------------------------------


def _rough_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _pieces(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _output_items(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The completed output items a spec answers with (ids made up as OpenAI's look)."""
    items: list[dict[str, Any]] = []
    if spec.get("text"):
        items.append(
            {
                "id": "msg_" + uuid.uuid4().hex,
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": str(spec["text"]), "annotations": []}],
            }
        )
    for call in spec.get("calls") or []:
        arguments = call.get("arguments", {})
        items.append(
            {
                "id": "fc_" + uuid.uuid4().hex,
                "type": "function_call",
                "status": "completed",
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                "call_id": call.get("call_id") or "call_" + uuid.uuid4().hex[:24],
                "name": call["name"],
            }
        )
    return items


def _item_events(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events that stream one output item: added, its deltas, done."""
    kind = item["type"]
    empty = dict(item, status="in_progress")
    if kind == "message":
        empty["content"] = []
    elif kind == "function_call":
        empty["arguments"] = ""
    yield {"type": "response.output_item.added", "output_index": index, "item": empty}
    where = {"item_id": item["id"], "output_index": index}
    if kind == "message":
        text = item["content"][0]["text"]
        part = {"type": "output_text", "text": "", "annotations": []}
        yield {"type": "response.content_part.added", **where, "content_index": 0, "part": part}
        for piece in _pieces(text):
            yield {
                "type": "response.output_text.delta",
                **where,
                "content_index": 0,
                "delta": piece,
                "logprobs": [],
            }
        yield {
            "type": "response.output_text.done",
            **where,
            "content_index": 0,
            "text": text,
            "logprobs": [],
        }
        done_part = {**part, "text": text}
        yield {"type": "response.content_part.done", **where, "content_index": 0, "part": done_part}
    elif kind == "function_call":
        for piece in _pieces(item["arguments"], 24):
            yield {"type": "response.function_call_arguments.delta", **where, "delta": piece}
        yield {
            "type": "response.function_call_arguments.done",
            **where,
            "arguments": item["arguments"],
        }
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def _usage(body: dict[str, Any], spec: dict[str, Any], items: list[dict[str, Any]]) -> dict:
    given = spec.get("usage") or {}
    sent = _rough_tokens(json.dumps(body.get("input", "")) + json.dumps(body.get("tools", [])))
    made = _rough_tokens(json.dumps(items))
    input_tokens = int(given.get("input_tokens", sent))
    output_tokens = int(given.get("output_tokens", made))
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": int(given.get("cached_tokens", 0))},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def _response(body: dict[str, Any], rid: str, status: str, **more: Any) -> dict[str, Any]:
    """The `response` object the lifecycle events carry."""
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": body.get("model") or "scripted",
        "output": [],
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", False)),
        "previous_response_id": None,
        "store": bool(body.get("store", False)),
        "usage": None,
        **more,
    }


# -- the server ---------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: ResponsesServer) -> None:
        self.owner = owner
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        """Close open streams too (a held stream ends with the server)."""
        with self.connections_lock:
            connections = list(self.connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Closed(Exception):
    """The stream was cut (a hang that ended with the server, or the client went away)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 120

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # the request log is `ResponsesServer.requests`

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

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
            if method == "GET" and path == "/v1/models":
                data = [
                    {"id": m, "object": "model", "created": 0, "owned_by": "loopd-tests"}
                    for m in owner.models
                ]
                self._json(200, {"object": "list", "data": data})
            elif method == "POST" and path == "/v1/responses" and isinstance(body, dict):
                self._responses(body, owner._next_spec(body))
            else:
                message = f"no route for {method} {path}"
                self._json(404, {"error": {"message": message, "type": "invalid_request_error"}})
        except (_Closed, BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _responses(self, body: dict[str, Any], spec: Spec) -> None:
        if isinstance(spec, str):
            spec = {"text": spec}
        if spec.get("status"):
            self._json(int(spec["status"]), spec.get("body") or {}, spec.get("headers"))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", "req_" + uuid.uuid4().hex)
        for name, value in (spec.get("headers") or {}).items():
            self.send_header(name, str(value))
        self.end_headers()
        for event in self._events(body, spec):
            self._send(event)
        self._chunk(b"")

    def _events(self, body: dict[str, Any], spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
        rid = "resp_" + uuid.uuid4().hex
        yield {"type": "response.created", "response": _response(body, rid, "in_progress")}
        yield {"type": "response.in_progress", "response": _response(body, rid, "in_progress")}
        if spec.get("hang"):
            self.server.owner._stopping.wait(float(spec["hang"]))
            raise _Closed
        if spec.get("failed"):
            error = {"code": "server_error", "message": "scripted failure", **spec["failed"]}
            yield {
                "type": "response.failed",
                "response": _response(body, rid, "failed", error=error),
            }
            return
        items = _output_items(spec)
        for index, item in enumerate(items):
            yield from _item_events(index, item)
        usage = _usage(body, spec, items)
        done = _response(body, rid, "completed", output=items, usage=usage)
        yield {"type": "response.completed", "response": done}

    def _send(self, event: dict[str, Any]) -> None:
        owner = self.server.owner
        event = {**event, "sequence_number": owner._sequence()}
        data = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
        self._chunk(data.encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class ResponsesServer:
    """An OpenAI Responses API server on 127.0.0.1 that answers from a script and logs requests."""

    def __init__(self, script: Script | None = None, models: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._replies: deque[Spec] = deque()
        self._responder: Callable[[dict[str, Any]], Spec] | None = None
        self.models = list(models)
        self.requests: list[dict[str, Any]] = []
        self._count = 0
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.script(script)

    def script(self, script: Script | None) -> None:
        """Replace the script: a list of specs, or a callable (request body) -> spec."""
        with self._lock:
            self._replies.clear()
            self._responder = None
            if callable(script):
                self._responder = script
            elif script is not None:
                self._replies.extend(script)

    def _next_spec(self, body: dict[str, Any]) -> Spec:
        with self._lock:
            responder = self._responder
            if responder is None:
                if self._replies:
                    return self._replies.popleft()
                served = len(self.responses_requests_unlocked())
                return {
                    "status": 500,
                    "body": {"error": {"message": f"script exhausted ({served} requests)"}},
                }
        return responder(body)

    def _sequence(self) -> int:
        with self._lock:
            self._count += 1
            return self._count

    def _log(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        shown = {k: v for k, v in headers.items() if k.lower() not in _HIDDEN_HEADERS}
        auth = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        entry = {"method": method, "path": path, "headers": shown, "body": body}
        entry["authorization"] = auth.split(" ", 1)[0] if auth else ""
        with self._lock:
            self.requests.append(entry)

    def responses_requests_unlocked(self) -> list[dict[str, Any]]:
        return [
            e["body"]
            for e in self.requests
            if e["method"] == "POST" and e["path"].split("?")[0] == "/v1/responses"
        ]

    def responses_requests(self) -> list[dict[str, Any]]:
        """The bodies of every POST /v1/responses so far, in order."""
        with self._lock:
            return self.responses_requests_unlocked()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the server is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> ResponsesServer:
        self._stopping.clear()
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
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
        server.cut_connections()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> ResponsesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

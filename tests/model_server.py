"""A scripted OpenAI-compatible server for tests and benches: real HTTP on 127.0.0.1.

Each chat completion takes the next reply spec of its script (or of the queue for its call
name, see `call_name`), or asks a callable. A reply spec is JSON-able:

    "some text"                                 assistant text
    {"text": "..."}                             assistant text
    {"json": {...}}                             an object, serialized as the content
    {"tool_calls": [{"name": N, "arguments": {...} | "...", "id": optional}], "text": optional}
    {"status": 400, "message": "...", "body": optional raw JSON error body}
    {"raw": "<html>...", "content_type": "text/html", "status": optional (200)}
                                                a body as is (a proxy's error page)
    {"drop": true}                              close the connection without answering
    {"hang": SECONDS, ...}                      wait, then answer the rest of the spec
Optional keys in any answer: "headers" {NAME: VALUE} (e.g. "Retry-After"), "finish_reason",
"usage" {prompt_tokens, completion_tokens}, "chunk_chars" (streamed piece size),
"stream_drop_after": K (streaming: close after K chunks), "stream_pause": {"after": K,
"seconds": S} (streaming: pause after K chunks).

A `critic_verdict` reply given as {"json": {...}} without `rules_followed` and
`rules_irrelevant`, to a critic that was told of rules, gets them filled in: every rule id
the critic was told (the `- ID: rule` lines before the evidence) as followed, none
irrelevant. Scripts written before the critic
attributed rules keep their meaning (every rule in the prompt was followed); a script that
gives either list is sent as it is.

Switches: `reject_json_schema` (True: 400 to response_format json_schema, as some servers do;
"llama.cpp": HTTP 500 "Input should be 'text' or 'json_object'", as llama-cpp-python's server
does), `reject_json_object`, `down` ("refuse": nothing listens; "503": every request gets 503;
"html": every request gets a 200 HTML page, as from a proxy before a dead server).

As a process: `python -m tests.model_server --script FILE.json [--port N] [--log FILE.jsonl]`
prints its base URL on the first line. FILE.json is a list of specs, or an object
{"replies": [...], "by_name": {NAME: [...]}, "default": spec, "models": [...],
"reject_json_schema": bool, "reject_json_object": bool}. Another process can steer it through
`POST /_control/script` (same object; replies are appended), `POST /_control/down`
{"mode": "503" | "html"}, `POST /_control/up`, and read `GET /_control/requests`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Spec = str | dict[str, Any]
Script = Iterable[Spec] | Callable[[dict[str, Any]], Spec]

_HIDDEN_HEADERS = {"authorization", "api-key", "x-api-key", "proxy-authorization", "cookie"}
_REPLY_NAME = re.compile(r"the `([A-Za-z0-9_.-]+)` reply")
EMBEDDING_DIMENSIONS = 64
PROXY_PAGE = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
# llama-cpp-python's server (0.3) answers response_format json_schema with this, as HTTP 500.
LLAMA_CPP_REJECTION = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', "
    "'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
    "'ctx': {'expected': \"'text' or 'json_object'\"}}\n\n  File \"llama_cpp/server/app.py\", "
    "line 376, in create_chat_completion\n    POST /v1/chat/completions"
)


def call_name(body: dict[str, Any]) -> str | None:
    """The structured reply a request asks for: json_schema's name, else the one its prompt names.

    loopd's client states the schema in the system prompt as "... the `NAME` reply ...", so
    the name is found even when the client fell back to json_object or no response_format.
    """
    response_format = body.get("response_format") or {}
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        name = (response_format.get("json_schema") or {}).get("name")
        if name:
            return str(name)
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "system":
            match = _REPLY_NAME.search(_message_text(message))
            if match:
                return match.group(1)
    return None


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def hashed_embedding(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A deterministic bag-of-words vector: texts sharing words point the same way."""
    vector = [0.0] * dimensions
    for word in re.findall(r"[a-z0-9_]+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
        vector[int.from_bytes(digest, "big") % dimensions] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def _rough_tokens(text: str) -> int:
    return max(1, len(text) // 4)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: ScriptedModelServer) -> None:
        self.owner = owner
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        """Close kept-alive connections too, so that a down server really answers nothing."""
        with self.connections_lock:
            connections = list(self.connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Dropped(Exception):
    """The spec asked to close the connection without an answer."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 60  # an idle kept-alive connection is closed after this

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # the request log is `ScriptedModelServer.requests`, not stderr

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def _handle(self, method: str) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        if path.startswith("/_control/"):
            self._control(method, path, raw)
            return
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        owner._log(method, path, dict(self.headers.items()), body)
        route = path[3:] if path.startswith("/v1/") else path
        try:
            if owner.down == "refuse":
                raise _Dropped
            if owner.down == "html":
                self._raw(200, PROXY_PAGE, "text/html")
            elif owner.down:
                self._error(503, "the scripted model server is down")
            elif method == "GET" and route == "/models":
                self._json(200, owner._models_body())
            elif method == "GET" and route.startswith("/models/"):
                self._json(200, owner._model_body(route[len("/models/") :]))
            elif method == "POST" and route == "/chat/completions" and isinstance(body, dict):
                self._chat(body)
            elif method == "POST" and route == "/embeddings" and isinstance(body, dict):
                self._embeddings(body)
            else:
                self._error(404, f"no route for {method} {path}")
        except _Dropped:
            self._drop()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a timeout): nothing to answer

    # -- answers --------------------------------------------------------------

    def _chat(self, body: dict[str, Any]) -> None:
        owner = self.server.owner
        response_format = body.get("response_format")
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind == "json_schema" and owner.reject_json_schema == "llama.cpp":
            self._json(500, {"error": _error_body(500, LLAMA_CPP_REJECTION)})
            return
        if kind in owner.rejected_formats:
            self._error(
                400,
                f"response_format type '{kind}' is not supported by this server",
                param="response_format",
            )
            return
        spec = owner._next_spec(body)
        if isinstance(spec, str):
            spec = {"text": spec}
        spec = _with_attribution(body, spec)
        if spec.get("hang"):
            if owner._stopping.wait(float(spec["hang"])):
                raise _Dropped
        if spec.get("drop"):
            raise _Dropped
        headers = spec.get("headers") or {}
        if "raw" in spec:
            status = int(spec.get("status", 200))
            self._raw(status, str(spec["raw"]), spec.get("content_type", "text/html"), headers)
            return
        if spec.get("status"):
            if "body" in spec:
                self._json(int(spec["status"]), spec["body"], headers)
            else:
                message = str(spec.get("message", "scripted error"))
                self._error(int(spec["status"]), message, headers=headers)
            return
        if body.get("stream"):
            self._stream(body, spec)
        else:
            self._json(200, _completion(body, spec), headers)

    def _stream(self, body: dict[str, Any], spec: dict[str, Any]) -> None:
        owner = self.server.owner
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        drop_after = spec.get("stream_drop_after")
        pause = spec.get("stream_pause") or {}
        for index, chunk in enumerate(_chunks(body, spec, include_usage)):
            if drop_after is not None and index >= int(drop_after):
                raise _Dropped
            if pause and index == int(pause.get("after", 1)):
                if owner._stopping.wait(float(pause.get("seconds", 0))):
                    raise _Dropped
            self._send_chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self._send_chunk(b"data: [DONE]\n\n")
        self._send_chunk(b"")

    def _send_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _embeddings(self, body: dict[str, Any]) -> None:
        owner = self.server.owner
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            self._error(400, "input must be a string or a list of strings", param="input")
            return
        vectors = owner.embedder(texts)
        used = sum(_rough_tokens(t) for t in texts)
        self._json(
            200,
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": vector}
                    for i, vector in enumerate(vectors)
                ],
                "model": body.get("model", ""),
                "usage": {"prompt_tokens": used, "total_tokens": used},
            },
        )

    def _control(self, method: str, path: str, raw: bytes) -> None:
        owner = self.server.owner
        payload = json.loads(raw) if raw else {}
        if method == "GET" and path == "/_control/requests":
            self._json(200, {"requests": owner.requests})
        elif method == "POST" and path == "/_control/script":
            owner.load(payload)
            self._json(200, {"ok": True})
        elif method == "POST" and path == "/_control/down":
            # "refuse" cannot be undone over HTTP: only the answering forms are offered.
            owner.down = "html" if payload.get("mode") == "html" else "503"
            self._json(200, {"ok": True})
        elif method == "POST" and path == "/_control/up":
            owner.down = None
            self._json(200, {"ok": True})
        else:
            self._error(404, f"no control route {method} {path}")

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._raw(status, json.dumps(payload), "application/json", headers)

    def _raw(
        self, status: int, text: str, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _error(
        self,
        status: int,
        message: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._json(status, {"error": _error_body(status, message, param)}, headers)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


_RULE_LINE = re.compile(r"^- (r-\d{4,}-[a-z0-9]+(?:-[a-z0-9]+)*): ", re.MULTILINE)


def critic_rule_ids(body: dict[str, Any]) -> list[str]:
    """The rule ids a `critic_verdict` request told the critic about (before the evidence)."""
    users = [
        m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"
    ]
    if not users:
        return []
    head = _message_text(users[0]).split("<<<EVIDENCE", 1)[0]
    return _RULE_LINE.findall(head)


def _with_attribution(body: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """A scripted critic verdict without attribution: every rule it was told of, followed."""
    reply = spec.get("json")
    if call_name(body) != "critic_verdict" or not isinstance(reply, dict):
        return spec
    if "rules_followed" in reply or "rules_irrelevant" in reply or "verdict" not in reply:
        return spec  # attributed already, or not a whole verdict (a test of the repair)
    told = critic_rule_ids(body)
    if not told:
        return spec  # nothing to attribute: the reply goes out as scripted
    return {**spec, "json": {**reply, "rules_followed": told, "rules_irrelevant": []}}


def _error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    kinds = {400: "invalid_request_error", 404: "not_found_error", 500: "internal_server_error"}
    return {
        "message": message,
        "type": kinds.get(status, "server_error"),
        "param": param,
        "code": None,
    }


def _completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def _tool_calls(spec: dict[str, Any]) -> list[dict[str, Any]]:
    calls = []
    for call in spec.get("tool_calls") or []:
        arguments = call.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        calls.append(
            {
                "id": call.get("id") or "call_" + uuid.uuid4().hex[:24],
                "type": "function",
                "function": {"name": call["name"], "arguments": arguments},
            }
        )
    return calls


def _content(spec: dict[str, Any]) -> str | None:
    if "json" in spec:
        return json.dumps(spec["json"])
    if "text" in spec:
        return str(spec["text"])
    return None if spec.get("tool_calls") else ""


def _usage(body: dict[str, Any], spec: dict[str, Any], content: str | None) -> dict[str, int]:
    given = spec.get("usage") or {}
    prompt = int(given.get("prompt_tokens", _rough_tokens(json.dumps(body.get("messages", [])))))
    completion = int(given.get("completion_tokens", _rough_tokens(content or "")))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _completion(body: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    content = _content(spec)
    calls = _tool_calls(spec)
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    finish = spec.get("finish_reason") or ("tool_calls" if calls else "stop")
    return {
        "id": _completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or "scripted",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": _usage(body, spec, content),
        "system_fingerprint": "fp_scripted",
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _chunks(
    body: dict[str, Any], spec: dict[str, Any], include_usage: bool
) -> Iterable[dict[str, Any]]:
    """The chunks of a streamed completion, shaped as OpenAI sends them."""
    content = _content(spec)
    calls = _tool_calls(spec)
    size = int(spec.get("chunk_chars", 16))
    base = {
        "id": _completion_id(),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model") or "scripted",
        "system_fingerprint": "fp_scripted",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out = dict(base)
        out["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if include_usage:
            out["usage"] = None
        return out

    if content:
        yield chunk({"role": "assistant", "content": "", "refusal": None})
        for piece in _pieces(content, size):
            yield chunk({"content": piece})
    elif not calls:
        yield chunk({"role": "assistant", "content": "", "refusal": None})
    for index, call in enumerate(calls):
        head: dict[str, Any] = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        if index == 0 and not content:
            yield chunk({"role": "assistant", "content": None, "tool_calls": [head]})
        else:
            yield chunk({"tool_calls": [head]})
        for piece in _pieces(call["function"]["arguments"], max(size, 24)):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, spec.get("finish_reason") or ("tool_calls" if calls else "stop"))
    if include_usage:
        final = dict(base)
        final["choices"] = []
        final["usage"] = _usage(body, spec, content)
        yield final


class ScriptedModelServer:
    """An OpenAI-compatible server on 127.0.0.1 that answers from a script and logs requests."""

    def __init__(
        self,
        script: Script | None = None,
        *,
        by_name: dict[str, list[Spec]] | None = None,
        default: Spec | None = None,
        port: int = 0,
        models: Iterable[str] = ("scripted-model",),
        reject_json_schema: bool | str = False,
        reject_json_object: bool = False,
        embedder: Callable[[list[str]], list[list[float]]] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._replies: deque[Spec] = deque()
        self._responder: Callable[[dict[str, Any]], Spec] | None = None
        self._by_name: dict[str, deque[Spec]] = {}
        self.default = default
        self.models = list(models)
        self.reject_json_schema = reject_json_schema
        self.reject_json_object = reject_json_object
        self.embedder = embedder or (lambda texts: [hashed_embedding(t) for t in texts])
        self.log_path = log_path
        self.requests: list[dict[str, Any]] = []
        self.port = port
        self._down: str | None = None
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.script(script)
        for name, specs in (by_name or {}).items():
            self._by_name[name] = deque(specs)

    # -- script -----------------------------------------------------------------

    def script(self, script: Script | None) -> None:
        """Replace the script: a list of reply specs, or a callable (request body) -> spec."""
        with self._lock:
            self._replies.clear()
            self._responder = None
            if callable(script):
                self._responder = script
            elif script is not None:
                self._replies.extend(script)

    def add(self, *specs: Spec, name: str | None = None) -> None:
        """Append replies, to the main script or to the queue of one call name."""
        with self._lock:
            target = self._replies if name is None else self._by_name.setdefault(name, deque())
            target.extend(specs)

    def load(self, payload: list[Spec] | dict[str, Any]) -> None:
        """Take a script file's content: a list of specs, or the object form (appended)."""
        if isinstance(payload, list):
            self.add(*payload)
            return
        self.add(*payload.get("replies", []))
        for name, specs in (payload.get("by_name") or {}).items():
            self.add(*specs, name=name)
        if "default" in payload:
            self.default = payload["default"]
        if "models" in payload:
            self.models = list(payload["models"])
        schema_rejection = payload.get("reject_json_schema", self.reject_json_schema)
        self.reject_json_schema = (
            schema_rejection if schema_rejection == "llama.cpp" else bool(schema_rejection)
        )
        self.reject_json_object = bool(payload.get("reject_json_object", self.reject_json_object))

    @property
    def remaining(self) -> int:
        """Replies not yet consumed (all queues)."""
        with self._lock:
            return len(self._replies) + sum(len(q) for q in self._by_name.values())

    @property
    def rejected_formats(self) -> set[str]:
        rejected = set()
        if self.reject_json_schema:
            rejected.add("json_schema")
        if self.reject_json_object:
            rejected.add("json_object")
        return rejected

    def _next_spec(self, body: dict[str, Any]) -> Spec:
        name = call_name(body)
        with self._lock:
            queue = self._by_name.get(name) if name else None
            if queue:
                return queue.popleft()
            if self._responder is not None:
                responder = self._responder
            elif self._replies:
                return self._replies.popleft()
            elif self.default is not None:
                return self.default
            else:
                served = sum(1 for r in self.requests if r["path"].endswith("/chat/completions"))
                return {
                    "status": 500,
                    "message": f"scripted model server: script exhausted ({served} requests)",
                }
        return responder(body)

    # -- log ------------------------------------------------------------------

    def _log(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        entry = {
            "method": method,
            "path": path,
            "headers": {k: v for k, v in headers.items() if k.lower() not in _HIDDEN_HEADERS},
            "body": body,
            "name": call_name(body) if isinstance(body, dict) else None,
        }
        with self._lock:
            self.requests.append(entry)
            if self.log_path is not None:
                with self.log_path.open("a", encoding="utf-8") as log:
                    log.write(json.dumps(entry) + "\n")

    def chat_requests(self, name: str | None = None) -> list[dict[str, Any]]:
        """The logged chat completion bodies, optionally only those for one call name."""
        with self._lock:
            entries = list(self.requests)
        return [
            e["body"]
            for e in entries
            if e["path"].endswith("/chat/completions") and (name is None or e["name"] == name)
        ]

    def log_text(self) -> str:
        """The whole request log as one string, to search for what must not be there."""
        with self._lock:
            return json.dumps(self.requests)

    def _models_body(self) -> dict[str, Any]:
        return {"object": "list", "data": [self._model_body(m) for m in self.models]}

    def _model_body(self, model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": 0, "owned_by": "loopd-tests"}

    # -- lifecycle ----------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def down(self) -> str | None:
        """None when serving; "refuse": nothing listens; "503" or "html": every answer is that."""
        return self._down

    @down.setter
    def down(self, mode: str | bool | None) -> None:
        mode = "refuse" if mode is True else (mode or None)
        if mode not in (None, "refuse", "503", "html"):
            raise ValueError(f"down must be None, 'refuse', '503' or 'html', not {mode!r}")
        was = self._down
        self._down = mode
        if mode == "refuse" and was != "refuse":
            self._close()
        elif mode != "refuse" and was == "refuse" and not self._stopping.is_set():
            self._listen()

    def start(self) -> ScriptedModelServer:
        self._stopping.clear()
        if self._down != "refuse":
            self._listen()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._close()

    def _listen(self) -> None:
        server = _Server(("127.0.0.1", self.port), self)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _close(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.cut_connections()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.model_server", description=__doc__)
    parser.add_argument("--script", type=Path, help="a JSON file: a list of specs or an object")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", type=Path, help="append every request to this JSONL file")
    args = parser.parse_args(argv)
    server = ScriptedModelServer(port=args.port, log_path=args.log)
    if args.script:
        server.load(json.loads(args.script.read_text(encoding="utf-8")))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with server:
        print(server.base_url, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

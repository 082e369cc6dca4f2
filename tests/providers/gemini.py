"""A scripted Gemini API server for tests: real HTTP on 127.0.0.1, the wire format of
`generativelanguage.googleapis.com/v1beta` as Gemini CLI (through @google/genai) calls it.

Routes (what Gemini CLI 0.61.0 calls with `GOOGLE_GEMINI_BASE_URL` and an API key):

    POST /v1beta/models/MODEL:streamGenerateContent?alt=sse   the agent's turns (SSE)
    POST /v1beta/models/MODEL:generateContent                 side requests (JSON replies)
    POST /v1beta/models/MODEL:countTokens                     {"totalTokens": N}
    GET  /v1beta/models                                       the scripted models

Every request is recorded (`requests`; the API key header is kept out) so a test can read
what the agent sent, e.g. that a resumed session's request carries the first one's history.

A script is a list of reply specs or a callable over the request (`GeminiCall`) that returns
one. A reply spec:

    "some text"                                   the model's text
    {"text": "...", "calls": [{"name": N, "args": {...}, "id": optional}]}
                                                  text and/or functionCall parts
    {"usage": {"prompt": N, "candidates": M}}     usageMetadata (default: rough counts)
    {"chunk_chars": N}                            the size of the streamed text pieces
    {"hang": SECONDS, ...}                        wait (until the server stops), then answer
    {"silent_after": K}                           stream K events, then say nothing, open
    {"drop": true}                                close the connection without an answer
    {"status": N, "body": {...}, "headers": {...}}
                                                  an HTTP error (see the helpers below)

The error helpers give the API's real bodies: `resource_exhausted` (429 RESOURCE_EXHAUSTED
with `google.rpc.QuotaFailure`, `Help` and `RetryInfo` details), `unauthenticated` (401),
`permission_denied` (403), `api_key_invalid` (400 INVALID_ARGUMENT, reason API_KEY_INVALID:
what the real API answers a wrong key with).
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Spec = str | dict[str, Any]

API_VERSION = "v1beta"
_HIDDEN_HEADERS = {"x-goog-api-key", "authorization", "cookie"}
QUOTA_HELP = "https://ai.google.dev/gemini-api/docs/rate-limits"


# --- the API's real error bodies ---------------------------------------------------------------


def resource_exhausted(
    retry_delay: str | None = "3600s",
    quota_id: str = "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
    model: str = "gemini-2.5-flash",
    limit: int = 10,
) -> dict[str, Any]:
    """A 429 as the Gemini API sends it on a spent quota (free tier wording)."""
    metric = "generativelanguage.googleapis.com/generate_content_free_tier_requests"
    message = (
        "You exceeded your current quota, please check your plan and billing details. For more "
        f"information on this error, head to: {QUOTA_HELP}. To monitor your current usage, head "
        "to: https://ai.dev/usage?tab=rate-limit. \n"
        f"* Quota exceeded for metric: {metric}, limit: {limit}, model: {model}"
    )
    details: list[dict[str, Any]] = [
        {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [
                {
                    "quotaMetric": metric,
                    "quotaId": quota_id,
                    "quotaDimensions": {"location": "global", "model": model},
                    "quotaValue": str(limit),
                }
            ],
        },
        {
            "@type": "type.googleapis.com/google.rpc.Help",
            "links": [{"description": "Learn more about Gemini API quotas", "url": QUOTA_HELP}],
        },
    ]
    if retry_delay:
        message += f"\nPlease retry in {retry_delay}."
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
        )
    return _error(429, "RESOURCE_EXHAUSTED", message, details)


def unauthenticated() -> dict[str, Any]:
    """A 401: credentials the API does not take (an expired or wrong OAuth token)."""
    message = (
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
        "cookie or other valid authentication credential. See "
        "https://developers.google.com/identity/sign-in/web/devconsole-project."
    )
    details = [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "ACCESS_TOKEN_TYPE_UNSUPPORTED",
            "metadata": {"service": "generativelanguage.googleapis.com"},
        }
    ]
    return _error(401, "UNAUTHENTICATED", message, details)


def permission_denied() -> dict[str, Any]:
    """A 403: a key the API refuses (reported as leaked, or without access)."""
    message = "Your API key was reported as leaked. Please use another API key."
    return _error(403, "PERMISSION_DENIED", message, [])


def api_key_invalid() -> dict[str, Any]:
    """A 400 INVALID_ARGUMENT with reason API_KEY_INVALID: the API's answer to a wrong key."""
    details = [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "API_KEY_INVALID",
            "domain": "googleapis.com",
            "metadata": {"service": "generativelanguage.googleapis.com"},
        },
        {
            "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
            "locale": "en-US",
            "message": "API key not valid. Please pass a valid API key.",
        },
    ]
    return _error(
        400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", details
    )


def _error(code: int, status: str, message: str, details: list[Any]) -> dict[str, Any]:
    body = {"error": {"code": code, "message": message, "status": status, "details": details}}
    return {"status": code, "body": body}


# --- a request as the script sees it -----------------------------------------------------------


def part_text(part: Any) -> str:
    return (
        part.get("text", "") if isinstance(part, dict) and isinstance(part.get("text"), str) else ""
    )


@dataclass
class GeminiCall:
    """One request: the model, the method (streamGenerateContent, ...) and the JSON body."""

    model: str
    method: str
    body: dict[str, Any]

    @property
    def contents(self) -> list[dict[str, Any]]:
        return [c for c in self.body.get("contents") or [] if isinstance(c, dict)]

    @property
    def system(self) -> str:
        instruction = self.body.get("systemInstruction") or {}
        if isinstance(instruction, str):
            return instruction
        return "\n".join(part_text(p) for p in instruction.get("parts") or [])

    @property
    def has_tools(self) -> bool:
        return any(t.get("functionDeclarations") for t in self.body.get("tools") or [])

    def parts(self, role: str | None = None) -> Iterator[dict[str, Any]]:
        for content in self.contents:
            if role is None or content.get("role") == role:
                yield from (p for p in content.get("parts") or [] if isinstance(p, dict))

    def user_texts(self) -> list[str]:
        return [part_text(p) for p in self.parts("user") if part_text(p)]

    def function_calls(self) -> list[dict[str, Any]]:
        """The model's functionCall parts in the history, in order."""
        return [p["functionCall"] for p in self.parts("model") if "functionCall" in p]

    def function_responses(self) -> list[dict[str, Any]]:
        """The functionResponse parts the client sent back, in order."""
        return [p["functionResponse"] for p in self.parts("user") if "functionResponse" in p]

    @property
    def answered(self) -> str:
        """The name of the function whose response ends the history, or ""."""
        last = self.contents[-1] if self.contents else {}
        responses = [
            p["functionResponse"] for p in last.get("parts") or [] if "functionResponse" in p
        ]
        return str(responses[-1].get("name", "")) if responses else ""


# --- replies -----------------------------------------------------------------------------------


def _rough_tokens(value: Any) -> int:
    return max(1, len(json.dumps(value)) // 4)


def _parts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if spec.get("text"):
        parts.append({"text": str(spec["text"])})
    for call in spec.get("calls") or []:
        function = {"name": call["name"], "args": call.get("args", {})}
        if call.get("id"):
            function["id"] = call["id"]
        parts.append({"functionCall": function})
    return parts


def _usage(call: GeminiCall, spec: dict[str, Any], final: bool) -> dict[str, Any]:
    given = spec.get("usage") or {}
    prompt = int(given.get("prompt", _rough_tokens(call.contents)))
    usage: dict[str, Any] = {
        "promptTokenCount": prompt,
        "totalTokenCount": prompt,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    if final:
        candidates = int(given.get("candidates", _rough_tokens(_parts(spec))))
        usage["candidatesTokenCount"] = candidates
        usage["totalTokenCount"] = prompt + candidates
    return usage


def stream_events(call: GeminiCall, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A reply as the API streams it: text in pieces, function calls whole, in the last event
    `finishReason` STOP and the whole usageMetadata (earlier ones carry the prompt's count)."""
    size = int(spec.get("chunk_chars", 24))
    text = str(spec.get("text") or "")
    pieces = [{"text": text[i : i + size]} for i in range(0, len(text), size)]
    calls = _parts({"calls": spec.get("calls")})
    groups: list[list[dict[str, Any]]] = [[p] for p in pieces[:-1]]
    groups.append(pieces[-1:] + calls)
    response_id = uuid.uuid4().hex[:22]
    events = []
    for index, parts in enumerate(groups):
        final = index == len(groups) - 1
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if final:
            candidate["finishReason"] = "STOP"
        events.append(
            {
                "candidates": [candidate],
                "usageMetadata": _usage(call, spec, final),
                "modelVersion": call.model,
                "responseId": response_id,
            }
        )
    return events


def whole_response(call: GeminiCall, spec: dict[str, Any]) -> dict[str, Any]:
    """A generateContent reply: one candidate with every part."""
    return {
        "candidates": [
            {
                "content": {"parts": _parts(spec) or [{"text": ""}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": _usage(call, spec, True),
        "modelVersion": call.model,
        "responseId": uuid.uuid4().hex[:22],
    }


# --- the server --------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: ScriptedGeminiServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", owner.port), _Handler)


class _Dropped(Exception):
    """Close the connection without an answer."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 120

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # the record is ScriptedGeminiServer.requests

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def _handle(self, method: str) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        owner.record(method, url.path, parse_qs(url.query), dict(self.headers.items()), body)
        prefix = f"/{API_VERSION}/models"
        try:
            if method == "GET" and url.path == prefix:
                self._json(200, {"models": [owner.model_entry(m) for m in owner.models]})
            elif method == "POST" and url.path.startswith(prefix + "/") and ":" in url.path:
                model, _, verb = url.path[len(prefix) + 1 :].partition(":")
                self._model_call(GeminiCall(model, verb, body if isinstance(body, dict) else {}))
            else:
                self._json(
                    404, _error(404, "NOT_FOUND", f"no route {method} {url.path}", [])["body"]
                )
        except _Dropped:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _model_call(self, call: GeminiCall) -> None:
        owner = self.server.owner
        if call.method == "countTokens":
            self._json(200, {"totalTokens": _rough_tokens(call.contents)})
            return
        if call.method not in ("streamGenerateContent", "generateContent"):
            self._json(404, _error(404, "NOT_FOUND", f"no method {call.method}", [])["body"])
            return
        spec = owner.next_spec(call)
        spec = {"text": spec} if isinstance(spec, str) else spec
        if spec.get("hang") and owner.stopping.wait(float(spec["hang"])):
            raise _Dropped
        if spec.get("drop"):
            raise _Dropped
        if spec.get("status"):
            self._json(int(spec["status"]), spec.get("body") or {}, spec.get("headers"))
        elif call.method == "streamGenerateContent":
            self._stream(call, spec)
        else:
            self._json(200, whole_response(call, spec), spec.get("headers"))

    def _stream(self, call: GeminiCall, spec: dict[str, Any]) -> None:
        owner = self.server.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Disposition", "attachment")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        silent_after = spec.get("silent_after")
        for index, event in enumerate(stream_events(call, spec)):
            if silent_after is not None and index >= int(silent_after):
                owner.stopping.wait()  # the stream stays open and says nothing
                raise _Dropped
            self._chunk(b"data: " + json.dumps(event).encode() + b"\r\n\r\n")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class ScriptedGeminiServer:
    """A Gemini API on 127.0.0.1 that answers from a script and records every request."""

    def __init__(
        self,
        script: Iterable[Spec] | Callable[[GeminiCall], Spec] | None = None,
        *,
        models: Iterable[str] = ("gemini-2.5-flash",),
        port: int = 0,
    ) -> None:
        self._lock = threading.Lock()
        self._replies: deque[Spec] = deque()
        self._responder: Callable[[GeminiCall], Spec] | None = None
        self.models = list(models)
        self.requests: list[dict[str, Any]] = []
        self.port = port
        self.stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.script(script)

    def script(self, script: Iterable[Spec] | Callable[[GeminiCall], Spec] | None) -> None:
        """Replace the script: a list of reply specs, or a callable (GeminiCall) -> spec."""
        with self._lock:
            self._replies.clear()
            self._responder = script if callable(script) else None
            if script is not None and not callable(script):
                self._replies.extend(script)

    def next_spec(self, call: GeminiCall) -> Spec:
        with self._lock:
            responder = self._responder
            if responder is None:
                if self._replies:
                    return self._replies.popleft()
                message = (
                    f"scripted Gemini server: script exhausted ({len(self.requests)} requests)"
                )
                return _error(500, "INTERNAL", message, [])
        return responder(call)

    def record(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        body: Any,
    ) -> None:
        entry = {
            "method": method,
            "path": path,
            "query": {k: v[-1] for k, v in query.items()},
            "headers": {k: v for k, v in headers.items() if k.lower() not in _HIDDEN_HEADERS},
            "key": headers.get("x-goog-api-key", headers.get("X-Goog-Api-Key", "")),
            "body": body,
        }
        with self._lock:
            self.requests.append(entry)

    def calls(self, method: str | None = None) -> list[GeminiCall]:
        """The recorded model calls (optionally of one method), as the script saw them."""
        with self._lock:
            entries = list(self.requests)
        found = []
        for entry in entries:
            tail = entry["path"].rsplit("/", 1)[-1]
            model, _, verb = tail.partition(":")
            if verb and (method is None or verb == method) and isinstance(entry["body"], dict):
                found.append(GeminiCall(model, verb, entry["body"]))
        return found

    def model_entry(self, model: str) -> dict[str, Any]:
        return {
            "name": f"models/{model}",
            "displayName": model,
            "supportedGenerationMethods": ["generateContent", "countTokens"],
        }

    @property
    def base_url(self) -> str:
        """What GOOGLE_GEMINI_BASE_URL (a profile's `base_url`) takes: no version path."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ScriptedGeminiServer:
        self.stopping.clear()
        server = _Server(self)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> ScriptedGeminiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""The scripted Gemini API (tests/providers/gemini.py) speaks the wire format Gemini CLI reads:
SSE framed as the API frames it, whole function calls, usageMetadata, the API's error bodies."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from tests.providers.gemini import (
    GeminiCall,
    ScriptedGeminiServer,
    permission_denied,
    resource_exhausted,
    unauthenticated,
)

BODY = {
    "contents": [
        {"role": "user", "parts": [{"text": "Fix it."}]},
        {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {"p": "a"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {}}}]},
    ],
    "tools": [{"functionDeclarations": [{"name": "read_file"}]}],
}


def post(server: ScriptedGeminiServer, verb: str, query: str = "") -> tuple[int, str]:
    url = f"{server.base_url}/v1beta/models/gemini-2.5-flash:{verb}{query}"
    request = urllib.request.Request(
        url,
        json.dumps(BODY).encode(),
        {"x-goog-api-key": "k-1", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_streamed_turn_is_sse_with_the_calls_whole_and_the_usage_last() -> None:
    seen: list[GeminiCall] = []

    def script(call: GeminiCall) -> Any:
        seen.append(call)
        calls = [{"name": "write_file", "args": {"content": "x"}}]
        return {
            "text": "I will write it now.",
            "calls": calls,
            "chunk_chars": 8,
            "usage": {"prompt": 90, "candidates": 7},
        }

    with ScriptedGeminiServer(script) as server:
        status, text = post(server, "streamGenerateContent", "?alt=sse")
    assert status == 200
    frames = text.split("\r\n\r\n")
    assert frames[-1] == "" and all(f.startswith("data: ") for f in frames[:-1])
    events = [json.loads(f[len("data: ") :]) for f in frames[:-1]]
    parts = [p for e in events for p in e["candidates"][0]["content"]["parts"]]
    assert "".join(p.get("text", "") for p in parts) == "I will write it now."
    assert [p["functionCall"] for p in parts if "functionCall" in p] == [
        {"name": "write_file", "args": {"content": "x"}}
    ]
    assert [e["candidates"][0].get("finishReason") for e in events][-1] == "STOP"
    assert events[-1]["usageMetadata"]["candidatesTokenCount"] == 7
    assert events[-1]["usageMetadata"]["totalTokenCount"] == 97
    (call,) = seen
    assert call.answered == "read_file" and call.has_tools
    assert [f["name"] for f in call.function_calls()] == ["read_file"]
    assert (
        server.requests[0]["key"] == "k-1" and "x-goog-api-key" not in server.requests[0]["headers"]
    )


def test_the_error_bodies_are_the_apis() -> None:
    replies = [resource_exhausted(retry_delay="42s"), unauthenticated(), permission_denied()]
    with ScriptedGeminiServer(replies) as server:
        answers = [post(server, "generateContent") for _ in replies]
        status, text = post(server, "countTokens")
    (code, body), *refusals = answers
    error = json.loads(body)["error"]
    assert code == 429 and error["status"] == "RESOURCE_EXHAUSTED"
    kinds = {d["@type"].rsplit(".", 1)[-1]: d for d in error["details"]}
    assert kinds["RetryInfo"]["retryDelay"] == "42s"
    assert kinds["QuotaFailure"]["violations"][0]["quotaId"].endswith("-FreeTier")
    assert "Please retry in 42s." in error["message"]
    assert [(c, json.loads(b)["error"]["status"]) for c, b in refusals] == [
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
    ]
    assert status == 200 and json.loads(text)["totalTokens"] > 0

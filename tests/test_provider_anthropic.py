"""The scripted Anthropic server speaks the Messages API's wire format (tests/providers/)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any

from tests.providers.anthropic import AnthropicServer, rate_limited, unauthorized

NOW = datetime(2026, 12, 7, 4, 0, tzinfo=UTC)


def post(server: AnthropicServer, path: str, body: dict[str, Any]) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(
        server.base_url + path,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-api-key": "sk-ant-test"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def sse(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in data.decode().split("\n\n"):
        if chunk.strip():
            name, payload = chunk.split("\n", 1)
            events.append(
                (name.removeprefix("event: "), json.loads(payload.removeprefix("data: ")))
            )
    return events


def test_a_tool_use_streams_as_the_api_streams_it_and_its_result_comes_back() -> None:
    call = {"name": "Edit", "id": "toolu_1", "input": {"file_path": "/x", "old_string": "a"}}
    with AnthropicServer([{"text": "I will edit.", "tool_use": [call]}, "Done."]) as server:
        body = {"model": "m", "max_tokens": 10, "stream": True, "tools": [{"name": "Edit"}]}
        body["messages"] = [{"role": "user", "content": "fix it"}]
        status, headers, data = post(server, "/v1/messages?beta=true", body)
        assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
        events = sse(data)
        names = [name for name, _ in events]
        assert names[:2] == ["message_start", "ping"]
        assert names[-2:] == ["message_delta", "message_stop"]
        assert [name for name, payload in events if payload["type"] != name] == []
        starts = [p["content_block"] for n, p in events if n == "content_block_start"]
        assert [b["type"] for b in starts] == ["text", "tool_use"]
        assert starts[1]["id"] == "toolu_1" and starts[1]["input"] == {}
        partial = "".join(
            p["delta"]["partial_json"]
            for n, p in events
            if n == "content_block_delta" and p["delta"]["type"] == "input_json_delta"
        )
        assert json.loads(partial) == call["input"]
        delta = events[-2][1]
        assert delta["delta"]["stop_reason"] == "tool_use" and delta["usage"]["output_tokens"] > 0
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
        body["messages"] += [
            {"role": "assistant", "content": [{"type": "tool_use", **call}]},
            {"role": "user", "content": [result]},
        ]
        body["stream"] = False
        status, _, data = post(server, "/v1/messages", body)
        message = json.loads(data)
        assert status == 200 and message["content"] == [{"type": "text", "text": "Done."}]
        assert message["stop_reason"] == "end_turn"
        seen = server.messages_requests()
        assert len(seen) == 2 and seen[1]["messages"][-1]["content"] == [result]
        assert "x-api-key" not in json.dumps(server.requests[0]["headers"]).lower()
        assert server.requests[0]["key"] == "sk-ant-test"
        status, _, data = post(server, "/v1/messages/count_tokens", body)
        assert status == 200 and json.loads(data)["input_tokens"] > 0


def test_a_429_and_a_401_come_with_anthropics_bodies_and_headers() -> None:
    with AnthropicServer([rate_limited(NOW, 3600), unauthorized()]) as server:
        body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
        status, headers, data = post(server, "/v1/messages", body)
        assert status == 429
        error = json.loads(data)
        assert error["type"] == "error" and error["error"]["type"] == "rate_limit_error"
        assert error["request_id"].startswith("req_")
        assert headers["retry-after"] == "3600"
        assert headers["anthropic-ratelimit-requests-remaining"] == "0"
        assert headers["anthropic-ratelimit-requests-reset"] == "2026-12-07T05:00:00Z"
        status, _, data = post(server, "/v1/messages", body)
        assert status == 401
        assert json.loads(data)["error"] == {
            "type": "authentication_error",
            "message": "invalid x-api-key",
        }

"""The scripted OpenAI-compatible server, spoken to by the real `openai` package and raw HTTP."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import openai
import pytest

from tests.helpers import ROOT
from tests.model_server import ScriptedModelServer, call_name


def client(server: ScriptedModelServer, timeout: float = 5.0) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.base_url, api_key="sk-test-not-logged", max_retries=0, timeout=timeout
    )


def ask(server: ScriptedModelServer, **kwargs: object) -> object:
    return client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], **kwargs
    )


def raw_post(server: ScriptedModelServer, path: str, body: dict) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, response.getheader("Content-Type") or "", data


def test_models_text_json_and_usage(model_server: ScriptedModelServer) -> None:
    assert [m.id for m in client(model_server).models.list().data] == ["scripted-model"]
    model_server.add("plain text", {"json": {"a": 1}})
    first = ask(model_server)
    assert first.choices[0].message.content == "plain text"
    assert first.choices[0].finish_reason == "stop"
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    assert json.loads(ask(model_server).choices[0].message.content) == {"a": 1}


def test_tool_calls_non_streaming(model_server: ScriptedModelServer) -> None:
    model_server.add({"tool_calls": [{"name": "write_file", "arguments": {"path": "a.py"}}]})
    reply = ask(model_server, tools=[{"type": "function", "function": {"name": "write_file"}}])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "write_file"
    assert json.loads(call.function.arguments) == {"path": "a.py"}


def test_streaming_text_and_tool_calls_reassemble(model_server: ScriptedModelServer) -> None:
    arguments = {"path": "src/app.py", "content": "def f():\n    return 1\n" * 10}
    model_server.add(
        {
            "text": "Writing the fix now.",
            "tool_calls": [
                {"name": "write_file", "arguments": arguments, "id": "call_1"},
                {"name": "run_shell_command", "arguments": {"command": "pytest -q"}},
            ],
            "chunk_chars": 5,
        }
    )
    chunks = list(ask(model_server, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Writing the fix now."
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = call["id"] or delta.id
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
    assert calls[0]["id"] == "call_1" and calls[0]["name"] == "write_file"
    assert json.loads(calls[0]["arguments"]) == arguments
    assert calls[1]["name"] == "run_shell_command"
    assert json.loads(calls[1]["arguments"]) == {"command": "pytest -q"}
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "tool_calls" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0


def test_streaming_wire_format_is_openai_sse(model_server: ScriptedModelServer) -> None:
    model_server.add("hi there")
    status, content_type, data = raw_post(
        model_server,
        "/v1/chat/completions",
        {"model": "m", "messages": [], "stream": True, "stream_options": {"include_usage": True}},
    )
    assert status == 200 and content_type.startswith("text/event-stream")
    events = [e for e in data.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    first = json.loads(events[0][6:])
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert first["usage"] is None  # include_usage: null on every chunk but the last
    last = json.loads(events[-2][6:])
    assert last["choices"] == [] and last["usage"]["completion_tokens"] >= 1


def test_errors_drop_and_hang(model_server: ScriptedModelServer) -> None:
    model_server.add({"status": 429, "message": "slow down"}, {"drop": True}, {"hang": 3})
    with pytest.raises(openai.RateLimitError, match="slow down"):
        ask(model_server)
    with pytest.raises(openai.APIConnectionError):
        ask(model_server)
    with pytest.raises(openai.APITimeoutError):
        client(model_server, timeout=0.3).chat.completions.create(model="m", messages=[])


def test_script_exhausted_answers_500_naming_it(model_server: ScriptedModelServer) -> None:
    with pytest.raises(openai.InternalServerError, match="script exhausted"):
        ask(model_server)


def test_reject_json_schema_switch(model_server: ScriptedModelServer) -> None:
    model_server.reject_json_schema = True
    model_server.add("{}")
    schema_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
    with pytest.raises(openai.BadRequestError, match="json_schema"):
        ask(model_server, response_format=schema_format)
    assert model_server.remaining == 1  # a rejected request consumes no reply
    assert ask(model_server, response_format={"type": "json_object"}).choices[0].message.content


def test_reject_json_schema_like_llama_cpp_python(model_server: ScriptedModelServer) -> None:
    model_server.reject_json_schema = "llama.cpp"
    model_server.add("{}")
    schema_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
    with pytest.raises(openai.InternalServerError, match="Input should be 'text' or 'json_object'"):
        ask(model_server, response_format=schema_format)
    assert model_server.remaining == 1
    assert ask(model_server, response_format={"type": "json_object"}).choices[0].message.content


def test_headers_and_raw_bodies(model_server: ScriptedModelServer) -> None:
    model_server.add(
        {"status": 429, "message": "later", "headers": {"Retry-After": "30"}},
        {"raw": "<html>Bad Gateway</html>"},
        {"json": {"a": 1}, "headers": {"X-Extra": "yes"}},
    )
    with pytest.raises(openai.RateLimitError) as caught:
        ask(model_server)
    assert caught.value.response.headers["retry-after"] == "30"
    status, content_type, data = raw_post(model_server, "/v1/chat/completions", {"messages": []})
    assert (status, content_type, data) == (200, "text/html", b"<html>Bad Gateway</html>")
    raw = client(model_server).chat.completions.with_raw_response.create(model="m", messages=[])
    assert raw.headers["x-extra"] == "yes"


def test_down_html_answers_a_proxy_page(model_server: ScriptedModelServer) -> None:
    model_server.down = "html"
    status, content_type, data = raw_post(model_server, "/v1/chat/completions", {"messages": []})
    assert status == 200 and content_type == "text/html" and data.startswith(b"<html>")


def test_down_refuse_then_up_and_503(model_server: ScriptedModelServer) -> None:
    model_server.add("one", "two")
    assert ask(model_server).choices[0].message.content == "one"
    model_server.down = True
    with pytest.raises(openai.APIConnectionError):
        ask(model_server)
    model_server.down = "503"
    with pytest.raises(openai.InternalServerError):
        ask(model_server)
    model_server.down = None
    assert ask(model_server).choices[0].message.content == "two"


def test_log_keeps_bodies_and_hides_auth(model_server: ScriptedModelServer) -> None:
    model_server.add("ok")
    ask(model_server)
    entry = model_server.requests[-1]
    assert entry["path"] == "/v1/chat/completions" and entry["method"] == "POST"
    assert entry["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert "authorization" not in {k.lower() for k in entry["headers"]}
    assert "sk-test-not-logged" not in model_server.log_text()


def test_callable_script_and_routing_by_name() -> None:
    seen: list[str] = []

    def respond(body: dict) -> dict:
        seen.append(body["messages"][-1]["content"])
        return {"text": f"echo {len(seen)}"}

    with ScriptedModelServer(respond, by_name={"critic_verdict": [{"json": {"score": 9}}]}) as s:
        assert ask(s).choices[0].message.content == "echo 1"
        routed = client(s).chat.completions.create(
            model="m",
            messages=[{"role": "system", "content": "Answer with the `critic_verdict` reply."}],
        )
        assert json.loads(routed.choices[0].message.content) == {"score": 9}
        assert s.requests[-1]["name"] == "critic_verdict"
    named = {"type": "json_schema", "json_schema": {"name": "trigger_matches", "schema": {}}}
    assert call_name({"response_format": named, "messages": []}) == "trigger_matches"


def test_embeddings_are_deterministic_and_similar_for_shared_words(
    model_server: ScriptedModelServer,
) -> None:
    data = client(model_server).embeddings.create(
        model="e", input=["fix the failing parser tests", "parser tests failing", "deploy docs"]
    )
    vectors = [d.embedding for d in data.data]

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])
    again = client(model_server).embeddings.create(model="e", input="deploy docs")
    assert again.data[0].embedding == vectors[2]


def test_runs_as_a_process_with_script_control_and_log(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"replies": ["from the file"], "models": ["tiny"]}))
    log = tmp_path / "requests.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.model_server", "--script", str(script), "--log", str(log)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        remote = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=5)
        assert [m.id for m in remote.models.list().data] == ["tiny"]
        reply = remote.chat.completions.create(model="tiny", messages=[])
        assert reply.choices[0].message.content == "from the file"
        control = base_url.removesuffix("/v1") + "/_control"
        request = urllib.request.Request(
            control + "/script", json.dumps(["pushed later"]).encode(), method="POST"
        )
        urllib.request.urlopen(request, timeout=5).read()
        reply = remote.chat.completions.create(model="tiny", messages=[])
        assert reply.choices[0].message.content == "pushed later"
        logged = json.loads(urllib.request.urlopen(control + "/requests", timeout=5).read())
        assert [r["path"] for r in logged["requests"]][-1] == "/v1/chat/completions"
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert process.returncode == 0
    paths = [json.loads(line)["path"] for line in log.read_text().splitlines()]
    assert paths == ["/v1/models", "/v1/chat/completions", "/v1/chat/completions"]


def test_a_scripted_critic_without_attribution_follows_every_rule_it_was_told_of() -> None:
    verdict = {"score": 8, "verdict": "ok", "unsupported_claims": [], "feedback": ""}
    told = (
        "Rules from earlier runs that were in the agent's prompt (id: rule):\n<<<RULES-1\n"
        "- r-0001-grep-n: Use grep -n.\n- r-0012-calc: Fix calc.py.\nRULES-1>>>\n\n"
        "<<<EVIDENCE\n- r-0099-in-evidence: not a rule the critic was told of\nEVIDENCE>>>"
    )
    system = "Answer with the `critic_verdict` reply."
    with ScriptedModelServer(
        by_name={"critic_verdict": [{"json": verdict}, {"json": {**verdict, "rules_followed": []}}]}
    ) as s:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": told}]
        first = client(s).chat.completions.create(model="m", messages=messages)
        assert json.loads(first.choices[0].message.content) == {
            **verdict,
            "rules_followed": ["r-0001-grep-n", "r-0012-calc"],
            "rules_irrelevant": [],
        }
        second = client(s).chat.completions.create(model="m", messages=messages)
        assert json.loads(second.choices[0].message.content) == {**verdict, "rules_followed": []}

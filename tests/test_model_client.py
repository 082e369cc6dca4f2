"""The verifier client against the scripted server: formats, fallback, repair, retries."""

from __future__ import annotations

import json

import pytest

from daemon.config import VerifierConfig
from daemon.model import CriticVerdict, ModelClient, ModelUnavailable, TriggerMatches
from daemon.model.client import PLACEHOLDER_KEY
from daemon.retry import RetryPolicy
from tests.model_server import PROXY_PAGE, ScriptedModelServer

GOOD = {"score": 8, "verdict": "Done.", "unsupported_claims": [], "feedback": ""}
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
# Three tries, tiny delays, Retry-After waited up to 10 s (on a fake sleep).
FAST = RetryPolicy(first=0.01, cap=0.04, tries=3, longest=10.0)


def make_client(
    server: ScriptedModelServer,
    *,
    retry: RetryPolicy = FAST,
    waits: list[float] | None = None,
    **config: object,
) -> ModelClient:
    """A client whose waits between tries are recorded in `waits`, never slept."""
    settings = {"base_url": server.base_url, "model": "critic-model", "timeout": "2s"} | config
    record = waits if waits is not None else []
    return ModelClient(VerifierConfig(**settings), {}, retry=retry, sleep=record.append)


def formats(server: ScriptedModelServer) -> list[str | None]:
    return [(body.get("response_format") or {}).get("type") for body in server.chat_requests()]


def test_sends_strict_json_schema_named_and_states_it_in_the_prompt(
    model_server: ScriptedModelServer,
) -> None:
    model_server.add({"json": GOOD})
    client = make_client(model_server)
    reply = client.structured("critic_verdict", CriticVerdict, "You judge.", "the evidence")
    assert reply == CriticVerdict(**GOOD)
    body = model_server.chat_requests()[0]
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "critic_verdict"
    assert response_format["json_schema"]["strict"] is True
    schema = response_format["json_schema"]["schema"]
    assert schema["additionalProperties"] is False
    assert schema["required"] == [
        "score",
        "verdict",
        "unsupported_claims",
        "feedback",
        "rules_followed",
        "rules_irrelevant",
    ]
    assert schema["properties"]["rules_followed"]["maxItems"] == 40
    system = body["messages"][0]["content"]
    assert system.startswith("You judge.") and '"unsupported_claims"' in system
    assert body["model"] == "critic-model" and body["messages"][1]["content"] == "the evidence"
    assert model_server.requests[-1]["name"] == "critic_verdict"
    assert client.calls == 1 and client.requests == 1


def test_falls_back_to_json_object_and_remembers(model_server: ScriptedModelServer) -> None:
    model_server.reject_json_schema = True
    model_server.add({"json": GOOD}, {"json": {"matches": ["r-1"]}})
    client = make_client(model_server)
    assert client.structured("critic_verdict", CriticVerdict, "s", "u").score == 8
    assert client.structured("trigger_matches", TriggerMatches, "s", "u").matches == ["r-1"]
    assert formats(model_server) == ["json_schema", "json_object", "json_object"]
    assert model_server.chat_requests()[1]["response_format"]["schema"]["required"] == [
        "score",
        "verdict",
        "unsupported_claims",
        "feedback",
        "rules_followed",
        "rules_irrelevant",
    ]
    assert client.format == "json_object" and client.calls == 2


def test_falls_back_to_no_response_format(model_server: ScriptedModelServer) -> None:
    model_server.reject_json_schema = model_server.reject_json_object = True
    model_server.add({"json": GOOD}, {"json": GOOD})
    client = make_client(model_server)
    client.structured("critic_verdict", CriticVerdict, "s", "u")
    client.structured("critic_verdict", CriticVerdict, "s", "u")
    assert formats(model_server) == ["json_schema", "json_object", None, None]
    # Without any response_format the schema in the prompt still names the reply.
    assert model_server.requests[-1]["name"] == "critic_verdict"


def test_invalid_reply_is_repaired_once_with_the_error(model_server: ScriptedModelServer) -> None:
    model_server.add({"json": {**GOOD, "score": 11}}, {"json": GOOD})
    client = make_client(model_server)
    assert client.structured("critic_verdict", CriticVerdict, "s", "u").score == 8
    repair = model_server.chat_requests()[1]["messages"]
    assert repair[2] == {"role": "assistant", "content": json.dumps({**GOOD, "score": 11})}
    assert repair[3]["role"] == "user" and "score" in repair[3]["content"]
    assert "less than or equal to 10" in repair[3]["content"]


def test_not_json_then_json_is_repaired(model_server: ScriptedModelServer) -> None:
    model_server.add("I think the attempt is fine!", {"json": GOOD})
    assert make_client(model_server).structured("critic_verdict", CriticVerdict, "s", "u")
    assert "no JSON object" in model_server.chat_requests()[1]["messages"][3]["content"]


def test_two_invalid_replies_raise_model_unavailable(model_server: ScriptedModelServer) -> None:
    model_server.add("not json", '{"score": "high"}')
    client = make_client(model_server)
    with pytest.raises(ModelUnavailable, match="still invalid after one repair"):
        client.structured("critic_verdict", CriticVerdict, "s", "u")
    assert len(model_server.chat_requests()) == 2


def test_thinking_and_fences_are_tolerated(model_server: ScriptedModelServer) -> None:
    model_server.add(
        {"text": "<think>hmm</think>\n```json\n" + json.dumps(GOOD) + "\n```"},
        {"text": "Here it is: " + json.dumps({"matches": []}) + " done."},
    )
    client = make_client(model_server)
    assert client.structured("critic_verdict", CriticVerdict, "s", "u").score == 8
    assert client.structured("trigger_matches", TriggerMatches, "s", "u").matches == []
    assert client.requests == 2  # no repair needed


def test_server_down_raises_quickly_after_bounded_retries(
    model_server: ScriptedModelServer,
) -> None:
    model_server.down = True
    waits: list[float] = []
    client = make_client(
        model_server, retry=RetryPolicy(first=0.5, cap=8.0, tries=4), waits=waits, timeout="1s"
    )
    with pytest.raises(ModelUnavailable, match="unreachable"):
        client.structured("critic_verdict", CriticVerdict, "s", "u")
    assert client.requests == 4
    assert waits == [0.5, 1.0, 2.0]  # backoff doubles between the tries


def test_transient_503_is_retried_then_answers(model_server: ScriptedModelServer) -> None:
    model_server.add({"status": 503, "message": "loading model"}, {"json": GOOD})
    client = make_client(model_server)
    assert client.structured("critic_verdict", CriticVerdict, "s", "u").score == 8
    assert client.requests == 2


def test_down_then_up_the_same_client_works_again(model_server: ScriptedModelServer) -> None:
    client = make_client(model_server)
    model_server.down = "503"
    with pytest.raises(ModelUnavailable, match="HTTP 503"):
        client.structured("critic_verdict", CriticVerdict, "s", "u")
    model_server.down = None
    model_server.add({"json": GOOD})
    assert client.structured("critic_verdict", CriticVerdict, "s", "u").score == 8


def test_hanging_server_times_out(model_server: ScriptedModelServer) -> None:
    model_server.add({"hang": 5}, {"hang": 5})
    client = make_client(model_server, retry=RetryPolicy(first=0.01, tries=2), timeout="300ms")
    with pytest.raises(ModelUnavailable, match="no answer within"):
        client.structured("critic_verdict", CriticVerdict, "s", "u")
    assert client.requests == 2


def test_overall_timeout_bounds_the_whole_call(model_server: ScriptedModelServer) -> None:
    model_server.add({"hang": 5}, {"hang": 5}, {"hang": 5})
    client = make_client(model_server, timeout="60s")
    with pytest.raises(ModelUnavailable):
        client.structured("trigger_matches", TriggerMatches, "s", "u", timeout=0.3)
    assert client.requests == 1  # no retry starts past the deadline


def test_the_overall_timeout_starts_after_the_clients_setup(
    model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from daemon.model import client as module

    # A clock that jumps 10 s while the client is set up (a slow first import of openai on a
    # busy machine); a call bounded by 1 s still gets its whole second for the answer.
    jumped = [0.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: time.perf_counter() + jumped[0])
    setup = ModelClient._client

    def slow_setup(self: ModelClient) -> object:
        made = self._openai is None
        found = setup(self)
        if made:
            jumped[0] += 10.0
        return found

    monkeypatch.setattr(ModelClient, "_client", slow_setup)
    model_server.add({"json": {"matches": ["r-0001"]}})
    client = make_client(model_server, timeout="60s")
    reply = client.structured("trigger_matches", TriggerMatches, "s", "u", timeout=1.0)
    assert reply.matches == ["r-0001"] and client.requests == 1
    fresh = make_client(model_server, timeout="60s", embeddings_model="embed")
    assert len(fresh.embeddings(["a"], timeout=1.0)) == 1


def test_http_400_not_about_format_is_unavailable(model_server: ScriptedModelServer) -> None:
    model_server.add(*[{"status": 400, "message": "context length exceeded"}] * 3)
    client = make_client(model_server)
    with pytest.raises(ModelUnavailable, match="context length exceeded"):
        client.structured("critic_verdict", CriticVerdict, "s", "u")
    assert client.format == "json_schema"  # nothing was accepted, so nothing is remembered


def test_no_base_url_is_unavailable_with_the_fix() -> None:
    client = ModelClient(VerifierConfig(), {})
    with pytest.raises(ModelUnavailable, match=r"base_url"):
        client.structured("critic_verdict", CriticVerdict, "s", "u")


def test_key_from_the_named_variable_else_placeholder() -> None:
    config = VerifierConfig(base_url="http://127.0.0.1:9/v1", api_key_env="VERIFIER_KEY")
    assert ModelClient(config, {"VERIFIER_KEY": "sk-real"}).api_key == "sk-real"
    assert ModelClient(config, {}).api_key == PLACEHOLDER_KEY


def test_model_defaults_to_the_first_one_the_server_lists(
    model_server: ScriptedModelServer,
) -> None:
    model_server.models = ["qwen3-small", "other"]
    model_server.add({"json": {"matches": []}})
    client = make_client(model_server, model="")
    client.structured("trigger_matches", TriggerMatches, "s", "u")
    assert model_server.chat_requests()[0]["model"] == "qwen3-small"


def test_embeddings(model_server: ScriptedModelServer) -> None:
    client = make_client(model_server, embeddings_model="embed-small")
    vectors = client.embeddings(["parser tests", f"key {AWS_KEY}"])
    assert len(vectors) == 2 and len(vectors[0]) == 64
    body = model_server.requests[-1]["body"]
    assert body["model"] == "embed-small"
    assert AWS_KEY not in model_server.log_text()
    with pytest.raises(ModelUnavailable, match="embeddings_model"):
        make_client(model_server).embeddings(["x"])
    model_server.down = "503"
    with pytest.raises(ModelUnavailable, match="HTTP 503"):
        client.embeddings(["x"])


def test_every_text_sent_is_redacted(model_server: ScriptedModelServer) -> None:
    secret_line = f"aws_access_key_id = {AWS_KEY}"
    model_server.add("not json " + AWS_KEY, {"json": GOOD})
    client = make_client(model_server)
    client.structured("critic_verdict", CriticVerdict, f"system {secret_line}", secret_line)
    log = model_server.log_text()
    assert AWS_KEY not in log
    assert "[REDACTED:aws-access-key]" in log


# -- Retry-After, malformed answers, a rejected response_format on a 5xx -----------------------


def test_retry_after_is_waited_at_least(model_server: ScriptedModelServer) -> None:
    model_server.add({"status": 429, "message": "slow down", "headers": {"Retry-After": "2"}})
    model_server.add({"json": GOOD})
    waits: list[float] = []
    client = make_client(model_server, waits=waits)
    assert client.structured("critic_verdict", CriticVerdict, "s", "u").score == 8
    assert waits == [2.0]  # what the server asked for, not the policy's 0.01


def test_retry_after_past_what_the_call_can_wait_gives_up_at_once(
    model_server: ScriptedModelServer,
) -> None:
    """A 429 asking for 30 s is not retried in a loop: one request, then 'retry after 30s'."""
    model_server.add(
        *[{"status": 429, "message": "rate limited", "headers": {"Retry-After": "30"}}] * 3
    )
    waits: list[float] = []
    client = make_client(model_server, waits=waits)
    with pytest.raises(ModelUnavailable, match=r"retry after 30s \(at 20") as caught:
        client.structured("critic_verdict", CriticVerdict, "s", "u")
    assert caught.value.retry_after == 30.0
    assert "HTTP 429: rate limited" in str(caught.value)
    assert client.requests == 1 and waits == []


def test_retry_after_past_the_deadline_gives_up_at_once(model_server: ScriptedModelServer) -> None:
    model_server.add({"status": 503, "message": "busy", "headers": {"Retry-After": "5"}})
    waits: list[float] = []
    client = make_client(model_server, waits=waits)
    with pytest.raises(ModelUnavailable, match="retry after 5s") as caught:
        client.structured("trigger_matches", TriggerMatches, "s", "u", timeout=3)
    assert caught.value.retry_after == 5.0
    assert client.requests == 1 and waits == []


def test_the_default_policy_does_not_sleep_through_a_long_retry_after(
    model_server: ScriptedModelServer,
) -> None:
    model_server.add({"status": 429, "message": "later", "headers": {"Retry-After": "30"}})
    waits: list[float] = []
    client = ModelClient(
        VerifierConfig(base_url=model_server.base_url, model="m", timeout="2s"),
        {},
        sleep=waits.append,
    )
    with pytest.raises(ModelUnavailable) as caught:
        client.structured("critic_verdict", CriticVerdict, "s", "u")
    assert caught.value.retry_after == 30.0 and client.requests == 1 and waits == []


def test_a_proxy_html_page_with_200_is_unavailable(model_server: ScriptedModelServer) -> None:
    """A non-JSON 200 (a proxy's error page) is the endpoint being unavailable, retried."""
    model_server.add(*[{"raw": PROXY_PAGE, "content_type": "text/html"}] * 2, {"json": GOOD})
    waits: list[float] = []
    client = make_client(model_server, waits=waits)
    assert client.structured("critic_verdict", CriticVerdict, "s", "u").score == 8
    assert client.requests == 3 and waits == [0.01, 0.02]
    model_server.down = "html"
    with pytest.raises(ModelUnavailable, match="200 answer that is not JSON: '<html>"):
        client.structured("critic_verdict", CriticVerdict, "s", "u")
    # Asking the server for its models, and for embeddings, too.
    with pytest.raises(ModelUnavailable, match="`models` failed after 3 tries: malformed"):
        make_client(model_server, model="").structured("trigger_matches", TriggerMatches, "s", "u")
    with pytest.raises(ModelUnavailable, match="`embeddings` failed after 3 tries: malformed"):
        make_client(model_server, embeddings_model="e").embeddings(["x"])


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("{not json", "malformed answer"),
        ('{"error": "backend busy"}', "without `choices`"),
        ("[1, 2]", "without `choices`"),
    ],
)
def test_a_json_200_of_the_wrong_shape_is_unavailable(
    model_server: ScriptedModelServer, raw: str, problem: str
) -> None:
    model_server.add(*[{"raw": raw, "content_type": "application/json"}] * 3)
    client = make_client(model_server)
    with pytest.raises(ModelUnavailable, match=problem):
        client.structured("critic_verdict", CriticVerdict, "s", "u")
    assert client.requests == 3


def test_llama_cpp_500_rejecting_json_schema_falls_back_and_remembers(
    model_server: ScriptedModelServer,
) -> None:
    """llama-cpp-python answers json_schema with HTTP 500; that is a format, not an outage."""
    model_server.reject_json_schema = "llama.cpp"
    model_server.add({"json": GOOD}, {"json": {"matches": []}})
    waits: list[float] = []
    client = make_client(model_server, waits=waits)
    assert client.structured("critic_verdict", CriticVerdict, "s", "u").score == 8
    assert client.structured("trigger_matches", TriggerMatches, "s", "u").matches == []
    assert formats(model_server) == ["json_schema", "json_object", "json_object"]
    assert model_server.chat_requests()[1]["response_format"]["schema"]["required"] == [
        "score",
        "verdict",
        "unsupported_claims",
        "feedback",
        "rules_followed",
        "rules_irrelevant",
    ]
    assert client.format == "json_object" and waits == []


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_5xx_outage_is_retried_not_a_format_step_down(
    model_server: ScriptedModelServer, status: int
) -> None:
    model_server.add(*[{"status": status, "message": "upstream connect error"}] * 3)
    client = make_client(model_server)
    with pytest.raises(ModelUnavailable, match=f"HTTP {status}"):
        client.structured("critic_verdict", CriticVerdict, "s", "u")
    assert formats(model_server) == ["json_schema"] * 3
    assert client.format == "json_schema"


def test_replies_state_bounds_that_a_grammar_enforces_and_the_client_does_not(
    model_server: ScriptedModelServer,
) -> None:
    """A grammar-driven server stops a looping model at the bounds; others' replies still pass."""
    schema = CriticVerdict.strict_schema()["properties"]
    assert schema["score"]["enum"] == list(range(11))
    assert schema["verdict"]["maxLength"] == 400 and schema["feedback"]["maxLength"] == 1000
    assert schema["unsupported_claims"]["maxItems"] == 10
    long = {**GOOD, "verdict": "x" * 900, "unsupported_claims": ["c"] * 30}
    model_server.add({"json": long})
    reply = make_client(model_server).structured("critic_verdict", CriticVerdict, "s", "u")
    assert len(reply.verdict) == 900 and len(reply.unsupported_claims) == 30


def test_a_reply_with_raw_newlines_inside_its_strings_is_read() -> None:
    """Small local models write a literal newline in a string; what they mean is plain."""
    from daemon.model.client import _parse

    content = '{"score": 7, "verdict": "fine\nreally", "unsupported_claims": [], "feedback": ""}'
    assert "\n" in content and json.loads(content.replace("\n", "\\n"))
    parsed = _parse(CriticVerdict, content)
    assert parsed.score == 7 and parsed.verdict == "fine\nreally"
    with pytest.raises(ValueError):
        _parse(CriticVerdict, '{"score": "seven"}')

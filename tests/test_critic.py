"""The critic call against the scripted server: pass/fail, evidence in the request, no secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.config import VerifierConfig
from daemon.model import ModelClient, ModelUnavailable
from daemon.model.critic import CRITIC_SYSTEM, judge, unjudged
from daemon.model.evidence import build_evidence
from daemon.retry import RetryPolicy
from tests.model_server import ScriptedModelServer

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


def verdict(score: int, feedback: str = "", claims: list[str] | None = None) -> dict:
    return {
        "json": {
            "score": score,
            "verdict": f"Scored {score}.",
            "unsupported_claims": claims or [],
            "feedback": feedback,
        }
    }


def attempt(tmp_path: Path) -> Path:
    folder = tmp_path / "runs" / "r1" / "attempt-1"
    folder.mkdir(parents=True)
    lines = [
        {"stream": "stdout", "type": "tool_call", "tool": "run_shell_command", "call_id": "1",
         "arguments": {"command": "grep -c TODO app.py"}},
        {"stream": "stdout", "type": "tool_result", "call_id": "1", "output": "17\n"},
        {"stream": "stdout", "type": "tool_call", "tool": "read_file", "call_id": "2",
         "arguments": {"path": ".env"}},
        {"stream": "stdout", "type": "tool_result", "call_id": "2",
         "output": f"AWS_ACCESS_KEY_ID={AWS_KEY}\n"},
    ]  # fmt: skip
    (folder / "transcript.jsonl").write_text(
        "".join(json.dumps({"ts": "2026-11-29T02:00:01Z", **line}) + "\n" for line in lines)
    )
    (folder / "checks.log").write_text("$ true\nexit 0\n")
    return folder


def client_for(server: ScriptedModelServer) -> ModelClient:
    config = VerifierConfig(base_url=server.base_url, model="critic-model", timeout="2s")
    return ModelClient(config, {}, retry=RetryPolicy(first=0.01, tries=2), sleep=lambda _: None)


SUMMARY = "Review done: line 17 of app.py has a TODO; all tests pass."


def test_score_8_with_checks_passing_passes(model_server: ScriptedModelServer, tmp_path: Path):
    model_server.add(verdict(8))
    evidence = build_evidence(attempt(tmp_path), "Review app.py", SUMMARY, 12000)
    result = judge(client_for(model_server), evidence, threshold=7, checks_passed=True)
    assert result.passed and result.judged and result.score == 8
    assert result.model == "critic-model" and result.threshold == 7

    body = model_server.chat_requests("critic_verdict")[0]
    assert body["response_format"]["json_schema"]["name"] == "critic_verdict"
    user = body["messages"][1]["content"]
    assert "grep -c TODO app.py" in user and SUMMARY in user  # the evidence went out
    assert "loopd's own run of the checks: passed" in user
    assert AWS_KEY not in model_server.log_text()  # and no secret with it


def test_score_3_fails_with_feedback_and_claims(model_server: ScriptedModelServer, tmp_path: Path):
    model_server.add(
        verdict(
            3,
            "Take line numbers from `grep -n`, not `grep -c`; run the tests before claiming.",
            ["line 17 of app.py has a TODO", "all tests pass"],
        )
    )
    evidence = build_evidence(attempt(tmp_path), "Review app.py", SUMMARY, 12000)
    result = judge(client_for(model_server), evidence, threshold=7, checks_passed=True)
    assert not result.passed and result.score == 3
    assert result.unsupported_claims == ["line 17 of app.py has a TODO", "all tests pass"]
    assert "grep -n" in result.feedback


def test_high_score_never_passes_failed_checks_or_violations(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.add(verdict(10), verdict(10))
    folder = attempt(tmp_path)
    clean = build_evidence(folder, "t", SUMMARY, 12000)
    assert not judge(client_for(model_server), clean, 7, checks_passed=False).passed
    violated = build_evidence(folder, "t", SUMMARY, 12000, ["tests/test_app.py is protected"])
    result = judge(client_for(model_server), violated, 7, checks_passed=True)
    assert not result.passed and result.violations == ["tests/test_app.py is protected"]
    assert (
        "tests/test_app.py is protected"
        in model_server.chat_requests()[-1]["messages"][1]["content"]
    )


def test_unavailable_model_propagates(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    model_server.add("no json here", "still none")
    evidence = build_evidence(attempt(tmp_path), "t", SUMMARY, 12000)
    with pytest.raises(ModelUnavailable):
        judge(client_for(model_server), evidence, 7, checks_passed=True)
    model_server.down = True
    with pytest.raises(ModelUnavailable):
        judge(client_for(model_server), evidence, 7, checks_passed=True)


def test_system_prompt_checks_claims_against_evidence() -> None:
    for must in ("tests it never ran", "line that does", "grep -c", "unsupported claim"):
        assert must in CRITIC_SYSTEM


def test_critic_off_is_recorded_as_unjudged() -> None:
    result = unjudged(checks_passed=True, violations=[])
    assert result.passed and not result.judged and result.score is None
    assert "not judged by a model" in result.verdict.lower()
    assert not unjudged(checks_passed=True, violations=["ref main moved"]).passed


RULES = [("r-0001-grep-n", "Take line numbers from `grep -n`."), ("r-0002-docs", "Edit docs/.")]


def attributed(score: int, **lists: object) -> dict:
    reply = verdict(score)
    reply["json"].update(lists)
    return reply


def test_the_critic_is_told_the_rules_and_its_attribution_is_cleaned(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.add(
        attributed(
            8,
            rules_followed=["r-0001-grep-n", " r-0002-docs", "r-0404-invented"],
            rules_irrelevant=["r-0002-docs"],
        )
    )
    evidence = build_evidence(attempt(tmp_path), "Review app.py", SUMMARY, 12000)
    result = judge(client_for(model_server), evidence, 7, checks_passed=True, rules=RULES)
    # Unknown ids dropped; an id in both lists is neither.
    assert result.rules == ["r-0001-grep-n", "r-0002-docs"]
    assert result.rules_followed == ["r-0001-grep-n"] and result.rules_irrelevant == []
    assert result.attributed
    user = model_server.chat_requests("critic_verdict")[0]["messages"][1]["content"]
    assert "- r-0001-grep-n: Take line numbers from `grep -n`." in user
    assert user.index("r-0002-docs") < user.index("<<<EVIDENCE")
    assert "which listed rules it followed" in user
    assert "rules_irrelevant gets its id" in CRITIC_SYSTEM


def test_a_reply_without_the_lists_attributes_nothing_and_a_wrong_one_is_repaired(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    bare = {"score": 8, "verdict": "ok", "unsupported_claims": [], "feedback": ""}
    # As a server that ignores the schema answers (sent as text: the scripted server would
    # otherwise fill in the lists).
    model_server.add({"text": json.dumps(bare)})
    evidence = build_evidence(attempt(tmp_path), "t", SUMMARY, 12000)
    result = judge(client_for(model_server), evidence, 7, checks_passed=True, rules=RULES)
    assert result.passed and not result.attributed and result.rules_followed == []
    # A list given as a string is invalid: one repair, then the fixed reply counts.
    model_server.add(
        {"json": {**bare, "rules_followed": "r-0001-grep-n", "rules_irrelevant": []}},
        {"json": {**bare, "rules_followed": ["r-0001-grep-n"], "rules_irrelevant": []}},
    )
    result = judge(client_for(model_server), evidence, 7, checks_passed=True, rules=RULES)
    assert result.attributed and result.rules_followed == ["r-0001-grep-n"]
    repair = model_server.chat_requests("critic_verdict")[-1]["messages"][-1]["content"]
    assert "rules_followed" in repair and "not a valid `critic_verdict` object" in repair
    # Without rules in the prompt there is nothing to attribute.
    model_server.add(verdict(8))
    assert not judge(client_for(model_server), evidence, 7, checks_passed=True).attributed
    last = model_server.chat_requests("critic_verdict")[-1]["messages"][1]["content"]
    assert "No rules from earlier runs were in the agent's prompt" in last
    off = unjudged(checks_passed=True, violations=[], rules=["r-0001-grep-n"])
    assert off.rules == ["r-0001-grep-n"] and not off.attributed

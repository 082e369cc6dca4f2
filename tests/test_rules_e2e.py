"""The promotion loop end to end with the real client and the scripted server.

The run lifecycle is simulated with the calls the lead's code makes: learn after a failed
attempt, select and render for the next prompt, record the run, then a later run of
another task.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from daemon.config import VerifierConfig
from daemon.model.client import ModelClient
from daemon.retry import RetryPolicy
from daemon.rules.evaluator import JudgeCache, render_rules, select_rules
from daemon.rules.library import RuleLibrary
from daemon.rules.postmortem import learn_from_attempt
from daemon.rules.promotion import record_run
from daemon.state.events import EventLog
from tests.test_rules_verifier import RUN, TASK, make_attempt

NOW = datetime(2026, 11, 29, 2, 14, tzinfo=UTC)

POSTMORTEM = {
    "kind": "failure",
    "rule": "Take line numbers from `grep -n` or the file itself, never from `grep -c`.",
    "why": "The review cited line 17 of app.py; 17 was what `grep -c TODO app.py` printed.",
    "how_to_apply": "Before naming a line, open the file at that line and quote it.",
    "trigger_intent": "Reviews or edits that cite specific line numbers of a source file",
    "trigger_patterns": [r"(?i)\bline\s+numbers?\b"],
    "severity": "remind",
    "evidence": [{"path": "transcript.jsonl", "line": 2, "quote": "grep -c TODO app.py"}],
}


def test_a_failure_becomes_a_trial_rule_that_fires_helps_and_is_promoted(
    tmp_path: Path, model_server: Any
) -> None:
    state = tmp_path / "state"
    library = RuleLibrary(tmp_path / "rules")
    events = EventLog(state / "events.jsonl")
    cfg = VerifierConfig(base_url=model_server.base_url, model="verifier-model")
    client = ModelClient(cfg, environ={})
    cache = JudgeCache()
    model_server.add({"json": POSTMORTEM}, name="postmortem_rule")
    model_server.add(
        {"json": {"grounded": True, "unsupported": [], "contradicts": [], "reason": "ok"}},
        name="rule_verification",
    )

    # Attempt 1 failed: post-mortem, then the verifier.
    attempt = make_attempt(state)
    verdict = {"score": 2, "verdict": "cites a line that holds no TODO", "feedback": "use grep -n"}
    result = learn_from_attempt(
        library, client, cfg, state, attempt, verdict, TASK, "review", RUN, events, NOW
    )
    assert result is not None and result.decision == "accepted", result and result.reasons
    rid = result.rule.id
    assert library.get(rid).status == "trial"

    # Attempt 2's prompt has it.
    selection = select_rules(
        library, TASK, "review", [], client, cfg, events, NOW, run=RUN, cache=cache
    )
    assert selection.ids == [rid] and selection.fired[0].why == "pattern"
    assert "never from `grep -c`" in render_rules(selection.rules)
    assert selection.model_calls == 0
    followed = dict.fromkeys(selection.ids, "followed")
    record_run(
        library, selection.ids, "review", TASK, True, events, NOW, state_root=state,
        attribution=followed,
    )  # fmt: skip
    assert library.get(rid).status == "trial"  # same task: not yet

    # A later run of another task that the rule matches passes too.
    later = NOW + timedelta(days=1)
    other = "Fix the off-by-one in lib.py and report the line numbers you changed."
    selection = select_rules(library, other, "fixes", [], client, cfg, events, later, cache=cache)
    assert rid in selection.ids
    followed = dict.fromkeys(selection.ids, "followed")
    record_run(
        library, selection.ids, "fixes", other, True, events, later, state_root=state,
        attribution=followed,
    )  # fmt: skip
    stored = library.get(rid)
    assert stored.status == "active"
    assert (stored.rule.fired, stored.rule.helped, stored.rule.harmed) == (2, 2, 0)
    assert stored.rule.verified_by == ["grounding", "duplicates", "model:verifier-model"]
    names = [r["name"] for r in model_server.requests if r["path"].endswith("/chat/completions")]
    assert names == ["postmortem_rule", "rule_verification"]
    types = [e["type"] for e in events.read()]
    assert types == [
        "rule_proposed",
        "rule_accepted",
        "rule_fired",
        "rule_fired",
        "rule_promoted",
    ]


def test_the_model_down_defers_learning_with_an_event(tmp_path: Path, model_server: Any) -> None:
    state = tmp_path / "state"
    events = EventLog(state / "events.jsonl")
    cfg = VerifierConfig(base_url=model_server.base_url, model="m", timeout="2s")
    model_server.down = "503"
    client = ModelClient(cfg, environ={}, retry=RetryPolicy(tries=1))
    result = learn_from_attempt(
        RuleLibrary(tmp_path / "rules"),
        client,
        cfg,
        state,
        make_attempt(state),
        {},
        TASK,
        "review",
        RUN,
        events,
        NOW,
    )
    assert result is None
    assert [e["type"] for e in events.read()] == ["rule_deferred"]

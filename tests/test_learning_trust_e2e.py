"""Learning that deserves trust, end to end through `loopd once` and `loopd rules`.

Scope (a learned rule stays with its repository), the critic's attribution (followed,
irrelevant, or said nothing of), and the four kinds kept apart. The home, agent and helpers
are those of tests/test_learning_e2e.py: the agent fixes the right file only when its
prompt's rules name it.
"""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from daemon.config import load_home
from daemon.home import Home
from daemon.rules.postmortem import propose_rule
from daemon.rules.rulefile import KIND_WORDS
from daemon.runparts.services import RunServices
from daemon.runs.executor import RunExecutor, new_run
from daemon.scheduling.queue import PendingRun
from daemon.state.records import Trigger, make_run_id
from tests.helpers import events, loopd
from tests.test_learning_e2e import (
    AGREES,
    CRITIC,
    LEARNED,
    RULE_MARK,
    TASK_A,
    TASK_B,
    once,
    rule_file,
    run_events,
    seed,
    setup_home,
)
from tests.test_rules_verifier import FakeModel, make_attempt


def test_a_rule_learned_in_loop_a_does_not_fire_in_loop_b_on_another_repository(
    tmp_path: Path, model_server: Any
) -> None:
    home, _ = setup_home(
        tmp_path,
        model_server,
        {"calc": {"task": TASK_A, "max_attempts": 2}, "sums": {"task": TASK_B, "max_attempts": 1}},
    )
    model_server.add({"json": LEARNED}, name="postmortem_rule")
    model_server.add({"json": AGREES}, name="rule_verification")
    code, run_a, _ = once(home, "calc")
    assert code == 0
    [rid] = [p.stem for p in (home / "rules" / "trial").glob("*.md")]
    front = rule_file(home, "trial", rid)
    assert front["scope"] == {
        "repos": [str((tmp_path / "repo-calc").resolve())],
        "loops": ["*"],
        "paths": [],
    }

    # Loop sums works on another repository: its task matches the rule's pattern, yet the
    # rule is not asked about, does not fire, and is not in the prompt.
    code, run_b, run = once(home, "sums")
    assert code == 1 and run["rules_fired"] == []
    assert run_events(home, run_b, "rule_fired") == []
    prompt = (home / "state" / "runs" / run_b / "attempt-1" / "prompt.md").read_text()
    assert LEARNED["rule"] not in prompt
    assert rid not in json.dumps(model_server.chat_requests("trigger_matches"))
    assert rule_file(home, "trial", rid)["fired"] == 1  # its own run only

    # A person widens it: it fires on every repository.
    out = loopd(home, "rules", "promote", rid, "--scope", "all")
    assert out.returncode == 0, out.stderr
    assert f"{rid}: scope {tmp_path / 'repo-calc'}" in out.stdout
    assert "every repository" in out.stdout
    front = rule_file(home, "active", rid)
    assert "repos" not in front["scope"]
    code, run_c, run = once(home, "sums")
    assert code == 0 and run["rules_fired"] == [rid]


def test_a_rule_learned_through_the_temporal_engine_is_scoped_by_the_home(
    tmp_path: Path,
) -> None:
    from daemon.engine.temporal.lessons import lesson_rule
    from daemon.engine.temporal.models import LessonOutput

    # The worker proposes from its own copy of the repository; the home files the rule
    # scoped to the person's repository, as its run record names it, whatever the worker said.
    model = FakeModel(postmortem_rule=[LEARNED])
    rule = propose_rule(model, make_attempt(tmp_path / "state"), "", {}, TASK_A, "calc", "r1")
    for sent in ([], ["/worker/clone"]):
        worker = rule.model_copy(update={"scope": rule.scope.model_copy(update={"repos": sent})})
        lesson = LessonOutput(decision="accepted", rule=worker.model_dump(mode="json"))
        filed = lesson_rule(lesson, "/home/person/repo")
        assert filed.scope.repos == ["/home/person/repo"] and filed.rule == LEARNED["rule"]


def critic_saying(**lists: list[str]) -> dict[str, Any]:
    return {"json": {**CRITIC, "rules_followed": [], "rules_irrelevant": [], **lists}}


def seeded_rule(home: Path) -> str:
    """A trial rule from another loop's run, naming the file the agent must fix."""
    return seed(
        home,
        "trial",
        trigger_intent="Fixing arithmetic in calc.py",
        trigger_patterns=[r"(?i)\bcalc\.py\b"],
        source_run=make_run_id("ledger", datetime(2026, 11, 1, tzinfo=UTC)),
        source_task="Fix the ledger totals.",
        rule=f"Fix `add` in {RULE_MARK}; `legacy/calc.py` is dead code.",
    )


def test_a_rule_the_critic_calls_irrelevant_stays_in_trial_with_idle_counted(
    tmp_path: Path, model_server: Any
) -> None:
    home, _ = setup_home(tmp_path, model_server, {"calc": {"task": TASK_A, "max_attempts": 1}})
    rid = seeded_rule(home)
    model_server.add(critic_saying(rules_irrelevant=[rid]), name="critic_verdict")
    code, run_id, run = once(home, "calc")
    assert code == 0 and run["outcome"] == "succeeded" and run["rules_fired"] == [rid]
    front = rule_file(home, "trial", rid)
    assert (front["fired"], front["helped"], front["harmed"], front["idle"]) == (1, 0, 0, 1)
    assert run_events(home, run_id, "rule_promoted") == []
    # The critic was told the rule's id; the verdict and the run record keep its answer.
    [call] = model_server.chat_requests("critic_verdict")
    assert f"- {rid}: Fix `add` in {RULE_MARK}" in call["messages"][-1]["content"]
    schema = call["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["rules_irrelevant"]["maxItems"] == 40
    verdict = tomllib.loads((home / "state/runs" / run_id / "attempt-1/verdict.toml").read_text())
    assert verdict["rules"] == [rid] and verdict["rules_irrelevant"] == [rid]
    assert verdict["rules_followed"] == [] and verdict["attributed"] is True
    assert run["attempts"][0]["rules_irrelevant"] == [rid]
    [event] = run_events(home, run_id, "verdict")
    assert event["rules_irrelevant"] == [rid]


def test_a_rule_followed_in_a_passing_run_of_a_different_task_is_promoted(
    tmp_path: Path, model_server: Any
) -> None:
    home, _ = setup_home(tmp_path, model_server, {"calc": {"task": TASK_A, "max_attempts": 1}})
    rid = seeded_rule(home)
    # The critic names an id it was not told about too: that one is dropped.
    model_server.add(
        critic_saying(rules_followed=[rid, "r-9999-not-in-the-prompt"]), name="critic_verdict"
    )
    code, run_id, _ = once(home, "calc")
    assert code == 0
    front = rule_file(home, "active", rid)
    assert (front["fired"], front["helped"], front["harmed"], front["idle"]) == (1, 1, 0, 0)
    assert front["reason"] == "followed in a passing run of loop calc"
    [promoted] = run_events(home, run_id, "rule_promoted")
    assert promoted["rule"] == rid and promoted["kind"] == "failure"
    verdict = tomllib.loads((home / "state/runs" / run_id / "attempt-1/verdict.toml").read_text())
    assert verdict["rules_followed"] == [rid]


@pytest.mark.parametrize("how", ["critic off", "critic says nothing"])
def test_without_attribution_a_firing_counts_fired_alone(
    tmp_path: Path, model_server: Any, how: str
) -> None:
    extra = {"critic": "off"} if how == "critic off" else {}
    home, _ = setup_home(
        tmp_path, model_server, {"calc": {"task": TASK_A, "max_attempts": 1, **extra}}
    )
    rid = seeded_rule(home)
    model_server.add(critic_saying(), name="critic_verdict")  # neither list names it
    code, run_id, run = once(home, "calc")
    assert code == 0 and run["rules_fired"] == [rid]
    front = rule_file(home, "trial", rid)
    assert (front["fired"], front["helped"], front["harmed"], front["idle"]) == (1, 0, 0, 0)
    verdict = tomllib.loads((home / "state/runs" / run_id / "attempt-1/verdict.toml").read_text())
    assert verdict["rules"] == [rid]
    assert verdict["attributed"] is (how == "critic says nothing")
    assert len(model_server.chat_requests("critic_verdict")) == (0 if extra else 1)


# --- the four kinds --------------------------------------------------------------------------


def test_the_post_mortem_asks_for_the_kind_that_fits(tmp_path: Path) -> None:
    attempt = make_attempt(tmp_path / "state")
    reply = {**LEARNED, "kind": "decision", "severity": "remind"}
    asked = []
    for note, hint, want in (
        ("", None, "failure"),  # a decision needs a person's note
        ("Never touch legacy/: the finance team owns it.", None, "decision"),
        ("", "skill", "skill"),
    ):
        model = FakeModel(postmortem_rule=[reply])
        rule = propose_rule(
            model, attempt, "", {}, TASK_A, "calc", "r", hint, note=note, repo="/src/app"
        )
        asked.append(model.calls[0][1])
        assert rule.kind == want and rule.scope.repos == ["/src/app"]
    assert 'No person left a note for this run: write kind "knowledge" or "failure"' in asked[0]
    assert "<note>\nNever touch legacy/: the finance team owns it.\n</note>" in asked[1]
    assert '"decision"' in asked[1]
    assert asked[2].endswith('Write a rule of kind "skill".')


def test_a_persons_note_becomes_a_decision_kept_apart_in_list_and_report(
    tmp_path: Path, model_server: Any
) -> None:
    """A run carrying a person's note (as `escalations resolve --retry --note` sends it)."""
    home_path, _ = setup_home(tmp_path, model_server, {"calc": {"task": TASK_A, "max_attempts": 1}})
    note = "Only the top-level calc.py matters; legacy/ is frozen."
    decision = {
        **LEARNED,
        "kind": "decision",
        "rule": "Never edit `legacy/calc.py`: a person froze legacy/.",
        "why": f'The note said "{note}" and the agent still printed "patched legacy/calc.py".',
        "evidence": [{"path": "prompt.md", "line": 1, "quote": note}],
    }
    model_server.add({"json": decision}, name="postmortem_rule")
    model_server.add({"json": AGREES}, name="rule_verification")
    home = Home(home_path)
    loaded = load_home(home_path)
    services = RunServices(home=home, config=loaded.daemon, store=home.state())
    loop = loaded.loops["calc"]
    now = datetime.now(UTC)
    trigger = Trigger(loop="calc", kind="retry", reason="resolved", note=note, ts=now)
    pending = PendingRun(id=services.store.new_run_id("calc", now), loop="calc", trigger=trigger,
                         queued_at=now)  # fmt: skip
    run = RunExecutor(services, loop, new_run(services, loop, pending)).execute()
    assert run.outcome == "escalated"
    [postmortem] = model_server.chat_requests("postmortem_rule")
    assert f"<note>\n{note}\n</note>" in postmortem["messages"][-1]["content"]
    [path] = (home_path / "rules" / "trial").glob("*.md")
    text = path.read_text()
    assert f'kind = "decision"  # {KIND_WORDS["decision"]}' in text
    seed(home_path, "active", rule="Run `python3 check.py` first.", kind="knowledge")
    seed(home_path, "trial", rule="Read `check.py` imports first.", kind="skill")
    listed = loopd(home_path, "rules", "list").stdout
    headings = [line.split(" (")[0] for line in listed.splitlines() if not line.startswith(" ")]
    assert headings == ["decision", "knowledge", "skill"]
    assert "decision (1): what a person or a passing run decided; follow it" in listed
    report = loopd(home_path, "report", "--since", "1d", "--json")
    rules = json.loads(report.stdout)["rules"]
    assert [(r["rule"], r["kind"], r["change"]) for r in rules] == [
        (path.stem, "decision", "learned (trial)")
    ]
    markdown = next((home_path / "state" / "reports").glob("*.md")).read_text()
    assert "### decision" in markdown and f"`{path.stem}` learned (trial)" in markdown
    assert [e["kind"] for e in events(home_path) if e["type"] == "rule_accepted"] == ["decision"]

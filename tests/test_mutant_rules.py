"""Tests that kill mutants of the trigger evaluator and the rule verifier that the other
tests let live (bench/mutation.py): a rule's scope, the "rests on nothing" guard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.config import VerifierConfig
from daemon.rules.evaluator import in_scope
from daemon.rules.library import RuleLibrary
from daemon.rules.rulefile import Rule, Scope
from daemon.rules.verifier import verify_candidate
from daemon.state.events import EventLog
from tests.test_rules_verifier import NOW, candidate, make_attempt


def scoped(**scope: Any) -> Rule:
    return Rule(rule="r", why="w", how_to_apply="h", scope=Scope(**scope))


# -- scope ---------------------------------------------------------------------------------------


def test_one_changed_path_in_scope_is_enough() -> None:
    rule = scoped(paths=["db/**"])
    # A task that touches the database and the docs is a database task all the same.
    assert in_scope(rule, "app", ["docs/x.md", "db/m/0001.sql"])
    assert in_scope(rule, "app", ["db/m/0001.sql", "docs/x.md"])
    assert not in_scope(rule, "app", ["docs/x.md", "src/a.py"])


def test_any_of_the_scopes_globs_admits_a_path() -> None:
    rule = scoped(paths=["db/**", "migrations/**"])
    assert in_scope(rule, "app", ["migrations/0002.py"])
    assert in_scope(rule, "app", ["db/schema.sql"])
    assert not in_scope(rule, "app", ["src/a.py"])


def test_no_known_paths_cannot_exclude_a_rule_and_no_scope_paths_admit_all() -> None:
    assert in_scope(scoped(paths=["db/**"]), "app", [])
    assert in_scope(scoped(), "app", ["src/a.py"])


def test_loops_are_globs_and_no_loop_given_is_not_looked_at() -> None:
    rule = scoped(loops=["api*", "web"])
    assert in_scope(rule, "api-v2", [])
    assert in_scope(rule, "web", [])
    assert not in_scope(rule, "webapp", [])
    assert not in_scope(rule, "API", [])  # case counts
    assert in_scope(rule, "", [])
    assert in_scope(scoped(loops=["x", "*"]), "anything", [])
    assert in_scope(scoped(loops=[]), "anything", [])


def test_repos_compare_resolved_and_none_given_is_not_looked_at(tmp_path: Path) -> None:
    real = tmp_path / "repo"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    rule = scoped(repos=[str(tmp_path / "other"), str(tmp_path / "link")])
    assert in_scope(rule, "app", [], str(real))
    assert in_scope(rule, "app", [], str(real) + "/")
    assert not in_scope(rule, "app", [], str(tmp_path / "elsewhere"))
    assert in_scope(rule, "app", [], None)
    assert in_scope(scoped(), "app", [], str(tmp_path / "elsewhere"))


# -- the verifier's "rests on nothing" -----------------------------------------------------------


@pytest.fixture
def setting(tmp_path: Path) -> dict[str, Any]:
    state = tmp_path / "state"
    return {
        "library": RuleLibrary(tmp_path / "rules"),
        "attempt": make_attempt(state),
        "state": state,
        "events": EventLog(state / "events.jsonl"),
        "cfg": VerifierConfig(base_url="http://127.0.0.1:9/v1", model="fake-verifier"),
    }


def verify(setting: dict[str, Any], rule: Rule, **kw: Any):  # noqa: ANN201
    return verify_candidate(
        setting["library"],
        rule,
        setting["attempt"],
        None,
        setting["cfg"],
        setting["events"],
        NOW,
        state_root=setting["state"],
        use_model=False,
        **kw,
    )


NOTHING = "the rule rests on nothing in the evidence"


def test_a_rule_that_claims_nothing_and_cites_nothing_is_rejected(
    setting: dict[str, Any],
) -> None:
    rule = candidate(
        rule="Take line numbers from `grep -n`, never from `grep -c`.",
        why="Counting is not locating.",
        evidence=[],
    )
    result = verify(setting, rule)
    assert result.decision == "rejected"
    assert NOTHING in result.reasons[0]
    stored = setting["library"].get(result.rule.id)
    assert stored.status == "rejected" and NOTHING in stored.rule.reason


def test_a_why_quoting_the_evidence_is_enough_ground(setting: dict[str, Any]) -> None:
    rule = candidate(
        rule="Take line numbers from `grep -n`, never from `grep -c`.",
        why="The agent took what `grep -c TODO app.py` printed for a line number.",
        evidence=[],
    )
    result = verify(setting, rule)
    assert result.decision == "accepted", result.reasons


def test_a_cited_quote_is_enough_ground_without_claims(setting: dict[str, Any]) -> None:
    rule = candidate(
        rule="Take line numbers from `grep -n`, never from `grep -c`.",
        why="Counting is not locating.",
    )
    result = verify(setting, rule)
    assert result.decision == "accepted", result.reasons
    assert [e.quote for e in result.rule.evidence] == ["grep -c TODO app.py"]

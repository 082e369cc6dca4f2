"""Promotion and retirement: counters, trial -> active, the harm bound, expiry, evidence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.rules.library import RuleLibrary
from daemon.rules.promotion import record_run, retire_stale
from daemon.rules.rulefile import Evidence, Rule
from daemon.state.events import EventLog

NOW = datetime(2026, 11, 29, 2, 14, tzinfo=UTC)
RUN = "20261129T021000Z-review-3f2a"
TASK = "Review app.py and list concrete problems with line numbers."


def trial_rule(library: RuleLibrary, status: str = "trial", **kw) -> str:  # noqa: ANN003
    fields = dict(
        id="",
        trigger_patterns=[r"(?i)\breview"],
        source_run=RUN,
        source_task=TASK,
        rule="Take line numbers from `grep -n`.",
        why="17 came from `grep -c`.",
        how_to_apply="Quote the line.",
    )
    fields.update(kw)
    return library.add(Rule(**fields), status).rule.id  # type: ignore[arg-type]


def followed(*ids: str) -> dict[str, str]:
    return dict.fromkeys(ids, "followed")


def test_a_passing_run_of_the_same_task_counts_but_does_not_promote(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    rid = trial_rule(library)
    changes = record_run(
        library,
        [rid],
        "review",
        "  Review app.py and list concrete\nproblems with line numbers. ",
        True,
        None,
        NOW,
        attribution=followed(rid),
    )
    stored = library.get(rid)
    assert changes == [] and stored.status == "trial"
    assert (stored.rule.fired, stored.rule.helped, stored.rule.harmed) == (1, 1, 0)


def test_a_passing_run_of_another_task_or_loop_promotes(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    events = EventLog(tmp_path / "events.jsonl")
    by_task = trial_rule(library)
    by_loop = trial_rule(library, rule="Use `nl -ba` to number lines.")
    review = "Review lib.py for bugs."
    record_run(
        library, [by_task], "review", review, True, events, NOW, attribution=followed(by_task)
    )
    record_run(library, [by_loop], "audit", TASK, True, events, NOW, attribution=followed(by_loop))
    assert library.get(by_task).status == "active" and library.get(by_loop).status == "active"
    promoted = [e for e in events.read() if e["type"] == "rule_promoted"]
    assert [(e["rule"], e["from"], e["to"]) for e in promoted] == [
        (by_task, "trial", "active"),
        (by_loop, "trial", "active"),
    ]
    # A failing run of another task counts as harm and promotes nothing.
    third = trial_rule(library, rule="Use `wc -l` before citing.")
    record_run(library, [third], "audit", "Other", False, events, NOW, attribution=followed(third))
    assert library.get(third).status == "trial" and library.get(third).rule.harmed == 1


def test_harm_minus_help_of_two_retires(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    events = EventLog(tmp_path / "events.jsonl")
    rid = trial_rule(library, status="active")
    said = followed(rid)
    record_run(library, [rid], "review", TASK, True, events, NOW, attribution=said)  # helped 1
    record_run(library, [rid], "review", TASK, False, events, NOW, attribution=said)  # harmed 1
    record_run(library, [rid], "review", TASK, False, events, NOW, attribution=said)  # harmed 2
    assert library.get(rid).status == "active"
    changes = record_run(library, [rid], "review", TASK, False, events, NOW, attribution=said)
    stored = library.get(rid)
    assert stored.status == "retired" and "harmed 3 runs and helped 1" in stored.rule.reason
    assert [c.to for c in changes] == ["retired"]
    demoted = [e for e in events.read() if e["type"] == "rule_demoted"]
    assert demoted[0]["to"] == "retired" and demoted[0]["rule"] == rid
    # A retired rule is not counted any more; its file is kept.
    record_run(library, [rid], "review", TASK, False, events, NOW, attribution=said)
    assert library.get(rid).rule.harmed == 3 and stored.path.exists()


def test_expiry_and_lost_evidence_retire(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    state = tmp_path / "state"
    evidence = state / "runs" / RUN / "attempt-1" / "checks.log"
    evidence.parent.mkdir(parents=True)
    evidence.write_text("FAIL: line 17\n")
    cited = [Evidence(path=f"runs/{RUN}/attempt-1/checks.log", line=1, quote="FAIL: line 17")]
    expiring = trial_rule(library, expires=NOW - timedelta(seconds=1))
    grounded = trial_rule(library, rule="Use `nl -ba` to number lines.", evidence=cited)
    starter = trial_rule(library, rule="Use `wc -l` first.", status="active")  # no evidence
    assert [c.id for c in retire_stale(library, None, NOW, state_root=state)] == [expiring]
    evidence.unlink()
    changes = record_run(library, [grounded, starter], "x", "y", True, None, NOW, state_root=state)
    assert [(c.id, c.to) for c in changes] == [(grounded, "retired")]
    assert "evidence no longer resolves" in library.get(grounded).rule.reason
    assert library.get(starter).status == "active"


def test_a_rule_deleted_during_the_run_is_skipped(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    rid = trial_rule(library)
    library.get(rid).path.unlink()
    assert record_run(library, [rid, "r-9999-unknown"], "x", "y", True, None, NOW) == []


def test_an_irrelevant_firing_counts_idle_and_never_promotes(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    events = EventLog(tmp_path / "events.jsonl")
    rid = trial_rule(library)
    for _ in range(3):  # passing runs of other loops, where the critic called it irrelevant
        record_run(library, [rid], "docs", "Fix the README.", True, events, NOW,
                   attribution={rid: "irrelevant"})  # fmt: skip
    stored = library.get(rid)
    assert stored.status == "trial"
    assert (stored.rule.fired, stored.rule.helped, stored.rule.harmed, stored.rule.idle) == (
        3, 0, 0, 3,
    )  # fmt: skip
    assert [e for e in events.read() if e["type"] == "rule_promoted"] == []
    # idle is a counter: the rule's version does not change with it.
    assert stored.rule.version == stored.rule.model_copy(update={"idle": 0}).version


def test_without_attribution_a_firing_counts_fired_alone(tmp_path: Path) -> None:
    """No critic (or critic = "off"): nothing says the rule was followed, so nothing more."""
    library = RuleLibrary(tmp_path / "rules")
    rid = trial_rule(library)
    record_run(library, [rid], "docs", "Fix the README.", True, None, NOW)
    record_run(library, [rid], "docs", "Fix the README.", False, None, NOW, attribution={})
    stored = library.get(rid)
    assert stored.status == "trial"
    assert (stored.rule.fired, stored.rule.helped, stored.rule.harmed, stored.rule.idle) == (
        2, 0, 0, 0,
    )  # fmt: skip


def test_a_rule_too_broad_stays_in_trial_with_the_reason(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    events = EventLog(tmp_path / "events.jsonl")
    rid = trial_rule(library)
    asked: list[str] = []

    def too_broad(rule: Rule) -> str:
        asked.append(rule.id)
        return "too broad: fires on 9 of 10 runs of other loops (90%, over [rules] max_breadth 0.3)"

    record_run(library, [rid], "docs", "Fix the README.", True, events, NOW,
               attribution=followed(rid), too_broad=too_broad)  # fmt: skip
    stored = library.get(rid)
    assert asked == [rid] and stored.status == "trial"
    assert stored.rule.reason.startswith("too broad: fires on 9 of 10")
    assert stored.rule.helped == 1
    [held] = [e for e in events.read() if e["type"] == "rule_held"]
    assert held["rule"] == rid and "max_breadth" in held["reason"]
    # Not asked when nothing is due: a failing run.
    record_run(library, [rid], "docs", "Fix the README.", False, events, NOW,
               attribution=followed(rid), too_broad=too_broad)  # fmt: skip
    assert asked == [rid]

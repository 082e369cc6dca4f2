"""Pruning old attempt folders and loopd/* branches, keeping what people and rules cite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.housekeeping import PRUNED_MARKER, cited_by_rules, prune
from daemon.people.escalation import resolve, write_escalation
from daemon.state.store import StateStore
from tests.helpers import git, make_repo
from tests.test_escalations import make_run

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def branches(repo: Path) -> set[str]:
    return set(git(repo, "branch", "--format=%(refname:short)").split())


def test_prune_keeps_escalated_and_cited_runs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    store = StateStore(tmp_path / "state")
    old = NOW - timedelta(days=40)
    plain = make_run(store, "app", old, [dict(checks_passed=True, score=9)], outcome="succeeded")
    escalated = make_run(store, "app", old + timedelta(hours=1), [dict(checks_passed=False)])
    cited = make_run(
        store, "app", old + timedelta(hours=2), [dict(checks_passed=False)], outcome="succeeded"
    )
    by_rule = make_run(
        store, "app", old + timedelta(hours=3), [dict(checks_passed=False)], outcome="succeeded"
    )
    resolved = make_run(store, "app", old + timedelta(hours=4), [dict(checks_passed=False)])
    unfinished = make_run(store, "app", old + timedelta(hours=5), [dict()], outcome=None)
    young = make_run(
        store, "app", NOW - timedelta(days=2), [dict(checks_passed=True)], outcome="succeeded"
    )
    runs = [plain, escalated, cited, by_rule, resolved, unfinished, young]
    for run in runs:
        git(repo, "branch", run.branch)
    write_escalation(store, escalated, old + timedelta(hours=2))
    write_escalation(store, resolved, old + timedelta(hours=5))
    resolve(store, resolved.id, old + timedelta(hours=6))
    rules = tmp_path / "rules"
    (rules / "active").mkdir(parents=True)
    (rules / "retired").mkdir()
    (rules / "active" / "r-0001-x.md").write_text(
        f'+++\nid = "r-0001-x"\nevidence = [{{ path = "runs/{by_rule.id}/attempt-1/'
        'transcript.jsonl", line = 1, quote = "x" }]\n+++\n'
    )
    (rules / "retired" / "r-0002-y.md").write_text(f'+++\nsource_run = "{plain.id}"\n+++\n')
    assert cited_by_rules(rules) == {by_rule.id}

    result = prune(store, {"app": repo}, 30, NOW, keep={cited.id}, rules_dir=rules)

    assert sorted(result["pruned"]) == sorted([plain.id, resolved.id])
    assert sorted(result["kept"]) == sorted([escalated.id, cited.id, by_rule.id])
    assert sorted(result["branches_deleted"]) == sorted([plain.branch, resolved.branch])
    assert result["errors"] == []
    assert branches(repo) == {"main"} | {
        r.branch for r in (escalated, cited, by_rule, unfinished, young)
    }
    for run in (plain, resolved):
        folder = store.run_dir(run.id)
        assert sorted(p.name for p in folder.iterdir()) == [PRUNED_MARKER, "run.toml"]
        assert store.load_run(run.id).outcome == run.outcome  # the record stays
        # ... naming its branch as deleted, not as one to take
        assert store.load_run(run.id).branch == "" and store.load_run(run.id).branch_deleted
    assert not store.escalation_path(resolved.id).exists()
    for run in (escalated, cited, by_rule, unfinished, young):
        assert (store.run_dir(run.id) / "attempt-1" / "transcript.jsonl").is_file()
    assert store.escalation_path(escalated.id).exists()
    events = [e for e in store.events.read() if e["type"] == "run_pruned"]
    assert sorted(e["run"] for e in events) == sorted([plain.id, resolved.id])
    assert {e["branch"] for e in events} == {plain.branch, resolved.branch}

    again = prune(store, {"app": repo}, 30, NOW, keep={cited.id}, rules_dir=rules)
    assert again["pruned"] == [] and again["branches_deleted"] == []

    # once the escalation is resolved and nothing cites it, the run goes too
    resolve(store, escalated.id, NOW)
    later = prune(store, {"app": repo}, 30, NOW, keep=set())
    assert sorted(later["pruned"]) == sorted([escalated.id, cited.id, by_rule.id])


def test_retain_days_zero_keeps_everything(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    run = make_run(
        store, "app", NOW - timedelta(days=400), [dict(checks_passed=True)], outcome="succeeded"
    )
    assert prune(store, {}, 0, NOW, keep=set())["pruned"] == []
    assert (store.run_dir(run.id) / "attempt-1").is_dir()


def test_old_reports_are_pruned(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    reports = store.root / "reports"
    reports.mkdir()
    (reports / "report-20261001T000000Z.md").write_text("old")
    (reports / "report-20261128T000000Z.md").write_text("new")
    result = prune(store, {}, 30, NOW, keep=set())
    assert result["reports_removed"] == 1
    assert [p.name for p in reports.iterdir()] == ["report-20261128T000000Z.md"]


def test_a_run_whose_lesson_waits_for_the_model_is_kept(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    old = NOW - timedelta(days=40)
    waiting = make_run(store, "app", old, [dict(checks_passed=False)], outcome="succeeded")
    plain = make_run(
        store, "app", old + timedelta(hours=1), [dict(checks_passed=False)], outcome="succeeded"
    )
    (store.root / "deferred").mkdir()
    (store.root / "deferred" / f"{waiting.id}-1.toml").write_text("")
    result = prune(store, {}, 30, NOW, keep=set())
    assert result["pruned"] == [plain.id] and result["kept"] == [waiting.id]
    assert (store.run_dir(waiting.id) / "attempt-1").is_dir()

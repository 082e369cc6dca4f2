"""Pruning old attempt folders and loopd/* branches, keeping what people and rules cite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.housekeeping import PRUNED_MARKER, cited_by_rules, prune
from daemon.people.escalation import resolve, write_escalation
from daemon.state.pruned import find_pruned, newest_pruned
from daemon.state.store import StateStore
from tests.helpers import git, loopd, make_home, make_repo
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
        # Folded: the folder is gone, one line of the pruned index says what it was ...
        assert not store.run_dir(run.id).exists()
        line = find_pruned(store.root, run.id)
        assert line is not None and line.outcome == run.outcome and line.loop == "app"
        assert line.pruned == NOW and line.retain_days == 30
        # ... naming its branch as deleted, not as one to take
        assert line.branch == run.branch and line.branch_deleted
    assert result["folded"] == result["pruned"]
    assert not store.escalation_path(resolved.id).exists()
    for run in (escalated, cited, by_rule, unfinished, young):
        assert (store.run_dir(run.id) / "attempt-1" / "transcript.jsonl").is_file()
    assert store.escalation_path(escalated.id).exists()
    events = [e for e in store.events.read() if e["type"] == "run_pruned"]
    assert sorted(e["run"] for e in events) == sorted([plain.id, resolved.id])
    assert {e["branch"] for e in events} == {plain.branch, resolved.branch}

    again = prune(store, {"app": repo}, 30, NOW, keep={cited.id}, rules_dir=rules)
    assert again["pruned"] == [] and again["branches_deleted"] == []
    assert again["folded"] == []

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


def test_the_newest_run_of_a_loop_keeps_its_record_until_a_newer_one_exists(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state")
    old = NOW - timedelta(days=40)
    first = make_run(store, "app", old, [dict(checks_passed=True)], outcome="succeeded")
    last = make_run(store, "app", old + timedelta(hours=1), [dict(checks_passed=False)])
    result = prune(store, {}, 30, NOW, keep=set())
    assert sorted(result["pruned"]) == sorted([first.id, last.id])
    assert result["folded"] == [first.id]
    # The newest keeps run.toml (status's last outcome) and says it was pruned.
    folder = store.run_dir(last.id)
    assert sorted(p.name for p in folder.iterdir()) == [PRUNED_MARKER, "run.toml"]
    assert store.load_run(last.id).outcome == "escalated"
    assert prune(store, {}, 30, NOW, keep=set())["folded"] == []  # nothing to do again

    # A newer run of the loop: the old newest folds, dated when it was pruned.
    make_run(store, "app", NOW - timedelta(days=1), [dict(checks_passed=True)], "succeeded")
    later = NOW + timedelta(days=3)
    result = prune(store, {}, 30, later, keep=set())
    assert result["folded"] == [last.id] and result["pruned"] == []
    assert not folder.exists()
    line = find_pruned(store.root, last.id)
    assert line is not None and line.pruned == NOW and line.outcome == "escalated"
    assert [e.run for e in newest_pruned(store.root)] == [last.id, first.id]
    assert newest_pruned(store.root, loop="other") == []
    folded = [e for e in store.events.read() if e["type"] == "run_pruned" and e["folded"]]
    assert [e["run"] for e in folded] == [first.id, last.id]


def test_a_run_an_open_escalation_stands_for_is_never_folded(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    old = NOW - timedelta(days=40)
    escalated = make_run(store, "app", old, [dict(checks_passed=False)])
    write_escalation(store, escalated, old + timedelta(hours=1))
    make_run(store, "app", NOW - timedelta(days=1), [dict(checks_passed=True)], "succeeded")
    result = prune(store, {}, 30, NOW, keep=set())
    assert result["kept"] == [escalated.id] and result["folded"] == []
    assert (store.run_dir(escalated.id) / "attempt-1" / "transcript.jsonl").is_file()
    assert find_pruned(store.root, escalated.id) is None


def test_runs_and_show_say_what_a_pruned_run_was(tmp_path: Path) -> None:
    root = make_home(tmp_path / "home")
    store = StateStore(root / "state")
    old = NOW - timedelta(days=40)
    gone = make_run(store, "app", old, [dict(checks_passed=False)], reason="checks still fail")
    kept = make_run(store, "app", NOW - timedelta(days=1), [dict(checks_passed=True)], "succeeded")
    assert prune(store, {}, 30, NOW, keep=set())["folded"] == [gone.id]

    shown = loopd(root, "show", gone.id, env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert f"pruned on {NOW:%Y-%m-%d} after 30 days" in shown.stdout
    assert "escalated" in shown.stdout and "checks still fail" in shown.stdout
    as_json = json.loads(loopd(root, "show", gone.id, "--json").stdout)
    assert as_json["run"] == gone.id and as_json["outcome"] == "escalated"
    assert as_json["phase"] == "pruned" and as_json["pruned"].startswith("2026-11-29")

    listed = loopd(root, "runs", env={"COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    assert kept.id in listed.stdout and gone.id in listed.stdout
    assert listed.stdout.index(kept.id) < listed.stdout.index(gone.id)
    rows = json.loads(loopd(root, "runs", "--json").stdout)
    assert [(r["run"], r["phase"]) for r in rows] == [(kept.id, kept.phase), (gone.id, "pruned")]
    assert json.loads(loopd(root, "runs", "--json", "--limit", "1").stdout)[0]["run"] == kept.id

    logs = loopd(root, "logs", gone.id)
    assert logs.returncode != 0 and "was pruned on 2026-11-29" in logs.stderr

    unknown = loopd(root, "show", "20261001T000000Z-app-ffff")
    assert unknown.returncode != 0 and "unknown run" in unknown.stderr

"""`loopd report`: runs per loop, rule changes and escalations, matching state."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.people.escalation import resolve, write_escalation
from daemon.people.report import build_report, render_markdown, write_report
from daemon.state.store import StateStore
from tests.helpers import loopd, make_home
from tests.test_escalations import make_run
from tests.test_progress import older_event

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def night(store: StateStore, now: datetime) -> dict[str, list]:
    """A scripted night: runs of two loops, one run before the window, rule events, escalations."""
    made: dict[str, list] = {"app": [], "docs": []}
    make_run(
        store,
        "app",
        now - timedelta(days=2),
        [dict(checks_passed=True, score=9)],
        outcome="succeeded",
        tokens=999,
    )
    for hours, outcome, scores in [
        (10, "succeeded", [8]),
        (8, "escalated", [2, 3, 4]),
        (6, "succeeded", [5, 9]),
    ]:
        attempts = [dict(checks_passed=(s >= 7), score=s, tokens=100) for s in scores]
        made["app"].append(
            make_run(
                store,
                "app",
                now - timedelta(hours=hours),
                attempts,
                outcome=outcome,
                tokens=100 * len(scores),
                seconds=600 * len(scores),
            )
        )
    made["docs"].append(
        make_run(
            store,
            "docs",
            now - timedelta(hours=5),
            [dict(checks_passed=False, score=1)],
            outcome="escalated",
            reason="attempts used up; checks still fail",
            tokens=50,
            seconds=300,
        )
    )
    made["docs"].append(
        make_run(
            store,
            "docs",
            now - timedelta(hours=3),
            [],
            outcome="refused",
            reason="refused by rule r-0009-no-prod",
            seconds=1,
        )
    )
    store.events.append(
        "rule_accepted",
        now - timedelta(days=1),
        loop="app",
        rule="r-0000-old",
        kind="lesson",
        to="trial",
        verified_by=[],
    )
    older_event(
        store,
        "rule_accepted",
        now - timedelta(hours=7),
        loop="app",
        rule="r-0001-sign",
        intent="Arithmetic helpers with swapped operators",
    )
    store.events.append(
        "rule_promoted", now - timedelta(hours=2), loop="docs", rule="r-0001-sign", reason="helped"
    )
    store.events.append(
        "rule_demoted", now - timedelta(hours=1), rule="r-0002-stale", reason="harmed 3, helped 1"
    )
    store.events.append(
        "notify_failed",
        now - timedelta(hours=1),
        kind="escalated",
        notifier="webhook",
        error="webhook at h failed after 4 tries",
    )
    for run in (made["app"][1], made["docs"][0], made["docs"][1]):
        write_escalation(store, run, run.finished)
    resolve(store, made["docs"][1].id, now - timedelta(minutes=30))
    return made


def test_report_matches_state(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    made = night(store, NOW)
    report = build_report(store, NOW - timedelta(hours=12), NOW)

    assert [r.id for r in report.runs] == [r.id for r in made["app"] + made["docs"]]
    app, docs = report.loops
    assert (app.loop, app.runs, app.outcomes) == ("app", 3, {"succeeded": 2, "escalated": 1})
    assert (app.attempts, app.tokens, app.seconds) == (6, 600, 3600)
    assert (app.best_score, app.mean_score) == (9, round((8 + 2 + 3 + 4 + 5 + 9) / 6, 1))
    assert (docs.runs, docs.outcomes, docs.tokens) == (2, {"escalated": 1, "refused": 1}, 50)
    assert docs.best_score == 1

    assert [(c.rule, c.change) for c in report.rules] == [
        ("r-0001-sign", "learned (trial)"),
        ("r-0001-sign", "promoted"),
        ("r-0002-stale", "retired"),
    ]
    assert [e.run for e in report.escalations] == [made["app"][1].id, made["docs"][0].id]
    assert report.notify_failed == ["webhook at h failed after 4 tries"]
    assert report.events["escalation_resolved"] == 1

    path = write_report(store, report)
    assert path == store.root / "reports" / "report-20261129T080000Z.md"
    markdown = path.read_text()
    assert markdown == render_markdown(report)
    assert "| app | 3 | 2 succeeded, 1 escalated | 6 | 9 | 5.2 | 1h00m | 600 |" in markdown
    assert f"| {made['app'][2].id} | schedule | succeeded | 5 9 | 20m00s | 200 |" in markdown
    assert "- 2026-11-29T01:00Z `r-0001-sign` learned (trial) (loop app): Arithmetic" in markdown
    assert f"- {made['docs'][0].id} (docs): attempts used up; checks still fail" in markdown


def test_report_reads_a_rotated_events_file_when_the_window_reaches_into_it(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state")
    older_event(store, "rule_retired", NOW - timedelta(hours=3), rule="r-0004-expired")
    store.events.path.rename(store.root / "events-1.jsonl")
    store.events.append("rule_promoted", NOW - timedelta(hours=1), rule="r-0005-new", reason="x")
    report = build_report(store, NOW - timedelta(hours=12), NOW)
    assert [c.rule for c in report.rules] == ["r-0004-expired", "r-0005-new"]


def test_report_command_fits_one_screen(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    store = StateStore(home / "state")
    now = datetime.now(UTC).replace(microsecond=0)
    night(store, now)
    for i in range(30):  # a busy night: the screen still fits
        make_run(
            store,
            f"loop{i % 6}",
            now - timedelta(minutes=5 * i + 1),
            [dict(checks_passed=False, score=3)],
            outcome="escalated",
            reason=f"attempts used up; run {i}",
        )

    shown = loopd(home, "report", "--since", "12h")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) <= 40, shown.stdout
    assert lines[0].startswith("loopd report")
    assert "Escalations waiting 2" in shown.stdout
    assert "more in the file" in shown.stdout
    files = sorted((home / "state" / "reports").glob("report-*.md"))
    assert len(files) == 1 and f"Full report: {files[0]}" in shown.stdout.replace("\n", "")

    as_json = loopd(home, "report", "--since", "12h", "--json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert sum(loop["runs"] for loop in data["loops"]) == 5 + 30
    assert {loop["loop"] for loop in data["loops"]} == {"app", "docs"} | {
        f"loop{i}" for i in range(6)
    }
    assert len(data["escalations"]) == 2
    assert data["file"].endswith(".md")

    bad = loopd(home, "report", "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr

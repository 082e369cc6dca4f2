"""Progress notes rebuilt from state after each run, read into the next prompt."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from daemon.people.escalation import write_escalation
from daemon.people.progress import read_progress, update_progress
from daemon.state.events import iso
from daemon.state.store import StateStore
from tests.test_escalations import make_run, real_patch

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def older_event(store: StateStore, type: str, ts: datetime, **fields: Any) -> None:
    """An event line as an older loopd wrote it: a type or fields today's models do not have."""
    line = {"ts": iso(ts), "type": type, "loop": fields.pop("loop", None)}
    line |= {"run": fields.pop("run", None), **fields}
    with store.events.path.open("a") as fh:
        fh.write(json.dumps(line) + "\n")


def test_progress_after_three_runs(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    patch = real_patch(tmp_path)
    first = make_run(
        store,
        "app",
        NOW - timedelta(hours=6),
        [dict(checks_passed=False, score=2), dict(checks_passed=False, score=3)],
        checks_log="E   old failure in attempt ATTEMPT\n",
    )
    write_escalation(store, first, NOW - timedelta(hours=5))
    second = make_run(
        store,
        "app",
        NOW - timedelta(hours=4),
        [dict(checks_passed=True, score=8)],
        outcome="succeeded",
        patch=patch,
        kind="push",
    )
    third = make_run(
        store,
        "app",
        NOW - timedelta(hours=2),
        [dict(checks_passed=False, score=4, feedback="sign error")],
        reason="attempts used up; checks still fail after 1 attempts",
        checks_log="FAILED tests/test_app.py::test_add (attempt ATTEMPT)\n",
    )
    make_run(
        store,
        "other",
        NOW - timedelta(hours=1),
        [dict(checks_passed=True, score=9)],
        outcome="succeeded",
    )
    older_event(
        store,
        "rule_accepted",
        NOW - timedelta(hours=3),
        loop="app",
        run=third.id,
        rule="r-0001-sign",
        intent="Arithmetic helpers with swapped operators",
    )
    store.events.append(
        "rule_promoted", NOW - timedelta(hours=1), loop="app", rule="r-0001-sign", reason="helped"
    )
    store.events.append(
        "rule_accepted",
        NOW,
        loop="other",
        rule="r-0002-elsewhere",
        kind="lesson",
        to="trial",
        verified_by=[],
    )
    store.events.append("rule_rejected", NOW, loop="app", rule="r-0003-vague", reason="vague")

    text = update_progress(store, "app", NOW)
    path = store.progress_path("app")
    assert path.read_text() == text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    runs = text.split("## Last runs (newest first)\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split(" run ", 1)[1].split(",", 1)[0] for line in runs] == [
        third.id,
        second.id,
        first.id,
    ]
    assert "**escalated** (attempts used up; checks still fail after 1 attempts)" in runs[0]
    assert "schedule" in runs[0] and "best score 4/10" in runs[0]
    assert "push: **succeeded**; 1 attempt, checks passed, best score 8/10" in runs[1]
    assert "2 attempts, checks failed, best score 3/10" in runs[2]
    assert "other" not in "\n".join(runs)

    changed = text.split("## What the last diff changed\n\n", 1)[1].split("\n## ", 1)[0]
    assert f"Run {second.id}, attempt 1 on branch `{second.branch}` (succeeded)" in changed
    assert "- app.py (+1 -1)" in changed and "- 3 files changed, +4 -1" in changed

    failing = text.split("## Checks that still fail\n\n", 1)[1].split("\n## ", 1)[0]
    assert f"Run {third.id}, attempt 1" in failing
    assert "FAILED tests/test_app.py::test_add (attempt 1)" in failing
    assert "old failure" not in failing

    waiting = text.split("## Open escalations\n\n", 1)[1].split("\n## ", 1)[0]
    assert f"- run {first.id}: attempts used up" in waiting

    rules = text.split("## Rules learned\n\n", 1)[1]
    assert "- `r-0001-sign` (active): Arithmetic helpers with swapped operators" in rules
    assert "r-0002" not in rules and "r-0003" not in rules

    prompt_part = read_progress(store, "app")
    assert not prompt_part.startswith("# ")
    assert prompt_part.startswith("Rebuilt by loopd from state at 2026-11-29T08:00:00")
    assert third.id in prompt_part and "## Checks that still fail" in prompt_part


def test_progress_when_the_last_run_passed_and_nothing_is_open(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    run = make_run(
        store,
        "app",
        NOW - timedelta(hours=1),
        [dict(checks_passed=True, score=9)],
        outcome="succeeded",
    )
    text = update_progress(store, "app", NOW)
    assert f"None: the checks of run {run.id} attempt 1 passed." in text
    assert "## Open escalations\n\nNone." in text
    assert "## What the last diff changed\n\nNo run left changes yet." in text
    assert "## Rules learned\n\nNone yet." in text


def test_no_progress_yet(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    assert read_progress(store, "app") == ""
    assert "No runs yet." in update_progress(store, "app", NOW)

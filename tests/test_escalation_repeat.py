"""escalation_repeat.py in process on a real state/: which open escalation a failing run
counts in, what its file then says, and when a digest of repeats is due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.people.escalation import write_escalation, write_question
from daemon.people.escalation_file import read_escalation
from daemon.people.escalation_repeat import (
    SECTION,
    digest_due,
    escalate,
    open_for,
    open_login,
)
from daemon.plain.escalations import split_front_matter
from daemon.state.records import Cause, RunRecord, RunTrigger
from daemon.state.store import StateStore

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


def failing(n: int, task: str = "fix the parser", loop: str = "l", **fields: object) -> RunRecord:
    values: dict[str, object] = {
        "outcome": "escalated",
        "cause": Cause.CHECKS_FAILED,
        "reason": f"checks still fail after 3 attempts (run {n})",
        **fields,
    }
    return RunRecord(
        id=f"20261130T02000{n}Z-{loop}-000{n}",
        loop=loop,
        task=task,
        trigger=RunTrigger(kind="push", ts=NOW),
        started=NOW,
        **values,  # type: ignore[arg-type]  # RunRecord's own fields, by name
    )


def test_repeats_count_in_the_first_escalation_and_its_section_is_rewritten(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state")
    first, second, third = failing(1), failing(2), failing(3)
    for run in (first, second, third):
        store.save_run(run)
    assert escalate(store, first, NOW) == (first.id, False)
    log = store.run_dir(second.id) / "attempt-2" / "checks.log"
    log.parent.mkdir(parents=True)
    log.write_text("FAILED\n")
    (store.run_dir(second.id) / "attempt-10").mkdir()
    (store.run_dir(second.id) / "attempt-10" / "checks.log").write_text("FAILED\n")
    assert escalate(store, second, NOW + timedelta(hours=1)) == (first.id, True)
    # Done again (a crash after counting): not counted twice.
    assert escalate(store, second, NOW + timedelta(hours=1)) == (first.id, True)
    path = store.escalation_path(first.id)
    meta = read_escalation(path)
    assert meta is not None
    assert (meta.count, meta.latest_run, meta.latest_cause) == (2, second.id, "checks-failed")
    assert meta.latest == NOW + timedelta(hours=1)
    assert meta.latest_reason == "checks still fail after 3 attempts (run 2)"
    text = path.read_text()
    assert "later runs of the same task escalated too: once, so 2 runs in all." in text
    assert f"The latest, run {second.id}, escalated 2026-11-30T03:00:00.000000Z" in text
    assert f"`state/runs/{second.id}/attempt-10/checks.log`" in text  # the last by number
    assert f"`loopd escalations resolve {first.id}` closes this escalation" in text
    assert escalate(store, third, NOW + timedelta(hours=2)) == (first.id, True)
    text = path.read_text()
    assert text.count(SECTION) == 1  # rewritten, not appended to
    assert "2 times, so 3 runs in all" in text and "Its last checks' output" not in text
    assert not store.escalation_path(second.id).exists()
    # An escalation already filed for the run is its own, however asked again.
    assert escalate(store, first, NOW) == (first.id, False)


def test_only_an_earlier_run_of_the_same_loop_and_task_is_joined(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    later = failing(5)
    store.save_run(later)
    write_escalation(store, later, NOW)
    earlier = failing(4)
    assert open_for(store, earlier) is None  # an escalation filed after it does not take it
    other_loop = failing(6, loop="m")
    assert open_for(store, other_loop) is None
    same = failing(7)
    meta = open_for(store, same)
    assert meta is not None and meta.run == later.id
    # The task as its escalation wrote it, redacted: the same task still.
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    keyed = failing(1, task=f"rotate {secret}")
    store.save_run(keyed)
    write_escalation(store, keyed, NOW)
    found = open_for(store, failing(8, task=f"rotate {secret}"))
    assert found is not None and found.run == keyed.id


def test_a_refused_login_counts_in_its_profiles_escalation_of_any_loop(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    first = failing(1, cause=Cause.AGENT_LOGIN, reason="login refused")
    store.save_run(first)
    assert escalate(store, first, NOW, profile="claude-work") == (first.id, False)
    meta = open_login(store, "claude-work")
    assert meta is not None and meta.profile == "claude-work"
    assert open_login(store, "other") is None
    elsewhere = failing(2, loop="m", task="another task", cause=Cause.AGENT_LOGIN)
    assert escalate(store, elsewhere, NOW, profile="claude-work") == (first.id, True)
    text = store.escalation_path(first.id).read_text()
    assert "loops using agent profile `claude-work` had their login refused" in text
    # Another profile files its own; a failing run of the task is not absorbed by a login's.
    other = failing(3, cause=Cause.AGENT_LOGIN)
    assert escalate(store, other, NOW, profile="codex") == (other.id, False)
    assert open_for(store, failing(4)) is None


def test_a_digest_of_repeats_is_due_at_most_once_a_day(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    first = failing(1)
    store.save_run(first)
    escalate(store, first, NOW)
    assert digest_due(store, first.id, NOW + timedelta(days=2)) is None  # no repeat yet
    escalate(store, failing(2), NOW + timedelta(hours=1))
    assert digest_due(store, first.id, NOW + timedelta(hours=23)) is None  # within a day
    due = digest_due(store, first.id, NOW + timedelta(days=1))
    assert due is not None and due.count == 2
    told = read_escalation(store.escalation_path(first.id))
    assert told is not None
    assert (told.notified, told.notified_count) == (NOW + timedelta(days=1), 2)
    assert digest_due(store, first.id, NOW + timedelta(days=3)) is None  # nothing new
    escalate(store, failing(3), NOW + timedelta(days=1, hours=1))
    assert digest_due(store, first.id, NOW + timedelta(days=1, hours=12)) is None
    assert digest_due(store, first.id, NOW + timedelta(days=2)) is not None
    assert digest_due(store, "20261130T020009Z-l-0009", NOW) is None  # no such escalation


def test_a_repeat_rewrites_only_its_section_below_the_body_as_filed(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    first = failing(1)
    store.save_run(first)
    escalate(store, first, NOW)
    path = store.escalation_path(first.id)
    filed = split_front_matter(path.read_text())
    assert filed is not None
    body = filed[1]
    for n, attempts in ((2, (1, 2, 10)), (3, tuple(range(1, 13)))):
        run = failing(n)
        for a in attempts:
            log = store.run_dir(run.id) / f"attempt-{a}" / "checks.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("FAILED\n")
        escalate(store, run, NOW + timedelta(hours=n))
    third = failing(3)
    text = path.read_text()
    assert text.count("+++\n") == 2  # one front matter, rewritten
    parts = split_front_matter(text)
    assert parts is not None
    assert parts[1] == body.rstrip("\n") + "\n" + "\n".join(
        [
            "",
            SECTION,
            "",
            "While this escalation was open, later runs of the same task escalated too: "
            "2 times, so 3 runs in all. Each counts here instead of filing its own.",
            "",
            f"The latest, run {third.id}, escalated 2026-11-30T05:00:00.000000Z "
            "(cause `checks-failed`): checks still fail after 3 attempts (run 3)",
            "",
            f"`loopd show {third.id}` has its evidence.",
            f"Its last checks' output: `state/runs/{third.id}/attempt-12/checks.log`.",
            "",
            f"`loopd escalations resolve {first.id}` closes this escalation; a later run of "
            "the task that succeeds closes it too.",
            "",
        ]
    )
    # The digest rewrites the front matter only: the body stays as it was.
    assert digest_due(store, first.id, NOW + timedelta(days=1)) is not None
    after = split_front_matter(path.read_text())
    assert after is not None and after[1] == parts[1]
    assert path.read_text().count("+++\n") == 2


def test_a_run_never_joins_its_own_escalation_nor_counts_twice(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    first, second = failing(1), failing(2)
    escalate(store, first, NOW)
    assert open_for(store, first) is None
    escalate(store, second, NOW)
    assert escalate(store, first, NOW + timedelta(hours=3)) == (first.id, False)
    meta = read_escalation(store.escalation_path(first.id))
    assert meta is not None and (meta.count, meta.latest_run) == (2, second.id)
    login = failing(3, cause=Cause.AGENT_LOGIN)
    escalate(store, login, NOW, profile="p")
    assert open_for(store, login, profile="p") is None


def test_a_profile_matters_only_for_a_refused_login(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    first = failing(1)
    escalate(store, first, NOW, profile="claude-work")
    meta = read_escalation(store.escalation_path(first.id))
    assert meta is not None and meta.profile == ""  # a failing task, whatever its agent
    assert escalate(store, failing(2), NOW, profile="claude-work") == (first.id, True)
    # A refused login with no profile known is filed as its own, for its task.
    login = failing(3, task="another", cause=Cause.AGENT_LOGIN)
    assert escalate(store, login, NOW) == (login.id, False)
    filed = read_escalation(store.escalation_path(login.id))
    assert filed is not None and filed.profile == ""


def test_a_question_before_it_does_not_hide_the_tasks_escalation(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    asked = failing(1)
    store.save_run(asked)
    write_question(store, store.escalation_path(f"{asked.id}-q1"), asked, "Which API?", 1, NOW)
    filed = failing(2)
    escalate(store, filed, NOW)
    meta = open_for(store, failing(3))
    assert meta is not None and meta.run == filed.id

"""Tests that kill the mutants an outside review found alive in code that decides trust: the
landing guard's `land_allow`, the clean check tree between check sets, the sandbox's deny list
and program exposure, event redaction, and escalation repeats (#44)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from daemon.config import LoopConfig
from daemon.git.userrepo import UserRepo
from daemon.landing.guard import blocked_paths
from daemon.people.escalation import write_escalation, write_question
from daemon.people.escalation_repeat import escalate, open_for
from daemon.sandbox.deny import DENIED_IN_HOME, denied_holding, denied_paths
from daemon.sandbox.programs import _Walk
from daemon.state.events import EventLog
from daemon.state.records import Cause, RunRecord, RunTrigger
from daemon.state.store import StateStore
from tests.helpers import ROOT, git, make_repo

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


def test_land_allow_never_lifts_protect(tmp_path: Path) -> None:
    """`land_allow` lets guarded files (CI, hooks) land; a protected path stays blocked even
    when `land_allow` names it too."""
    repo = make_repo(tmp_path / "repo", {"tests/test_app.py": "x = 1\n", "src/a.py": "a\n"})
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "run")
    (repo / "tests" / "test_app.py").write_text("x = 2\n")
    git(repo, "commit", "-qam", "weaken")
    cfg = LoopConfig(repo=str(repo), task="t", protect=["tests/**"], land_allow=["tests/**"])
    assert blocked_paths(UserRepo.locate(repo), base, "run", cfg) == ["tests/test_app.py"]


def test_the_deny_list_matches_its_documented_copy() -> None:
    """docs/configuration.md lists the deny list for people; it is the code's list, in order."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    start = text.index("under each home,", text.index("**deny list**"))
    listed = text[start : text.index("and every agent CLI", start)]
    documented = tuple(re.findall(r"`([^`]+)`", listed))
    assert documented == DENIED_IN_HOME
    assert ".kube" in DENIED_IN_HOME and ".ssh" in DENIED_IN_HOME


def test_a_link_into_a_denied_path_is_denied(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("token")
    link = tmp_path / "innocent"
    link.symlink_to(home / ".kube")
    denied = denied_paths([home])
    assert denied_holding(link / "config", denied) == home / ".kube"
    assert denied_holding(home / ".kube" / "config", denied) == home / ".kube"
    assert denied_holding(tmp_path / "elsewhere", denied) is None


def test_a_programs_walk_never_shows_a_whole_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    walk = _Walk("/usr/bin", {home})
    walk.add(home, "a program lying loose in a home")
    walk.add(Path("/"), "the root")
    walk.add(home / ".pyenv", "interpreter")
    assert list(walk.found) == [home / ".pyenv"]


def test_event_fields_are_written_redacted(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    log.append("tick_error", now=NOW, error=f"token {secret} refused")
    written = (tmp_path / "events.jsonl").read_text()
    assert secret not in written
    assert "refused" in written


def _run(n: int, task: str = "fix the tests", loop: str = "l") -> RunRecord:
    trigger = RunTrigger(kind="schedule", ts=NOW)
    return RunRecord(
        id=f"20261130T02000{n}Z-{loop}-000{n}",
        loop=loop,
        task=task,
        trigger=trigger,
        started=NOW,
        outcome="escalated",
        cause=Cause.CHECKS_FAILED,
        reason="checks still fail after 3 attempts",
    )


def test_a_failing_run_is_counted_only_in_its_own_tasks_escalation(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    first = _run(1, task="fix the parser")
    store.save_run(first)
    write_escalation(store, first, NOW)
    other_task = _run(2, task="update the changelog")
    assert open_for(store, other_task) is None
    assert escalate(store, other_task, NOW) == (other_task.id, False)
    same_task = _run(3, task="fix the parser")
    meta = open_for(store, same_task)
    assert meta is not None and meta.run == first.id


def test_an_open_question_does_not_absorb_a_failing_run(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    asked = _run(1)
    store.save_run(asked)
    # The agent's ask_person question, filed as the desk files it (RUN-q1).
    write_question(store, store.escalation_path(f"{asked.id}-q1"), asked, "Which API?", 1, NOW)
    failing = _run(2)
    assert open_for(store, failing) is None
    assert escalate(store, failing, NOW) == (failing.id, False)

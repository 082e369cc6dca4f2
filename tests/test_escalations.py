"""Escalation files, open/resolved state, resolve --retry, and the escalations command."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from daemon.people.escalation import (
    AlreadyResolved,
    EscalationNotFound,
    blocking_escalation,
    open_escalations,
    read_escalation,
    resolve,
    write_escalation,
)
from daemon.people.escalation_text import cause_of
from daemon.state.records import (
    AttemptRecord,
    Cause,
    RunRecord,
    RunTrigger,
    StallRecord,
    Violation,
)
from daemon.state.store import StateStore
from tests.helpers import git, loopd, make_home, make_repo, take_triggers

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
TASK = "Make the failing tests pass without weakening them."


def real_patch(tmp_path: Path) -> str:
    """A diff.patch as git writes it: one file changed, one added, one binary."""
    repo = make_repo(tmp_path / "patchrepo", {"app.py": "def add(a, b):\n    return a - b\n"})
    (repo / "app.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "notes.md").write_text("one\ntwo\n--- not a header\n")
    (repo / "logo.bin").write_bytes(bytes(range(256)))
    git(repo, "add", "-A")
    return git(repo, "diff", "--cached", "--binary", "HEAD") + "\n"


def make_run(
    store: StateStore,
    loop: str,
    started: datetime,
    attempts: list[dict[str, Any]],
    outcome: str | None = "escalated",
    reason: str = "attempts used up; checks still fail after 3 attempts",
    task: str = TASK,
    patch: str = "",
    checks_log: str = "",
    rules_fired: list[str] | None = None,
    tokens: int = 0,
    kind: str = "schedule",
    seconds: int = 600,
    cause: Cause | None = None,
) -> RunRecord:
    """A run record with attempt folders, built by hand the way the run lifecycle writes them."""
    run_id = store.new_run_id(loop, started)
    records = []
    for n, fields in enumerate(attempts, start=1):
        at = started + timedelta(minutes=10 * (n - 1))
        records.append(AttemptRecord(n=n, started=at, finished=at + timedelta(minutes=9), **fields))
        folder = store.attempt_dir(run_id, n)
        (folder / "prompt.md").write_text(f"# Task\n\n{task}\n")
        (folder / "transcript.jsonl").write_text('{"stream": "stdout", "type": "text"}\n')
        if patch:
            (folder / "diff.patch").write_text(patch)
        if checks_log and fields.get("checks_passed") is False:
            (folder / "checks.log").write_text(checks_log.replace("ATTEMPT", str(n)))
    run = RunRecord(
        id=run_id,
        loop=loop,
        task=task,
        trigger=RunTrigger(kind=kind, reason="nightly", ts=started),
        started=started,
        finished=started + timedelta(seconds=seconds) if outcome else None,
        outcome=outcome,
        reason=reason if outcome != "succeeded" else "checks pass, score 8",
        cause=cause,
        branch=f"loopd/{loop}/{run_id}",
        tokens=tokens,
        rules_fired=rules_fired or [],
        attempts=records,
        phase="idle" if outcome else "running",
        repo="/src/app",
        base_commit="0123456789abcdef0123",
    )
    store.save_run(run)
    return run


CHECKS_LOG = "".join(f"collecting line {i}\n" for i in range(100)) + (
    "FAILED tests/test_app.py::test_add - assert -1 == 3 (attempt ATTEMPT)\n1 failed in 0.02s\n"
)


def three_failed(tmp_path: Path, store: StateStore) -> RunRecord:
    stall = StallRecord(kind="silence", at=NOW - timedelta(hours=3), detail="no output for 5m")
    return make_run(
        store,
        "app",
        NOW - timedelta(hours=4),
        [
            dict(
                checks_passed=False,
                score=2,
                verdict="Tests still fail.",
                feedback="Fix add().",
                nudges=1,
                stalls=[stall],
                exit_code=0,
            ),
            dict(
                checks_passed=False,
                score=3,
                verdict="Changed the wrong file.",
                feedback="Edit app.py, not notes.md.",
                nudges=2,
                exit_code=0,
            ),
            dict(
                checks_passed=False,
                score=4,
                verdict="Close: sign error remains.",
                feedback="add() subtracts; make it add.",
                nudges=0,
                exit_code=0,
            ),
        ],
        patch=real_patch(tmp_path),
        checks_log=CHECKS_LOG,
        rules_fired=["r-0001-run-pytest-first"],
    )


def test_escalation_file_tells_a_person_everything(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    run = three_failed(tmp_path, store)
    path = write_escalation(store, run, NOW)

    assert path == store.root / "escalations" / f"{run.id}.md"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    body = text.split("\n+++\n", 1)[1]
    assert TASK in body
    assert "attempts used up; checks still fail after 3 attempts" in body
    for n, (score, verdict, feedback) in enumerate(
        [
            (2, "Tests still fail.", "Fix add()."),
            (3, "Changed the wrong file.", "Edit app.py"),
            (4, "Close: sign error remains.", "add() subtracts"),
        ],
        start=1,
    ):
        section = body.split(f"### Attempt {n}:", 1)[1].split("###", 1)[0]
        assert f"score {score}/10" in section
        assert verdict in section and feedback in section
        assert "checks failed" in section
    assert "1 nudge, 1 stall" in body.split("### Attempt 1:", 1)[1]
    assert "2 nudges, 0 stalls" in body.split("### Attempt 2:", 1)[1]
    assert "stall (silence)" in body and "no output for 5m" in body
    # the checks' last failure: attempt 3's log (short: whole; a long one is cut to its
    # failures and its end, tests/test_check_excerpts_e2e.py)
    failure = body.split("## Last failure of the checks (attempt 3", 1)[1]
    assert "FAILED tests/test_app.py::test_add - assert -1 == 3 (attempt 3)" in failure
    assert "(attempt 1)" not in failure and "(attempt 2)" not in failure
    assert "collecting line 99" in failure
    assert "`r-0001-run-pytest-first`" in body
    # the diff summary, computed from diff.patch
    assert "app.py (+1 -1)" in body
    assert "notes.md (+3 -0, added)" in body
    assert "logo.bin (binary, added)" in body
    assert "3 files changed, +4 -1" in body
    assert f"Branch `{run.branch}` in /src/app" in body
    assert f"git log -p 0123456789ab..{run.branch}" in body
    # the next step fits what happened
    step = body.split("**Suggested next step:**", 1)[1].split("\n", 1)[0]
    assert "checks still fail after 3 attempts" in step
    assert f"loopd escalations resolve {run.id} --retry --note" in step

    meta = read_escalation(path)
    assert meta is not None and meta.status == "open" and meta.cause == "checks-failed"
    assert meta.attempts == 3 and meta.best_score == 4


def test_open_escalation_holds_back_only_scheduled_repeats_of_the_same_task(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state")
    run = three_failed(tmp_path, store)
    write_escalation(store, run, NOW)
    spaced = "  Make the failing tests\npass without weakening them."
    assert blocking_escalation(store, "app", spaced).run == run.id
    assert blocking_escalation(store, "app", "Another task.") is None
    assert blocking_escalation(store, "other", TASK) is None
    assert blocking_escalation(store, "app", TASK, "catch-up").run == run.id
    for kind in ("push", "change", "manual", "retry"):
        assert blocking_escalation(store, "app", TASK, kind) is None
    resolve(store, run.id, NOW + timedelta(hours=1))
    assert blocking_escalation(store, "app", TASK) is None


PROTECTED_TOKENIZER = [Violation(kind="protected", target="src/tokenizer.py")]
PROTECTED_ENDPOINTS = [Violation(kind="protected", target="api/endpoints.py")]


@pytest.mark.parametrize(
    ("attempts", "outcome", "reason", "cause", "words"),
    [
        (
            [dict(checks_passed=True, score=4, feedback="Claims untested.")],
            "escalated",
            "attempts used up; last score 4 below 7",
            Cause.CRITIC_REJECTED,
            "The checks pass but",
        ),
        (
            [dict(checks_passed=True, score=None)],
            "escalated",
            "verifier unavailable for 21600s (pending_limit 21600s)",
            Cause.VERIFIER_UNAVAILABLE,
            "[verifier] base_url",
        ),
        ([], "refused", "refused by rule r-0009-no-prod", Cause.REFUSED, "loopd rules retire"),
        (
            [],
            "escalated",
            "rule r-0010-ask-first asks for a person first",
            Cause.RULE_ESCALATE,
            "severity `escalate`",
        ),
        (
            [dict(exit_code=127)],
            "escalated",
            "agent failed to start: could not start ['qwen']: No such file or directory",
            Cause.AGENT_FAILED,
            "loopd once app",
        ),
        (
            [dict(checks_passed=False)],
            "escalated",
            "token budget exceeded: 900 > 500",
            Cause.TOKEN_CAP,
            "max_tokens",
        ),
        (
            [dict(checks_passed=False, violations=PROTECTED_TOKENIZER)],
            "escalated",
            "attempts used up; protected path changed: src/tokenizer.py",
            Cause.PROTECT_VIOLATION,
            "`src/tokenizer.py`, which `protect` in loops/app.toml forbids",
        ),
        (
            [dict(checks_passed=False, violations=PROTECTED_ENDPOINTS)],
            "escalated",
            "attempts used up; protected path changed: api/endpoints.py",
            Cause.PROTECT_VIOLATION,
            "narrow `protect`",
        ),
        (
            [
                dict(
                    checks_passed=True,
                    score=2,
                    violations=[Violation(kind="ref_moved", target="refs/heads/main")],
                )
            ],
            "escalated",
            "attempt 1: ref moved: refs/heads/main",
            Cause.REF_VIOLATION,
            "loopd left them where they are",
        ),
        (
            [
                dict(
                    checks_passed=True,
                    violations=[Violation(kind="repo_hook", target="hooks/post-commit")],
                )
            ],
            "escalated",
            "attempt 1: repository hook changed: hooks/post-commit",
            Cause.REPO_VIOLATION,
            "`hooks/post-commit` in your repository's git directory; loopd put them back",
        ),
        (
            [
                dict(
                    checks_passed=True,
                    violations=[
                        Violation(
                            kind="detached_head",
                            target="0123456789ab",
                            detail="kept as refs/loopd/kept/R/0123456789ab",
                        )
                    ],
                )
            ],
            "escalated",
            "attempts used up; commits off the run's base: 0123456789ab",
            Cause.GIT_VIOLATION,
            "kept as refs/loopd/kept/R/0123456789ab",
        ),
        (
            [dict(checks_passed=False)],
            "interrupted",
            "loopd stopped during the run",
            Cause.INTERRUPTED_RETRY,
            "during its retry",
        ),
        (
            [],
            "error",
            "git failed: git worktree add timed out after 120s",
            Cause.GIT_FAILED,
            "stale lock",
        ),
    ],
)
def test_the_suggested_step_follows_the_cause(
    tmp_path: Path, attempts: list, outcome: str, reason: str, cause: Cause, words: str
) -> None:
    store = StateStore(tmp_path / "state")
    run = make_run(store, "app", NOW - timedelta(hours=1), attempts, outcome, reason, cause=cause)
    body = write_escalation(store, run, NOW).read_text()
    step = body.split("**Suggested next step:**", 1)[1].split("\n", 1)[0]
    assert words in step
    assert read_escalation(store.escalation_path(run.id)).cause == cause.value


@pytest.mark.parametrize(
    ("path", "misleading"),
    [("src/tokenizer.py", "max_tokens"), ("api/endpoints.py", "[verifier] base_url")],
)
def test_a_cause_is_never_guessed_from_the_words_of_the_reason(
    tmp_path: Path, path: str, misleading: str
) -> None:
    """A run.toml written before causes were kept: its cause comes from its attempts."""
    store = StateStore(tmp_path / "state")
    violations = [f"protected path changed: {path}"]  # as older run.toml files hold them
    run = make_run(
        store,
        "app",
        NOW - timedelta(hours=1),
        [dict(checks_passed=False, violations=violations)],
        reason=f"attempts used up; protected path changed: {path}",
    )
    assert run.cause is None
    assert run.attempts[0].violations == [Violation(kind="protected", target=path)]
    assert cause_of(run) == Cause.PROTECT_VIOLATION
    body = write_escalation(store, run, NOW).read_text()
    step = body.split("**Suggested next step:**", 1)[1].split("\n", 1)[0]
    assert f"`{path}`" in step and "narrow `protect`" in step
    assert misleading not in step


def test_resolve_with_retry_queues_the_note_and_records_the_event(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    run = three_failed(tmp_path, store)
    write_escalation(store, run, NOW)
    later = NOW + timedelta(hours=2)
    trigger = resolve(store, run.id, later, note="use the v2 API", retry=True)

    assert trigger is not None
    taken = take_triggers(store)
    assert len(taken) == 1
    queued = taken[0]
    assert (queued.loop, queued.kind, queued.note, queued.retry_of) == (
        "app",
        "retry",
        "use the v2 API",
        run.id,
    )
    meta = read_escalation(store.escalation_path(run.id))
    assert meta is not None and meta.status == "resolved" and meta.resolved == later
    assert meta.retry and meta.note == "use the v2 API"
    assert "## Resolved" in store.escalation_path(run.id).read_text()
    events = [e for e in store.events.read() if e["type"] == "escalation_resolved"]
    assert events == [
        {
            "ts": "2026-11-29T08:00:00.000000Z",
            "type": "escalation_resolved",
            "loop": "app",
            "run": run.id,
            "note": "use the v2 API",
            "retry": True,
            "trigger": trigger.id,
        }
    ]
    assert open_escalations(store) == []
    # the progress notes no longer list it as open
    assert "## Open escalations\n\nNone." in store.progress_path("app").read_text()
    with pytest.raises(AlreadyResolved):
        resolve(store, run.id, later)
    with pytest.raises(EscalationNotFound):
        resolve(store, "20260101T000000Z-app-ffff", later)


def test_resolve_without_retry_queues_nothing(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    run = three_failed(tmp_path, store)
    write_escalation(store, run, NOW)
    assert resolve(store, run.id, NOW, note="merged by hand") is None
    assert take_triggers(store) == []


def test_escalations_command(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    store = StateStore(home / "state")
    run = three_failed(tmp_path, store)
    write_escalation(store, run, NOW)

    listed = loopd(home, "escalations", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [e["run"] for e in json.loads(listed.stdout)] == [run.id]

    shown = loopd(home, "escalations", "show", run.id, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["status"] == "open" and "## Attempts (3)" in data["text"]
    plain = loopd(home, "escalations", "show", run.id)
    assert plain.stdout.startswith("\n# Escalated: loop `app`")

    missing = loopd(home, "escalations", "resolve", "20260101T000000Z-app-ffff", "--retry")
    assert missing.returncode == 2
    assert "no escalation for run '20260101T000000Z-app-ffff'" in missing.stderr
    assert loopd(home, "escalations", "show", "nope").returncode == 2

    done = loopd(home, "escalations", "resolve", run.id, "--retry", "--note", "use the v2 API")
    assert done.returncode == 0, done.stderr
    assert f"resolved {run.id}" in done.stdout
    assert "no daemon is running, so it has no RUN_ID yet" in done.stdout
    (queued,) = take_triggers(store)
    assert queued.note == "use the v2 API" and queued.retry_of == run.id

    again = loopd(home, "escalations", "resolve", run.id)
    assert again.returncode == 1 and "already" in again.stderr
    assert json.loads(loopd(home, "escalations", "list", "--json").stdout) == []
    all_listed = json.loads(loopd(home, "escalations", "list", "--all", "--json").stdout)
    assert [e["status"] for e in all_listed] == ["resolved"]


def test_secrets_in_the_task_are_redacted_and_the_file_still_reads(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    task = 'Deploy with AKIAIOSFODNN7EXAMPLE and password = "hunter2hunter2" to staging.'
    run = make_run(store, "app", NOW - timedelta(hours=1), [dict(checks_passed=False)], task=task)
    path = write_escalation(store, run, NOW)
    text = path.read_text()
    assert "AKIAIOSFODNN7EXAMPLE" not in text and "hunter2hunter2" not in text
    meta = read_escalation(path)
    assert meta is not None and "[REDACTED:aws-access-key]" in meta.task
    assert blocking_escalation(store, "app", task) is not None

"""The next step an escalation suggests: one for every cause, its words as they were."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from daemon.people.next_steps import SUGGESTIONS, suggest
from daemon.state.records import AttemptRecord, Cause, RunRecord, RunTrigger, Violation

AT = datetime(2026, 1, 1, tzinfo=UTC)
BRANCH = " The work so far is on branch `loopd/app/r1`."
RETRY = '`loopd escalations resolve r1 --retry --note "..."`'
PLAIN_RETRY = "`loopd escalations resolve r1 --retry`"


def worked_run(reason: str = "setup failed: boom\nmore") -> RunRecord:
    """An escalated run of two attempts, the last with a violation of every kind."""
    kinds = ("protected", "ref_moved", "repo_config", "detached_head", "too_large")
    violations = [Violation(kind=k, target=f"t-{k}", detail=f"d-{k}") for k in kinds]
    first = AttemptRecord(n=1, started=AT, exit_code=1, limit_hit="memory", checks_passed=False)
    last = AttemptRecord(n=2, started=AT, exit_code=0, score=4, violations=violations)
    return RunRecord(
        id="r1",
        loop="app",
        task="do it",
        trigger=RunTrigger(kind="manual"),
        started=AT,
        outcome="escalated",
        reason=reason,
        branch="loopd/app/r1",
        rules_fired=["R1"],
        attempts=[first, last],
    )


def bare_run() -> RunRecord:
    """A run that ended before any agent started, with no branch."""
    return RunRecord(
        id="r2", loop="b", task="t", trigger=RunTrigger(kind="manual"), started=AT, reason="no"
    )


@pytest.mark.parametrize("cause", list(Cause))
def test_every_cause_has_a_next_step(cause: Cause) -> None:
    assert cause in SUGGESTIONS
    assert suggest(worked_run(), cause).strip()
    assert suggest(bare_run(), cause).strip()


def test_no_cause_gets_the_general_step() -> None:
    assert suggest(worked_run(), None) == suggest(worked_run(), Cause.CANCELLED)


# Written down from the suggestions before they became a table: the words must not change.
EXPECTED: list[tuple[Cause, RunRecord, str]] = [
    (
        Cause.CHECKS_FAILED,
        worked_run(),
        "The checks still fail after 2 attempts; the last failure is below. If the cause is "
        "outside the agent's reach (a missing service, a wrong expectation), fix it and "
        f"{PLAIN_RETRY}; if the agent was close, point it at the cause: {RETRY}.{BRANCH}",
    ),
    (
        Cause.TOO_LARGE,
        worked_run(),
        "The agent committed `t-too_large` (d-too_large); loopd kept it out of your repository "
        "and the run's branch. If the task needs such files, raise `[limits] max_file_size` (a "
        "file) or `max_tree` (the whole tree) in loopd.toml (or use git-lfs); otherwise "
        f"{RETRY} saying not to add them.{BRANCH}",
    ),
    (
        Cause.PROTECT_VIOLATION,
        worked_run(),
        "The agent changed `t-protected`, which `protect` in loops/app.toml forbids; loopd put "
        "them back. If the task needs those changes, narrow `protect`; otherwise say what to "
        f"do instead: {RETRY}.{BRANCH}",
    ),
    (
        Cause.SETUP_FAILED,
        worked_run(),
        "The loop's `setup` failed before any agent ran (setup failed: boom more); its output "
        "is below and in state/runs/r1/setup.log. Fix `setup` in loops/app.toml (or what it "
        f"needs: a package index, a tool), then {PLAIN_RETRY}.",
    ),
    (
        Cause.SETUP_FAILED,
        bare_run(),
        "loopd could not make the run's tree (no). Fix the repository or `base` in "
        "loops/b.toml as the reason says, then `loopd escalations resolve r2 --retry`.",
    ),
    (
        Cause.RESOURCE_LIMIT,
        worked_run(),
        "The agent ran into the memory limit of the run (`[limits]` max_processes, max_memory, "
        "max_tree in loopd.toml) and the checks still fail. A runaway agent (a fork loop, a "
        f"leak) is stopped so; if the task really needs more, raise the limit, then {RETRY}."
        f"{BRANCH}",
    ),
    (
        Cause.CRITIC_REJECTED,
        bare_run(),
        "The checks pass but the critic scored the work too low; read its feedback below. If "
        "the critic is wrong, review the branch and merge it yourself, then `loopd escalations "
        'resolve r2`; if it is right, `loopd escalations resolve r2 --retry --note "..."` '
        "naming what must change.",
    ),
    (
        Cause.CANCELLED,
        worked_run(),
        f"Read the attempts below and the transcripts in state/runs/r1/, then {RETRY}, or drop "
        f"it with `loopd escalations resolve r1`.{BRANCH}",
    ),
]


@pytest.mark.parametrize(("cause", "run", "expected"), EXPECTED)
def test_the_words_are_unchanged(cause: Cause, run: RunRecord, expected: str) -> None:
    assert suggest(run, cause) == expected

"""Tests that kill mutants of the run's decisions (daemon/runparts/decisions.py) that the other
tests let live (bench/mutation.py): each reason a person reads, word for word where the
words are the decision, and every branch of why a run gave up."""

from __future__ import annotations

import errno
import os
from datetime import UTC, datetime

from daemon.runparts import decisions
from daemon.state.records import (
    AttemptRecord,
    Cause,
    Park,
    RunRecord,
    RunTrigger,
    StallRecord,
    Violation,
)

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def attempt(n: int, **fields: object) -> AttemptRecord:
    return AttemptRecord(n=n, started=NOW, **fields)  # type: ignore[arg-type]


def failing(n: int, **fields: object) -> AttemptRecord:
    return attempt(n, checks_passed=False, **fields)


def run(**fields: object) -> RunRecord:
    kind = fields.pop("kind", "manual")
    retry_of = fields.pop("retry_of", "")
    trigger = RunTrigger(kind=kind, ts=NOW, retry_of=retry_of)  # type: ignore[arg-type]
    fields.setdefault("id", "20261130T000000Z-l-0000")
    return RunRecord(loop="l", task="t", trigger=trigger, started=NOW, **fields)  # type: ignore[arg-type]


def stall(kind: str, detail: str = "") -> StallRecord:
    return StallRecord(kind=kind, at=NOW, detail=detail)


# -- given up ------------------------------------------------------------------------------------


def test_timeouts_are_the_cause_only_when_every_attempt_timed_out() -> None:
    # One attempt cut at attempt_timeout, the next ran to its end and failed the checks: the
    # checks are what a person must look at, not the timeout.
    mixed = [failing(1, timed_out=True), failing(2, timed_out=False)]
    ending = decisions.given_up(mixed, 7)
    assert ending.cause == Cause.CHECKS_FAILED
    assert "attempt_timeout" not in ending.reason
    assert decisions.given_up(list(reversed(mixed)), 7).cause == Cause.CHECKS_FAILED
    every = [failing(1, timed_out=True), failing(2, timed_out=True)]
    assert decisions.given_up(every, 7) == (
        "escalated",
        "attempts used up; checks still fail after 2 attempts, each cut at attempt_timeout",
        Cause.TIMEOUTS,
    )


def test_the_count_of_attempts_is_said_in_the_singular_for_one() -> None:
    assert decisions.given_up([failing(1)], 7) == (
        "escalated",
        "attempts used up; checks still fail after 1 attempt",
        Cause.CHECKS_FAILED,
    )
    assert decisions.given_up([failing(1), failing(2), failing(3)], 7).reason == (
        "attempts used up; checks still fail after 3 attempts"
    )


def test_checks_not_run_count_as_failing() -> None:
    assert decisions.given_up([attempt(1, checks_passed=None)], 7).cause == Cause.CHECKS_FAILED


def test_passing_checks_with_violations_name_the_first_violation() -> None:
    first = Violation(kind="too_large", target="big.bin", detail="300 MB")
    second = Violation(kind="protected", target="secrets/x")
    ending = decisions.given_up([attempt(1, checks_passed=True, violations=[first, second])], 7)
    assert ending == (
        "escalated",
        f"attempts used up; {first.text()}",
        Cause.TOO_LARGE,
    )


def test_passing_checks_below_the_critic_threshold_say_the_score() -> None:
    ending = decisions.given_up([failing(1), attempt(2, checks_passed=True, score=4)], 7)
    assert ending == ("escalated", "attempts used up; last score 4 below 7", Cause.CRITIC_REJECTED)


def test_no_attempts_at_all_is_loopds_error() -> None:
    assert decisions.given_up([], 7) == ("escalated", "attempts used up", Cause.LOOPD_ERROR)


def test_a_protected_path_comes_before_every_other_cause() -> None:
    too_large = Violation(kind="too_large", target="big.bin")
    protected = Violation(kind="protected", target="secrets/a")
    other = Violation(kind="protected", target="secrets/b")
    last = failing(
        2,
        violations=[too_large, protected, other],
        stalls=[stall("silence")],
        limit_hit="memory",
        timed_out=True,
    )
    assert decisions.given_up([failing(1, timed_out=True), last], 7) == (
        "escalated",
        f"attempts used up; {protected.text()}; checks still fail after 2 attempts",
        Cause.PROTECT_VIOLATION,
    )


def test_a_failing_violation_is_named_before_stalls_limits_and_timeouts() -> None:
    moved = Violation(kind="detached_head", target="HEAD")  # not a failing kind
    weakened = Violation(kind="checks_weakened", target="tests", detail="3 fewer passed")
    changed = Violation(kind="check_changed_tree", target="out.txt")
    last = failing(1, violations=[moved, weakened, changed], stalls=[stall("silence")])
    assert decisions.given_up([last], 7) == (
        "escalated",
        f"attempts used up; {weakened.text()}",
        Cause.CHECKS_WEAKENED,
    )
    only_moved = failing(1, violations=[moved])
    assert decisions.given_up([only_moved], 7).cause == Cause.CHECKS_FAILED


def test_stalls_of_the_agent_are_counted_over_every_attempt_and_the_last_one_named() -> None:
    attempts = [
        failing(1, stalls=[stall("silence", "no output for 300s"), stall("cancelled")]),
        failing(2, stalls=[stall("silence", "no output for 600s")]),
        failing(3, stalls=[stall("repeated_tool_call", "ls ran 5 times")], limit_hit="memory"),
    ]
    assert decisions.given_up(attempts, 7) == (
        "escalated",
        "attempts used up; the agent was stopped 3 times for repeated tool call "
        "(ls ran 5 times); checks still fail after 3 attempts",
        Cause.STALLED,
    )
    once = [failing(1, stalls=[stall("silence")], timed_out=True)]
    assert decisions.given_up(once, 7) == (
        "escalated",
        "attempts used up; the agent was stopped 1 time for silence; "
        "checks still fail after 1 attempt",
        Cause.STALLED,
    )
    # A stop from outside is not the agent's stall.
    outside = [failing(1, stalls=[stall("cancelled"), stall("interrupted")])]
    assert decisions.given_up(outside, 7).cause == Cause.CHECKS_FAILED


def test_a_run_limit_names_the_last_attempt_that_ran_into_one_and_its_key() -> None:
    attempts = [failing(1, limit_hit="tree"), failing(2, limit_hit="processes"), failing(3)]
    assert decisions.given_up(attempts, 7) == (
        "escalated",
        "attempts used up; attempt 2 ran into the processes limit ([limits] max_processes); "
        "checks still fail after 3 attempts",
        Cause.RESOURCE_LIMIT,
    )
    for hit, key in decisions.LIMIT_KEYS.items():
        reason = decisions.given_up([failing(1, limit_hit=hit, timed_out=True)], 7).reason
        assert f"the {hit} limit ([limits] {key});" in reason
    # A limit this loopd does not know by name: memory is what kills a process unnamed.
    odd = decisions.given_up([failing(1, limit_hit="cpu")], 7).reason
    assert "the cpu limit ([limits] max_memory)" in odd


def test_a_missing_check_program_is_named_cut_to_120_characters() -> None:
    command = "./run-" + "x" * 200
    last = failing(1, checks_missing=[command, "other"], exit_code=127)
    assert decisions.given_up([last], 7) == (
        "escalated",
        f"attempts used up; the check `{command[:120]}` exited 127 or 126: a program it runs "
        "is missing or not executable (see checks.log; `loopd check` names programs not on "
        "the PATH); checks still fail after 1 attempt",
        Cause.CHECKS_FAILED,
    )


def test_an_agent_that_could_not_run_a_program_is_the_agents_failure() -> None:
    for code in (126, 127):
        assert decisions.given_up([failing(1, exit_code=code)], 7) == (
            "escalated",
            f"attempts used up; the agent exited {code}: a program it runs is missing or not "
            "executable; checks still fail after 1 attempt",
            Cause.AGENT_FAILED,
        )
    # Only the last attempt's exit counts.
    earlier = [failing(1, exit_code=127), failing(2, exit_code=1)]
    assert decisions.given_up(earlier, 7).cause == Cause.CHECKS_FAILED
    for code in (1, 125, 128, None):
        assert decisions.given_up([failing(1, exit_code=code)], 7).cause == Cause.CHECKS_FAILED


def test_missing_programs_are_the_checks_that_exited_126_or_127() -> None:
    results = [("a", 0), ("b", 127), ("c", 1), ("d", 126), ("e", None), ("f", 128)]
    assert decisions.missing_programs(results) == ["b", "d"]


# -- cut short, refused, changed the repository -------------------------------------------------


def test_an_attempt_is_cut_short_in_this_order_with_these_reasons() -> None:
    assert decisions.cut_short("", False, 10, 100) is None
    # A usage limit past max_wait outranks the rest.
    assert decisions.cut_short("boom", True, 10, 5, "waited too long") == (
        "escalated",
        "waited too long",
        Cause.QUOTA_WAIT_EXCEEDED,
    )
    assert decisions.cut_short("no such file", True, 10, 5) == (
        "escalated",
        "agent failed to start: no such file",
        Cause.AGENT_FAILED,
    )
    long = decisions.cut_short("e" * 500, False, 0, 0)
    assert long is not None and long.reason == ("agent failed to start: " + "e" * 500)[:300]
    assert decisions.cut_short("", True, 120, 100) == (
        "escalated",
        "token budget exceeded: 120 > 100",
        Cause.TOKEN_CAP,
    )


def test_a_refuse_rule_outranks_an_escalate_rule() -> None:
    assert decisions.refused_by_rule("", "") is None
    assert decisions.refused_by_rule("r-1", "r-2") == (
        "refused",
        "refused by rule r-1",
        Cause.REFUSED,
    )
    assert decisions.refused_by_rule("", "r-2") == (
        "escalated",
        "rule r-2 asks for a person first",
        Cause.RULE_ESCALATE,
    )


def test_a_change_to_the_persons_repository_names_its_first_such_violation() -> None:
    protected = Violation(kind="protected", target="t")
    config = Violation(kind="repo_config", target="core.hooksPath")
    moved = Violation(kind="ref_moved", target="refs/heads/main")
    found = attempt(3, violations=[protected, config, moved])
    assert decisions.repository_changed(found) == (
        "escalated",
        f"attempt 3: {config.text()}",
        Cause.REPO_VIOLATION,
    )
    first_moved = attempt(1, violations=[moved, config])
    assert decisions.repository_changed(first_moved) == (
        "escalated",
        f"attempt 1: {moved.text()}",
        Cause.REF_VIOLATION,
    )
    for kind in ("repo_hook", "repo_info"):
        ending = decisions.repository_changed(
            attempt(1, violations=[Violation(kind=kind, target="x")])
        )
        assert ending is not None and ending.cause == Cause.REPO_VIOLATION


# -- failures ------------------------------------------------------------------------------------


def test_a_missing_file_says_which_and_what_to_do() -> None:
    gone = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "/srv/repo")
    message = decisions.failure_message(gone)
    assert message == (
        f"{os.strerror(errno.ENOENT)}: /srv/repo: a file or folder loopd needs is gone or "
        "unreadable; if it is the loop's repository or the worktrees folder, put it back or fix "
        "the path in the loop file or loopd.toml (`loopd check` says what is wrong), then retry "
        "the run"
    )
    # No strerror: the class names what happened.
    bare = OSError()
    bare.filename = "/srv/x"
    assert decisions.failure_message(bare).startswith("OSError: /srv/x: a file or folder")
    # No file named: an unexpected error, by its class.
    assert decisions.failure_message(OSError("disk full")) == "OSError: disk full"
    assert decisions.failure_message(ValueError("bad")) == "ValueError: bad"


def test_a_known_failure_keeps_its_own_words() -> None:
    from daemon.git.safe import GitError
    from daemon.git.tree import TreeError

    assert decisions.failure_message(TreeError("no repository at /x")) == "no repository at /x"
    err = GitError(["push"], 1, "rejected")
    assert decisions.failure_message(err) == str(err)
    # A known failure that is also an OSError with a file is not read as a missing file.

    class NamedTree(TreeError, OSError):
        pass

    odd = NamedTree(errno.ENOENT, "tree gone", "/x")
    assert decisions.failure_message(odd) == str(odd)
    assert "a file or folder loopd needs" not in decisions.failure_message(odd)


def test_failure_endings_cut_each_kind_of_message_to_its_length() -> None:
    long = "m" * 2000
    git = decisions.failure_ending("GitError", long)
    assert git == ("error", "git failed: " + "m" * 300, Cause.GIT_FAILED)
    setup = decisions.failure_ending("TreeError", long)
    assert setup == ("error", "m" * 1000, Cause.SETUP_FAILED)
    sandbox = decisions.failure_ending("SandboxUnavailable", "no bwrap")
    assert sandbox == ("error", "no bwrap", Cause.SANDBOX_UNAVAILABLE)
    other = decisions.failure_ending("ValueError", long)
    assert other == ("error", ("ValueError: " + long)[:400], Cause.LOOPD_ERROR)


def test_an_unknown_failure_is_prefixed_with_its_class_once() -> None:
    assert decisions.failure_ending("KeyError", "boom") == (
        "error",
        "KeyError: boom",
        Cause.LOOPD_ERROR,
    )
    assert decisions.failure_ending("KeyError", "KeyError: boom").reason == "KeyError: boom"
    assert decisions.failure_ending(decisions.OTHER_FAILURE, "boom").reason == "boom"
    assert decisions.failure_ending("", "boom").reason == "boom"


def test_failure_kind_follows_the_class_to_its_nearest_known_base() -> None:
    from daemon.git.safe import GitError, GitTimeout

    assert decisions.failure_kind(GitTimeout(["fetch"], 30)) == "GitTimeout"
    assert decisions.failure_kind(GitError(["push"], 1, "x")) == "GitError"

    class Deeper(GitError):
        pass

    assert decisions.failure_kind(Deeper(["x"], 1, "")) == "GitError"
    assert decisions.failure_kind(ValueError()) == decisions.OTHER_FAILURE


# -- where a run starts, what stops it -----------------------------------------------------------


def test_a_retry_starts_from_the_branch_of_the_run_it_retries() -> None:
    earlier = run(id="20261129T000000Z-l-0000", branch="loopd/l/1", isolation="worktree")
    retry = run(kind="retry", retry_of=earlier.id)
    assert decisions.retry_base(retry, earlier) == "refs/heads/loopd/l/1"
    assert decisions.retry_base(retry, None) == ""
    # Not a retry, or a retry of another run.
    assert decisions.retry_base(run(kind="manual", retry_of=earlier.id), earlier) == ""
    assert decisions.retry_base(run(kind="retry", retry_of="other"), earlier) == ""
    # An in-place run's branch is the person's own; a deleted branch is nothing to build on.
    in_place = run(id=earlier.id, branch="main", isolation="in-place")
    assert decisions.retry_base(retry, in_place) == ""
    deleted = run(id=earlier.id, branch="", isolation="clone")
    assert decisions.retry_base(retry, deleted) == ""


def test_in_place_runs_fix_no_target_and_build_on_nothing() -> None:
    assert decisions.records_target("worktree") and decisions.records_target("clone")
    assert not decisions.records_target("in-place")
    assert decisions.builds_on_last_success("last-success", "worktree")
    assert decisions.builds_on_last_success("last-success", "clone")
    assert not decisions.builds_on_last_success("last-success", "in-place")
    assert not decisions.builds_on_last_success("base", "worktree")


def test_a_stop_while_judging_or_parked_resumes_and_otherwise_interrupts() -> None:
    assert decisions.stopped("cancelled", "waiting", "retry") == (
        "cancelled",
        "cancelled by a person",
        Cause.CANCELLED,
    )
    assert decisions.stopped("interrupted", "waiting", "manual") is None
    assert decisions.stopped("interrupted", "judging", "retry") is None
    # Learning resumes after a stop as after a crash (one resumable set, runparts/decisions.py).
    assert decisions.stopped("interrupted", "learning", "schedule") is None
    for phase in ("preparing", "running", "landing"):
        assert decisions.stopped("interrupted", phase, "schedule") == (
            "interrupted",
            decisions.INTERRUPTED_REASON,
            Cause.INTERRUPTED,
        )
    assert decisions.stopped("interrupted", "running", "retry") == (
        "interrupted",
        decisions.INTERRUPTED_REASON,
        Cause.INTERRUPTED_RETRY,
    )


def test_a_run_left_live_resumes_only_when_its_agent_was_done_or_it_was_parked() -> None:
    done = attempt(1, finished=NOW)
    unfinished = attempt(1)
    for phase in ("judging", "learning"):
        assert decisions.left_live(run(phase=phase, attempts=[done])) is None
        cut = decisions.left_live(run(phase=phase, attempts=[done, unfinished]))
        assert cut == ("interrupted", decisions.INTERRUPTED_REASON, Cause.INTERRUPTED)
        assert decisions.left_live(run(phase=phase)) is not None
    park = Park(profile="p", attempt=1, started=NOW, since=NOW)
    assert decisions.left_live(run(phase="waiting", park=park, attempts=[unfinished])) is None
    assert decisions.left_live(run(phase="waiting", attempts=[unfinished])) is not None
    assert decisions.left_live(run(phase="waiting", park=park)) is not None
    # A finished agent in another phase is interrupted all the same; a retry goes to a person.
    running = decisions.left_live(run(phase="running", attempts=[done], kind="retry"))
    assert running == ("interrupted", decisions.INTERRUPTED_REASON, Cause.INTERRUPTED_RETRY)


def test_only_an_interrupted_first_run_is_retried() -> None:
    assert decisions.retried(decisions.Ending("interrupted", "x", Cause.INTERRUPTED))
    assert not decisions.retried(decisions.Ending("interrupted", "x", Cause.INTERRUPTED_RETRY))
    assert not decisions.retried(decisions.Ending("error", "x", Cause.INTERRUPTED))

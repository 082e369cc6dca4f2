"""The next step an escalation suggests to a person: one per cause of the run's end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from daemon.people.digest import one_line
from daemon.state.records import AttemptRecord, Cause, RunRecord, Violation


@dataclass(frozen=True)
class _Facts:
    """What the next steps are phrased from: the run and the commands that resolve it."""

    run: RunRecord
    branch: str  # a sentence naming the run's branch, or ""
    retry: str
    plain_retry: str
    rules: str

    @property
    def rid(self) -> str:
        return self.run.id

    @property
    def loop(self) -> str:
        return self.run.loop

    @property
    def last(self) -> AttemptRecord | None:
        return self.run.attempts[-1] if self.run.attempts else None

    def violations(self, match: Callable[[str], bool]) -> list[Violation]:
        """The last attempt's violations whose kind matches."""
        return [v for v in self.last.violations if match(v.kind)] if self.last else []


def _facts(run: RunRecord) -> _Facts:
    """The facts of `run` its next step is phrased from."""
    rid = run.id
    return _Facts(
        run=run,
        branch=f" The work so far is on branch `{run.branch}`." if run.branch else "",
        retry=f'`loopd escalations resolve {rid} --retry --note "..."`',
        plain_retry=f"`loopd escalations resolve {rid} --retry`",
        rules=", ".join(f"`{r}`" for r in run.rules_fired) or "see below",
    )


def _kind(kind: str) -> Callable[[str], bool]:
    return lambda k: k == kind


def _refused(f: _Facts) -> str:
    return (
        f"A rule of severity `refuse` matched this task ({f.rules}). Read it with "
        "`loopd rules show ID`; if it should not apply, retire it (`loopd rules retire ID`) "
        f"or change the task in loops/{f.loop}.toml, then {f.retry}."
    )


def _rule_escalate(f: _Facts) -> str:
    return (
        f"A rule of severity `escalate` asks for a person before any agent starts ({f.rules}). "
        f"Decide, then let it run with your instructions: {f.retry}; or drop it: "
        f"`loopd escalations resolve {f.rid}`."
    )


def _verifier_unavailable(f: _Facts) -> str:
    return (
        "The verifier endpoint did not answer, so the work was never judged. Start the model "
        "server named by `[verifier] base_url` in loopd.toml (check it with "
        f"`curl BASE_URL/models`), then {f.plain_retry}.{f.branch}"
    )


def _agent_failed(f: _Facts) -> str:
    last = f.last
    code = f" (exit code {last.exit_code})" if last and last.exit_code is not None else ""
    return (
        f"The agent did not start{code}. Check its profile in loopd.toml (adapter, command, "
        "that the program is on the daemon's PATH; under systemd that is the unit's "
        f"Environment=PATH), run `loopd once {f.loop}` in a terminal to see the error, then "
        f"{f.plain_retry}."
    )


def _stalled(f: _Facts) -> str:
    return (
        "loopd stopped the agent for a stall (silence past `stall_after`, or one tool call "
        f"repeated). Read `loopd logs {f.rid}` for what it was doing; raise `stall_after` in "
        f"loops/{f.loop}.toml if its work is slow and quiet, or make the task smaller, then "
        f"{f.retry}.{f.branch}"
    )


def _token_cap(f: _Facts) -> str:
    return (
        f"The run used {f.run.tokens} tokens and passed `max_tokens`. Raise it in "
        f"loops/{f.loop}.toml or split the task into smaller loops, then {f.retry}.{f.branch}"
    )


def _quota_wait_exceeded(f: _Facts) -> str:
    return (
        f"The agent hit its usage limit and it lifts later than `[limits] max_wait` allows "
        f"({one_line(f.run.reason, 200)}). New runs of its profile wait for the reset anyway. "
        "Raise `max_wait` in loopd.toml, or give the loop another agent profile, then "
        f"{f.plain_retry}.{f.branch}"
    )


def _interrupted(f: _Facts) -> str:
    return (
        "loopd stopped during this run and during its retry (a crash, a kill or restarts). "
        f"Read `journalctl --user -u 'loopd*'` and state/events.jsonl around run {f.rid}, fix "
        f"the cause, then {f.plain_retry}.{f.branch}"
    )


def _protect_violation(f: _Facts) -> str:
    paths = [v.target for v in f.violations(_kind("protected"))]
    what = ", ".join(f"`{p}`" for p in paths[:10]) or "protected paths"
    return (
        f"The agent changed {what}, which `protect` in loops/{f.loop}.toml forbids; loopd put "
        "them back. If the task needs those changes, narrow `protect`; otherwise say what "
        f"to do instead: {f.retry}.{f.branch}"
    )


def _ref_violation(f: _Facts) -> str:
    refs = [v.target for v in f.violations(_kind("ref_moved"))]
    what = ", ".join(f"`{r}`" for r in refs[:10]) or "refs of your repository"
    return (
        f"{what} moved while the agent worked (by the agent, or by you: loopd cannot tell). "
        "loopd left them where they are. Check each with `git log -3 REF` and reset it "
        f'if the move is not yours; use `isolation = "clone"` with the sandbox to keep '
        f"agents away from your refs, then {f.retry}.{f.branch}"
    )


def _repo_violation(f: _Facts) -> str:
    files = [v.target for v in f.violations(lambda k: k.startswith("repo_"))]
    what = ", ".join(f"`{x}`" for x in files[:10]) or "your repository's git files"
    return (
        f"The agent changed {what} in your repository's git directory; loopd put them "
        "back (a hook or config it wrote would have run at your next git command). Use "
        f'`isolation = "clone"` with the sandbox, then {f.retry}.{f.branch}'
    )


def _git_violation(f: _Facts) -> str:
    kept = [v.detail for v in f.violations(_kind("detached_head"))]
    where = f" ({'; '.join(kept[:3])})" if kept else ""
    return (
        "The agent left commits that do not descend from the run's base, or replaced its "
        f"tree's `.git`{where}. Look at them, then {f.retry}.{f.branch}"
    )


def _critic_rejected(f: _Facts) -> str:
    last = f.last
    score = f"{last.score}/10" if last and last.score is not None else "too low"
    return (
        f"The checks pass but the critic scored the work {score}; read its feedback below. "
        "If the critic is wrong, review the branch and merge it yourself, then "
        f"`loopd escalations resolve {f.rid}`; if it is right, {f.retry} naming what must "
        f"change.{f.branch}"
    )


def _too_large(f: _Facts) -> str:
    found = f.violations(_kind("too_large"))
    what = ", ".join(f"`{v.target}` ({v.detail})" for v in found[:5]) or "a file"
    return (
        f"The agent committed {what}; loopd kept it out of your repository and the run's "
        "branch. If the task needs such files, raise `[limits] max_file_size` in "
        f"loopd.toml (or use git-lfs); otherwise {f.retry} saying not to add them.{f.branch}"
    )


def _resource_limit(f: _Facts) -> str:
    hit = next((a for a in reversed(f.run.attempts) if a.limit_hit), None)
    what = hit.limit_hit if hit else "a"
    return (
        f"The agent ran into the {what} limit of the run (`[limits]` max_processes, "
        "max_memory, max_tree in loopd.toml) and the checks still fail. A runaway "
        "agent (a fork loop, a leak) is stopped so; if the task really needs more, raise "
        f"the limit, then {f.retry}.{f.branch}"
    )


def _landing_checks_failed(f: _Facts) -> str:
    run = f.run
    return (
        f"The run succeeded, but {run.landing or 'the checks fail on what would land'}. "
        f"Nothing landed; the branch `{run.branch}` is kept. Read state/runs/{f.rid}/"
        "land-checks.log: if the target moved under the run, merge it yourself and fix "
        f"what conflicts in meaning; otherwise {f.retry}."
    )


def _check_changed_tree(f: _Facts) -> str:
    found = f.violations(_kind("check_changed_tree"))
    what = "; ".join(f"`{v.target}` changed {v.detail}" for v in found[:3]) or "a check"
    return (
        f"A check changed files the commit holds ({what}): its result says nothing of the "
        "branch's code. loopd runs the checks on a clean tree of each commit; look for code "
        "the agent added that runs during the checks (a conftest.py, a plugin, a build "
        f"step), then {f.retry}.{f.branch}"
    )


def _checks_weakened(f: _Facts) -> str:
    found = f.violations(_kind("checks_weakened"))
    what = "; ".join(f"`{v.target}`: {v.detail}" for v in found[:3]) or "the checks"
    return (
        f"The checks pass but test less than on the base ({what}): tests skipped, "
        "deselected or no longer collected. Look at what the agent changed around the "
        f"tests; if the change is right, add the command to `allow_fewer_tests` in "
        f"loops/{f.loop}.toml, else {f.retry}.{f.branch}"
    )


def _checks_failed(f: _Facts) -> str:
    n = len(f.run.attempts)
    return (
        f"The checks still fail after {n} attempt{'s' if n != 1 else ''}; the last failure "
        "is below. If the cause is outside the agent's reach (a missing service, a wrong "
        f"expectation), fix it and {f.plain_retry}; if the agent was close, point it at the "
        f"cause: {f.retry}.{f.branch}"
    )


def _timeouts(f: _Facts) -> str:
    return (
        f"Every attempt hit `attempt_timeout`. Raise it in loops/{f.loop}.toml or split the "
        f"task, then {f.retry}.{f.branch}"
    )


def _setup_failed(f: _Facts) -> str:
    reason = one_line(f.run.reason, 200)
    if f.run.reason.startswith("setup failed"):
        return (
            f"The loop's `setup` failed before any agent ran ({reason}); "
            f"its output is below and in state/runs/{f.rid}/setup.log. Fix `setup` in "
            f"loops/{f.loop}.toml (or what it needs: a package index, a tool), then "
            f"{f.plain_retry}."
        )
    return (
        f"loopd could not make the run's tree ({reason}). Fix the "
        f"repository or `base` in loops/{f.loop}.toml as the reason says, then {f.plain_retry}."
    )


def _git_failed(f: _Facts) -> str:
    return (
        f"A git command on the run's tree failed or hung ({one_line(f.run.reason, 200)}). "
        "Look for a stale lock or a very large file in the tree and for `run_error` in "
        f"state/events.jsonl, then {f.plain_retry}.{f.branch}"
    )


def _sandbox_unavailable(f: _Facts) -> str:
    return (
        f"No agent was started: {one_line(f.run.reason, 300)} Then {f.plain_retry}; "
        "`loopd check` says which sandbox is in force."
    )


def _loopd_error(f: _Facts) -> str:
    return (
        f"loopd itself failed on this run ({one_line(f.run.reason, 200)}). Look for "
        "`run_error` in state/events.jsonl, fix the cause (often the repository or the "
        f"worktrees folder), then {f.plain_retry}.{f.branch}"
    )


def _read_and_decide(f: _Facts) -> str:
    """The next step when the cause names nothing more particular."""
    return (
        f"Read the attempts below and the transcripts in state/runs/{f.rid}/, then {f.retry}, "
        f"or drop it with `loopd escalations resolve {f.rid}`.{f.branch}"
    )


# Every cause has its next step; a new member of Cause needs one here (tests check).
SUGGESTIONS: dict[Cause, Callable[[_Facts], str]] = {
    Cause.CHECKS_FAILED: _checks_failed,
    Cause.CRITIC_REJECTED: _critic_rejected,
    Cause.PROTECT_VIOLATION: _protect_violation,
    Cause.REF_VIOLATION: _ref_violation,
    Cause.REPO_VIOLATION: _repo_violation,
    Cause.GIT_VIOLATION: _git_violation,
    Cause.TIMEOUTS: _timeouts,
    Cause.STALLED: _stalled,
    Cause.TOKEN_CAP: _token_cap,
    Cause.VERIFIER_UNAVAILABLE: _verifier_unavailable,
    Cause.AGENT_FAILED: _agent_failed,
    Cause.SETUP_FAILED: _setup_failed,
    Cause.GIT_FAILED: _git_failed,
    Cause.REFUSED: _refused,
    Cause.RULE_ESCALATE: _rule_escalate,
    Cause.CANCELLED: _read_and_decide,
    Cause.INTERRUPTED: _interrupted,
    Cause.INTERRUPTED_RETRY: _interrupted,
    Cause.QUOTA_WAIT_EXCEEDED: _quota_wait_exceeded,
    Cause.LOOPD_ERROR: _loopd_error,
    Cause.PASSED: _read_and_decide,
    Cause.SANDBOX_UNAVAILABLE: _sandbox_unavailable,
    Cause.ALREADY_DONE: _read_and_decide,
    Cause.LANDING_BLOCKED: _read_and_decide,
    Cause.LANDING_CHECKS_FAILED: _landing_checks_failed,
    Cause.TOO_LARGE: _too_large,
    Cause.RESOURCE_LIMIT: _resource_limit,
    Cause.CHECK_CHANGED_TREE: _check_changed_tree,
    Cause.CHECKS_WEAKENED: _checks_weakened,
}


def suggest(run: RunRecord, cause: Cause | None) -> str:
    """A next step for a person, chosen from the cause."""
    step = SUGGESTIONS.get(cause, _read_and_decide) if cause is not None else _read_and_decide
    return step(_facts(run))

"""The next step an escalation suggests to a person: one text per cause of the run's end."""

from __future__ import annotations

from collections.abc import Callable

from daemon.people.digest import one_line
from daemon.state.records import AttemptRecord, Cause, RunRecord, Violation

# One text per cause, filled from the run's facts (`_fields`). A new member of Cause needs a
# text here (tests check); the words are pinned by tests/test_next_steps.py.
SUGGESTIONS: dict[Cause, str] = {
    Cause.REFUSED: (
        "A rule of severity `refuse` matched this task ({rules}). Read it with "
        "`loopd rules show ID`; if it should not apply, retire it (`loopd rules retire ID`) "
        "or change the task in loops/{loop}.toml, then {retry}."
    ),
    Cause.RULE_ESCALATE: (
        "A rule of severity `escalate` asks for a person before any agent starts ({rules}). "
        "Decide, then let it run with your instructions: {retry}; or drop it: "
        "`loopd escalations resolve {rid}`."
    ),
    Cause.VERIFIER_UNAVAILABLE: (
        "The verifier endpoint did not answer, so the work was never judged. Start the model "
        "server named by `[verifier] base_url` in loopd.toml (check it with "
        "`curl BASE_URL/models`), then {plain_retry}.{branch}"
    ),
    Cause.AGENT_FAILED: (
        "The agent did not start{exit_code}. Check its profile in loopd.toml (adapter, "
        "command, that the program is on the daemon's PATH; under systemd that is the unit's "
        "Environment=PATH), run `loopd once {loop}` in a terminal to see the error, then "
        "{plain_retry}."
    ),
    Cause.AGENT_LOGIN: (
        "The agent's provider refused its login ({reason}). Nudging would send the same "
        "credentials again, so loopd held every loop of the same agent profile (`agent` in "
        "loops/{loop}.toml; `loopd status` says why they wait). Log in again as the user "
        "loopd runs as (run the agent's program in a terminal: `claude` then /login, "
        "`codex login`, `gemini`), or fix the key the profile's `env` or `api_key_env` names; "
        "then `loopd check` tries the login, lifts the hold and resolves this escalation."
    ),
    Cause.STALLED: (
        "loopd stopped the agent for a stall (silence past `stall_after`, or one tool call "
        "repeated). Read `loopd logs {rid}` for what it was doing; raise `stall_after` in "
        "loops/{loop}.toml if its work is slow and quiet, or make the task smaller, then "
        "{retry}.{branch}"
    ),
    Cause.TOKEN_CAP: (
        "The run used {tokens} tokens and passed `max_tokens`. Raise it in "
        "loops/{loop}.toml or split the task into smaller loops, then {retry}.{branch}"
    ),
    Cause.QUOTA_WAIT_EXCEEDED: (
        "The agent hit its usage limit and it lifts later than `[limits] max_wait` allows "
        "({reason}). New runs of its profile wait for the reset anyway. "
        "Raise `max_wait` in loopd.toml, or give the loop another agent profile, then "
        "{plain_retry}.{branch}"
    ),
    Cause.INTERRUPTED: (
        "loopd stopped during this run and during its retry (a crash, a kill or restarts). "
        "Read `journalctl --user -u 'loopd*'` and state/events.jsonl around run {rid}, fix "
        "the cause, then {plain_retry}.{branch}"
    ),
    Cause.PROTECT_VIOLATION: (
        "The agent changed {protected}, which `protect` in loops/{loop}.toml forbids; loopd "
        "put them back. If the task needs those changes, narrow `protect`; otherwise say what "
        "to do instead: {retry}.{branch}"
    ),
    Cause.REF_VIOLATION: (
        "{refs} moved while the agent worked (by the agent, or by you: loopd cannot tell). "
        "loopd left them where they are. Check each with `git log -3 REF` and reset it "
        'if the move is not yours; use `isolation = "clone"` with the sandbox to keep '
        "agents away from your refs, then {retry}.{branch}"
    ),
    Cause.REPO_VIOLATION: (
        "The agent changed {repo_files} in your repository's git directory; loopd put them "
        "back (a hook or config it wrote would have run at your next git command). Use "
        '`isolation = "clone"` with the sandbox, then {retry}.{branch}'
    ),
    Cause.GIT_VIOLATION: (
        "The agent left commits that do not descend from the run's base, or replaced its "
        "tree's `.git`{kept}. Look at them, then {retry}.{branch}"
    ),
    Cause.CRITIC_REJECTED: (
        "The checks pass but the critic scored the work {score}; read its feedback below. "
        "If the critic is wrong, review the branch and merge it yourself, then "
        "`loopd escalations resolve {rid}`; if it is right, {retry} naming what must "
        "change.{branch}"
    ),
    Cause.TOO_LARGE: (
        "The agent committed {too_large}; loopd kept it out of your repository and the run's "
        "branch. If the task needs such files, raise `[limits] max_file_size` (a file) or "
        "`max_tree` (the whole tree) in loopd.toml (or use git-lfs); otherwise {retry} "
        "saying not to add them.{branch}"
    ),
    Cause.RESOURCE_LIMIT: (
        "The agent ran into the {limit} limit of the run (`[limits]` max_processes, "
        "max_memory, max_tree in loopd.toml) and the checks still fail. A runaway "
        "agent (a fork loop, a leak) is stopped so; if the task really needs more, raise "
        "the limit, then {retry}.{branch}"
    ),
    Cause.LANDING_CHECKS_FAILED: (
        "The run succeeded, but {landing}. Nothing landed; the branch `{run_branch}` is kept. "
        "Read state/runs/{rid}/land-checks.log: if the target moved under the run, merge it "
        "yourself and fix what conflicts in meaning; otherwise {retry}."
    ),
    Cause.LANDING_MOVING: (
        "The run succeeded, but {landing}. Nothing landed; the branch `{run_branch}` is kept. "
        "Something pushes to the target while landings run their checks: `loopd land {rid}` "
        "once it holds still, or merge the branch yourself."
    ),
    Cause.LANDING_CONFLICT: (
        "The run succeeded, but {landing}. Nothing landed; the branch `{run_branch}` is kept. "
        "Merge the target into it yourself and resolve the conflict, then `loopd land {rid}` "
        "(it runs setup and the checks again on what lands), or `loopd escalations resolve "
        "{rid} --retry` to run the task again on the target as it is now."
    ),
    Cause.CHECK_CHANGED_TREE: (
        "A check changed files the commit holds ({changed}): its result says nothing of the "
        "branch's code. loopd runs the checks on a clean tree of each commit; look for code "
        "the agent added that runs during the checks (a conftest.py, a plugin, a build "
        "step), then {retry}.{branch}"
    ),
    Cause.LINK_OUT_OF_TREE: (
        "The agent committed a symbolic link that leads out of the tree ({links_out}): the "
        "checks would read through it what the branch does not hold (a copy in the agent's "
        "HOME or TMPDIR, a file of this machine). Look at the branch, then {retry} saying "
        "to commit the files themselves.{branch}"
    ),
    Cause.CHECKS_WEAKENED: (
        "The checks pass but test less than on the base ({weakened}): tests skipped, "
        "deselected or no longer collected. Look at what the agent changed around the "
        "tests; if the change is right, add the command to `allow_fewer_tests` in "
        "loops/{loop}.toml, else {retry}.{branch}"
    ),
    Cause.CHECKS_FAILED: (
        "The checks still fail after {attempts}; the last failure is below. If the cause is "
        "outside the agent's reach (a missing service, a wrong expectation), fix it and "
        "{plain_retry}; if the agent was close, point it at the cause: {retry}.{branch}"
    ),
    Cause.TIMEOUTS: (
        "Every attempt hit `attempt_timeout`. Raise it in loops/{loop}.toml or split the "
        "task, then {retry}.{branch}"
    ),
    Cause.SETUP_FAILED: (
        "The loop's `setup` failed before any agent ran ({reason}); its output is below and "
        "in state/runs/{rid}/setup.log. Fix `setup` in loops/{loop}.toml (or what it needs: "
        "a package index, a tool), then {plain_retry}."
    ),
    Cause.ENVIRONMENT: (
        "A check cannot run where loopd runs it (the reason above names the check, what is "
        "missing and the interpreter the sandbox found); no agent was started, no nudge "
        "spent. Make the program reachable in the checks' environment (install it, or put "
        'its venv first with `env = {{ PATH = "/path/to/venv/bin:{{PATH}}" }}` or `setup` '
        "in loops/{loop}.toml), see it pass with `loopd check --run-checks`, then "
        "{plain_retry}."
    ),
    Cause.AGENT_GAVE_UP: (
        "The agent gave up: it exited non-zero or said it cannot go on, while the checks "
        "failed, and did so again after one nudge. Its last message is quoted below: answer "
        "what stopped it (a missing fact, a decision, access it lacks), then {retry}.{branch}"
    ),
    Cause.GIT_FAILED: (
        "A git command on the run's tree failed or hung ({reason}). Look for a stale lock or "
        "a very large file in the tree and for `run_error` in state/events.jsonl, then "
        "{plain_retry}.{branch}"
    ),
    Cause.SANDBOX_UNAVAILABLE: (
        "No agent was started: {long_reason} Then {plain_retry}; `loopd check` says which "
        "sandbox is in force."
    ),
    Cause.LOOPD_ERROR: (
        "loopd itself failed on this run ({reason}). Look for `run_error` in "
        "state/events.jsonl, fix the cause (often the repository or the worktrees folder), "
        "then {plain_retry}.{branch}"
    ),
    Cause.STATE_FULL: (
        "Make room on the disk that holds state/: delete what is not loopd's there, or lower "
        '`[limits] retain_days` or `state_max` in loopd.toml (docs/operating.md, "A full '
        'disk"). loopd goes on by itself once a write fits; resolve this escalation when you '
        "know what filled the disk: `loopd escalations resolve {rid}`."
    ),
}
# When the cause names nothing more particular.
READ_AND_DECIDE = (
    "Read the attempts below and the transcripts in state/runs/{rid}/, then {retry}, "
    "or drop it with `loopd escalations resolve {rid}`.{branch}"
)
# SETUP_FAILED whose reason is not the setup's: the run's tree could not be made.
TREE_FAILED = (
    "loopd could not make the run's tree ({reason}). Fix the repository or `base` in "
    "loops/{loop}.toml as the reason says, then {plain_retry}."
)
for _cause in (Cause.CANCELLED, Cause.PASSED, Cause.ALREADY_DONE, Cause.LANDING_BLOCKED):
    SUGGESTIONS[_cause] = READ_AND_DECIDE
SUGGESTIONS[Cause.INTERRUPTED_RETRY] = SUGGESTIONS[Cause.INTERRUPTED]


def _targets(last: AttemptRecord | None, match: Callable[[str], bool]) -> list[Violation]:
    """The last attempt's violations whose kind matches."""
    return [v for v in last.violations if match(v.kind)] if last else []


def _named(found: list[Violation], limit: int, otherwise: str) -> str:
    return ", ".join(f"`{v.target}`" for v in found[:limit]) or otherwise


def _violation_fields(last: AttemptRecord | None) -> dict[str, str]:
    """The texts naming the last attempt's violations, by kind."""

    def kind(name: str) -> list[Violation]:
        return _targets(last, lambda k: k == name)

    kept = [v.detail for v in kind("detached_head")]
    large = kind("too_large")
    changed = kind("check_changed_tree")
    weakened = kind("checks_weakened")
    links = kind("link_out_of_tree")
    return {
        "protected": _named(kind("protected"), 10, "protected paths"),
        "refs": _named(kind("ref_moved"), 10, "refs of your repository"),
        "repo_files": _named(
            _targets(last, lambda k: k.startswith("repo_")), 10, "your repository's git files"
        ),
        "kept": f" ({'; '.join(kept[:3])})" if kept else "",
        "too_large": ", ".join(f"`{v.target}` ({v.detail})" for v in large[:5]) or "a file",
        "changed": "; ".join(f"`{v.target}` changed {v.detail}" for v in changed[:3]) or "a check",
        "weakened": "; ".join(f"`{v.target}`: {v.detail}" for v in weakened[:3]) or "the checks",
        "links_out": "; ".join(f"`{v.target}` {v.detail}" for v in links[:3]) or "a link",
    }


def _fields(run: RunRecord) -> dict[str, str]:
    """The facts of `run` its next step is phrased from."""
    rid = run.id
    last = run.attempts[-1] if run.attempts else None
    hit = next((a for a in reversed(run.attempts) if a.limit_hit), None)
    n = len(run.attempts)
    return {
        "rid": rid,
        "loop": run.loop,
        "branch": f" The work so far is on branch `{run.branch}`." if run.branch else "",
        "run_branch": run.branch or "",
        "retry": f'`loopd escalations resolve {rid} --retry --note "..."`',
        "plain_retry": f"`loopd escalations resolve {rid} --retry`",
        "rules": ", ".join(f"`{r}`" for r in run.rules_fired) or "see below",
        "reason": one_line(run.reason, 200),
        "long_reason": one_line(run.reason, 300),
        "tokens": str(run.tokens),
        "exit_code": f" (exit code {last.exit_code})"
        if last and last.exit_code is not None
        else "",
        "score": f"{last.score}/10" if last and last.score is not None else "too low",
        "limit": (hit.limit_hit or "a") if hit else "a",
        "landing": run.landing or "the checks fail on what would land",
        "attempts": f"{n} attempt{'s' if n != 1 else ''}",
        **_violation_fields(last),
    }


def suggest(run: RunRecord, cause: Cause | None) -> str:
    """A next step for a person, chosen from the cause."""
    text = SUGGESTIONS.get(cause, READ_AND_DECIDE) if cause is not None else READ_AND_DECIDE
    if cause is Cause.SETUP_FAILED and not run.reason.startswith("setup failed"):
        text = TREE_FAILED
    return text.format(**_fields(run))

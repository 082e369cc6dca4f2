"""What an escalation file says: why the run needs a person, the next step, and what happened.

The next step follows from the run's recorded `cause`, never from the words of its reason.
"""

from __future__ import annotations

from daemon.people.digest import (
    checks_word,
    format_stat,
    last_checks_failure,
    last_diff,
    one_line,
)
from daemon.people.landstate import landing_state
from daemon.state.events import iso
from daemon.state.records import AttemptRecord, Cause, RunRecord, violation_cause
from daemon.state.store import StateStore


def cause_of(run: RunRecord) -> Cause | None:
    """The run's cause; for a record written before causes were kept, read from its attempts."""
    if run.cause is not None:
        return run.cause
    attempts = run.attempts
    last = attempts[-1] if attempts else None
    if run.outcome in ("refused", "cancelled", "interrupted"):
        return Cause(run.outcome)
    if last is None:
        return Cause.RULE_ESCALATE if run.outcome == "escalated" else Cause.LOOPD_ERROR
    if all(a.exit_code in (126, 127) for a in attempts):
        return Cause.AGENT_FAILED
    if run.outcome == "error":
        return Cause.LOOPD_ERROR
    if last.violations:
        return violation_cause(last.violations[0].kind)
    if last.checks_passed is True:
        # Escalated with passing checks and no score: the critic never answered.
        return Cause.CRITIC_REJECTED if last.score is not None else Cause.VERIFIER_UNAVAILABLE
    if last.checks_passed is False:
        if all(a.timed_out for a in attempts):
            return Cause.TIMEOUTS
        return Cause.CHECKS_FAILED
    return None


def suggest(run: RunRecord, cause: Cause | None) -> str:
    """A next step for a person, chosen from the cause."""
    rid, loop = run.id, run.loop
    branch = f" The work so far is on branch `{run.branch}`." if run.branch else ""
    retry = f'`loopd escalations resolve {rid} --retry --note "..."`'
    plain_retry = f"`loopd escalations resolve {rid} --retry`"
    rules = ", ".join(f"`{r}`" for r in run.rules_fired) or "see below"
    n = len(run.attempts)
    last = run.attempts[-1] if run.attempts else None
    if cause == Cause.REFUSED:
        return (
            f"A rule of severity `refuse` matched this task ({rules}). Read it with "
            "`loopd rules show ID`; if it should not apply, retire it (`loopd rules retire ID`) "
            f"or change the task in loops/{loop}.toml, then {retry}."
        )
    if cause == Cause.RULE_ESCALATE:
        return (
            f"A rule of severity `escalate` asks for a person before any agent starts ({rules}). "
            f"Decide, then let it run with your instructions: {retry}; or drop it: "
            f"`loopd escalations resolve {rid}`."
        )
    if cause == Cause.VERIFIER_UNAVAILABLE:
        return (
            "The verifier endpoint did not answer, so the work was never judged. Start the model "
            "server named by `[verifier] base_url` in loopd.toml (check it with "
            f"`curl BASE_URL/models`), then {plain_retry}.{branch}"
        )
    if cause == Cause.AGENT_FAILED:
        code = f" (exit code {last.exit_code})" if last and last.exit_code is not None else ""
        return (
            f"The agent did not start{code}. Check its profile in loopd.toml (adapter, command, "
            "that the program is on the daemon's PATH; under systemd that is the unit's "
            f"Environment=PATH), run `loopd once {loop}` in a terminal to see the error, then "
            f"{plain_retry}."
        )
    if cause == Cause.STALLED:
        return (
            "loopd stopped the agent for a stall (silence past `stall_after`, or one tool call "
            f"repeated). Read `loopd logs {rid}` for what it was doing; raise `stall_after` in "
            f"loops/{loop}.toml if its work is slow and quiet, or make the task smaller, then "
            f"{retry}.{branch}"
        )
    if cause == Cause.TOKEN_CAP:
        return (
            f"The run used {run.tokens} tokens and passed `max_tokens`. Raise it in "
            f"loops/{loop}.toml or split the task into smaller loops, then {retry}.{branch}"
        )
    if cause == Cause.QUOTA_WAIT_EXCEEDED:
        return (
            f"The agent hit its usage limit and it lifts later than `[limits] max_wait` allows "
            f"({one_line(run.reason, 200)}). New runs of its profile wait for the reset anyway. "
            "Raise `max_wait` in loopd.toml, or give the loop another agent profile, then "
            f"{plain_retry}.{branch}"
        )
    if cause in (Cause.INTERRUPTED, Cause.INTERRUPTED_RETRY):
        return (
            "loopd stopped during this run and during its retry (a crash, a kill or restarts). "
            f"Read `journalctl --user -u 'loopd*'` and state/events.jsonl around run {rid}, fix "
            f"the cause, then {plain_retry}.{branch}"
        )
    if cause == Cause.PROTECT_VIOLATION:
        paths = [v.target for v in last.violations if v.kind == "protected"] if last else []
        what = ", ".join(f"`{p}`" for p in paths[:10]) or "protected paths"
        return (
            f"The agent changed {what}, which `protect` in loops/{loop}.toml forbids; loopd put "
            "them back. If the task needs those changes, narrow `protect`; otherwise say what "
            f"to do instead: {retry}.{branch}"
        )
    if cause == Cause.REF_VIOLATION:
        refs = [v.target for v in last.violations if v.kind == "ref_moved"] if last else []
        what = ", ".join(f"`{r}`" for r in refs[:10]) or "refs of your repository"
        return (
            f"{what} moved while the agent worked (by the agent, or by you: loopd cannot tell). "
            "loopd left them where they are. Check each with `git log -3 REF` and reset it "
            f'if the move is not yours; use `isolation = "clone"` with the sandbox to keep '
            f"agents away from your refs, then {retry}.{branch}"
        )
    if cause == Cause.REPO_VIOLATION:
        files = [v.target for v in last.violations if v.kind.startswith("repo_")] if last else []
        what = ", ".join(f"`{f}`" for f in files[:10]) or "your repository's git files"
        return (
            f"The agent changed {what} in your repository's git directory; loopd put them "
            "back (a hook or config it wrote would have run at your next git command). Use "
            f'`isolation = "clone"` with the sandbox, then {retry}.{branch}'
        )
    if cause == Cause.GIT_VIOLATION:
        kept = [v.detail for v in last.violations if v.kind == "detached_head"] if last else []
        where = f" ({'; '.join(kept[:3])})" if kept else ""
        return (
            "The agent left commits that do not descend from the run's base, or replaced its "
            f"tree's `.git`{where}. Look at them, then {retry}.{branch}"
        )
    if cause == Cause.CRITIC_REJECTED:
        score = f"{last.score}/10" if last and last.score is not None else "too low"
        return (
            f"The checks pass but the critic scored the work {score}; read its feedback below. "
            "If the critic is wrong, review the branch and merge it yourself, then "
            f"`loopd escalations resolve {rid}`; if it is right, {retry} naming what must "
            f"change.{branch}"
        )
    if cause == Cause.TOO_LARGE:
        found = [v for v in last.violations if v.kind == "too_large"] if last else []
        what = ", ".join(f"`{v.target}` ({v.detail})" for v in found[:5]) or "a file"
        return (
            f"The agent committed {what}; loopd kept it out of your repository and the run's "
            "branch. If the task needs such files, raise `[limits] max_file_size` in "
            f"loopd.toml (or use git-lfs); otherwise {retry} saying not to add them.{branch}"
        )
    if cause == Cause.RESOURCE_LIMIT:
        hit = next((a for a in reversed(run.attempts) if a.limit_hit), None)
        what = hit.limit_hit if hit else "a"
        return (
            f"The agent ran into the {what} limit of the run (`[limits]` max_processes, "
            "max_memory, max_tree in loopd.toml) and the checks still fail. A runaway "
            "agent (a fork loop, a leak) is stopped so; if the task really needs more, raise "
            f"the limit, then {retry}.{branch}"
        )
    if cause == Cause.LANDING_CHECKS_FAILED:
        return (
            f"The run succeeded, but {run.landing or 'the checks fail on what would land'}. "
            f"Nothing landed; the branch `{run.branch}` is kept. Read state/runs/{rid}/"
            "land-checks.log: if the target moved under the run, merge it yourself and fix "
            f"what conflicts in meaning; otherwise {retry}."
        )
    if cause == Cause.CHECK_CHANGED_TREE:
        found = [v for v in last.violations if v.kind == "check_changed_tree"] if last else []
        what = "; ".join(f"`{v.target}` changed {v.detail}" for v in found[:3]) or "a check"
        return (
            f"A check changed files the commit holds ({what}): its result says nothing of the "
            "branch's code. loopd runs the checks on a clean tree of each commit; look for code "
            "the agent added that runs during the checks (a conftest.py, a plugin, a build "
            f"step), then {retry}.{branch}"
        )
    if cause == Cause.CHECKS_WEAKENED:
        found = [v for v in last.violations if v.kind == "checks_weakened"] if last else []
        what = "; ".join(f"`{v.target}`: {v.detail}" for v in found[:3]) or "the checks"
        return (
            f"The checks pass but test less than on the base ({what}): tests skipped, "
            "deselected or no longer collected. Look at what the agent changed around the "
            f"tests; if the change is right, add the command to `allow_fewer_tests` in "
            f"loops/{loop}.toml, else {retry}.{branch}"
        )
    if cause == Cause.CHECKS_FAILED:
        return (
            f"The checks still fail after {n} attempt{'s' if n != 1 else ''}; the last failure "
            "is below. If the cause is outside the agent's reach (a missing service, a wrong "
            f"expectation), fix it and {plain_retry}; if the agent was close, point it at the "
            f"cause: {retry}.{branch}"
        )
    if cause == Cause.TIMEOUTS:
        return (
            f"Every attempt hit `attempt_timeout`. Raise it in loops/{loop}.toml or split the "
            f"task, then {retry}.{branch}"
        )
    if cause == Cause.SETUP_FAILED and run.reason.startswith("setup failed"):
        return (
            f"The loop's `setup` failed before any agent ran ({one_line(run.reason, 200)}); "
            f"its output is below and in state/runs/{rid}/setup.log. Fix `setup` in "
            f"loops/{loop}.toml (or what it needs: a package index, a tool), then {plain_retry}."
        )
    if cause == Cause.SETUP_FAILED:
        return (
            f"loopd could not make the run's tree ({one_line(run.reason, 200)}). Fix the "
            f"repository or `base` in loops/{loop}.toml as the reason says, then {plain_retry}."
        )
    if cause == Cause.GIT_FAILED:
        return (
            f"A git command on the run's tree failed or hung ({one_line(run.reason, 200)}). "
            "Look for a stale lock or a very large file in the tree and for `run_error` in "
            f"state/events.jsonl, then {plain_retry}.{branch}"
        )
    if cause == Cause.SANDBOX_UNAVAILABLE:
        return (
            f"No agent was started: {one_line(run.reason, 300)} Then {plain_retry}; "
            "`loopd check` says which sandbox is in force."
        )
    if cause == Cause.LOOPD_ERROR:
        return (
            f"loopd itself failed on this run ({one_line(run.reason, 200)}). Look for "
            "`run_error` in state/events.jsonl, fix the cause (often the repository or the "
            f"worktrees folder), then {plain_retry}.{branch}"
        )
    return (
        f"Read the attempts below and the transcripts in state/runs/{rid}/, then {retry}, or "
        f"drop it with `loopd escalations resolve {rid}`.{branch}"
    )


def _fence(text: str) -> str:
    """A fenced block longer than any backtick run inside, so the content cannot close it."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}text\n{text}\n{ticks}"


def quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.strip().splitlines())


def _duration(attempt: AttemptRecord) -> str:
    if attempt.finished is None:
        return ""
    seconds = int((attempt.finished - attempt.started).total_seconds())
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _attempt_section(attempt: AttemptRecord) -> list[str]:
    head = [f"checks {checks_word(attempt.checks_passed)}"]
    head.append(f"score {attempt.score}/10" if attempt.score is not None else "not scored")
    if attempt.exit_code is not None:
        head.append(f"agent exit {attempt.exit_code}")
    if attempt.timed_out:
        head.append("timed out")
    head.append(f"{attempt.nudges} nudge{'s' if attempt.nudges != 1 else ''}")
    head.append(f"{len(attempt.stalls)} stall{'s' if len(attempt.stalls) != 1 else ''}")
    if attempt.tokens:
        head.append(f"{attempt.tokens} tokens")
    if dur := _duration(attempt):
        head.append(dur)
    lines = [f"### Attempt {attempt.n}: " + ", ".join(head), ""]
    if attempt.verdict:
        lines += ["**Verdict:**", quote(attempt.verdict), ""]
    if attempt.feedback:
        lines += ["**Feedback:**", quote(attempt.feedback), ""]
    if attempt.violations:
        lines += ["**Violations:** " + "; ".join(v.text() for v in attempt.violations), ""]
    for stall in attempt.stalls:
        detail = f": {one_line(stall.detail, 120)}" if stall.detail else ""
        lines.append(f"- stall ({stall.kind}) at {iso(stall.at)}{detail}")
    if attempt.stalls:
        lines.append("")
    return lines


def render(store: StateStore, run: RunRecord, cause: str, suggestion: str) -> str:
    """The body of the escalation file for `run`."""
    rid = run.id
    out = [
        f"# Escalated: loop `{run.loop}`, run {rid}",
        "",
        f"**Why:** {run.reason or run.outcome or 'unresolved'} ({cause})",
        "",
        f"**Suggested next step:** {suggestion}",
        "",
        "## Task",
        "",
        quote(run.task),
        "",
    ]
    trig = run.trigger
    trig_line = f"Started {iso(run.started)} by a `{trig.kind}` trigger"
    if trig.reason:
        trig_line += f": {one_line(trig.reason)}"
    if trig.ref:
        trig_line += f" (ref `{trig.ref}`{' at ' + trig.new[:12] if trig.new else ''})"
    out += [trig_line + "."]
    if trig.retry_of:
        out += [f"It retries run {trig.retry_of}."]
    if trig.note:
        out += ["", "A person's note came with it:", quote(trig.note)]
    finished = f"; finished {iso(run.finished)}" if run.finished else ""
    out += [f"Outcome `{run.outcome or 'unfinished'}`{finished}; {run.tokens} tokens.", ""]

    out += [f"## Attempts ({len(run.attempts)})", ""]
    if not run.attempts:
        out += ["No agent was started.", ""]
    for attempt in run.attempts:
        out += _attempt_section(attempt)

    setup_log = store.run_dir(rid) / "setup.log"
    if cause_of(run) == Cause.SETUP_FAILED and setup_log.is_file():
        text = setup_log.read_text(encoding="utf-8", errors="replace")
        tail = text if len(text) <= 3000 else "[...]\n" + text[-3000:]
        out += ["## Setup (tail of setup.log)", "", _fence(tail.rstrip()), ""]
    failure = last_checks_failure(store, run)
    if failure is not None:
        out += [
            f"## Last failure of the checks (attempt {failure.attempt}, tail of checks.log)",
            "",
            _fence(failure.tail or "(checks.log is empty)"),
            "",
        ]
    elif run.attempts and run.attempts[-1].checks_passed:
        out += ["## Checks", "", "The last attempt's checks passed.", ""]

    out += ["## Rules that fired", ""]
    out += [f"- `{r}`" for r in run.rules_fired] or ["None."]
    out += [""]

    out += ["## Changes", ""]
    if run.outcome == "succeeded":
        out += [f"Landing: {landing_state(run).line()}.", ""]
    if run.branch:
        where = f" in {run.repo}" if run.repo else ""
        out += [f"Branch `{run.branch}`{where}."]
        if run.base_commit:
            out += [
                f"See it with `git log -p {run.base_commit[:12]}..{run.branch}`; take it "
                f"with `git merge {run.branch}`."
            ]
    diff = last_diff(store, run)
    if diff is None:
        out += ["", "The agent left no changes."]
    else:
        out += [
            "",
            f"Diff of attempt {diff.attempt}:",
            "",
            _fence("\n".join(format_stat(diff.stat))),
        ]
    out += [
        "",
        "## How to resolve",
        "",
        f'- Retry with your instructions: `loopd escalations resolve {rid} --retry --note "..."`'
        " (the note goes into the next prompt under `# Note from a person`).",
        f"- Close it without a new run: `loopd escalations resolve {rid}`.",
        f"- Everything loopd recorded: `state/runs/{rid}/`.",
        "",
    ]
    return "\n".join(out)

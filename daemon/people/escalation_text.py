"""What an escalation file says: why the run needs a person, the next step, and what happened.

The next step follows from the run's recorded `cause`, never from the words of its reason.
"""

from __future__ import annotations

from daemon.people.digest import (
    checks_word,
    format_stat,
    last_checks_failure,
    last_diff,
    last_message,
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


def _last_message_lines(run: RunRecord) -> list[str]:
    """The agent's own words at the end of its last attempt that said something."""
    if not run.attempts:
        return []
    said = last_message(run)
    if said is None:
        return ["## The agent's last message", "", "The agent left no message.", ""]
    return [f"## The agent's last message (attempt {said.attempt})", "", quote(said.text), ""]


def _trigger_lines(run: RunRecord) -> list[str]:
    """How the run started: its trigger, what it retries, a person's note, how it ended."""
    trig = run.trigger
    trig_line = f"Started {iso(run.started)} by a `{trig.kind}` trigger"
    if trig.reason:
        trig_line += f": {one_line(trig.reason)}"
    if trig.ref:
        trig_line += f" (ref `{trig.ref}`{' at ' + trig.new[:12] if trig.new else ''})"
    out = [trig_line + "."]
    if trig.retry_of:
        out += [f"It retries run {trig.retry_of}."]
    if trig.note:
        out += ["", "A person's note came with it:", quote(trig.note)]
    finished = f"; finished {iso(run.finished)}" if run.finished else ""
    out += [f"Outcome `{run.outcome or 'unfinished'}`{finished}; {run.tokens} tokens.", ""]
    return out


def _attempts_lines(run: RunRecord) -> list[str]:
    out = [f"## Attempts ({len(run.attempts)})", ""]
    if not run.attempts:
        out += ["No agent was started.", ""]
    for attempt in run.attempts:
        out += _attempt_section(attempt)
    return out


def _failure_lines(store: StateStore, run: RunRecord) -> list[str]:
    """The tail of setup.log when setup failed, and the checks' last failure or pass."""
    out: list[str] = []
    setup_log = store.run_dir(run.id) / "setup.log"
    if cause_of(run) == Cause.SETUP_FAILED and setup_log.is_file():
        text = setup_log.read_text(encoding="utf-8", errors="replace")
        tail = text if len(text) <= 3000 else "[...]\n" + text[-3000:]
        out += ["## Setup (tail of setup.log)", "", _fence(tail.rstrip()), ""]
    done_log = store.run_dir(run.id) / "done-check.log"
    if cause_of(run) == Cause.ENVIRONMENT and done_log.is_file():
        text = done_log.read_text(encoding="utf-8", errors="replace")
        tail = text if len(text) <= 3000 else "[...]\n" + text[-3000:]
        out += ["## The checks on the base (done-check.log)", "", _fence(tail.rstrip()), ""]
    failure = last_checks_failure(store, run)
    if failure is not None:
        out += [
            "## Last failure of the checks "
            f"(attempt {failure.attempt}, checks.log: its failures and its end)",
            "",
            _fence(failure.tail or "(checks.log is empty)"),
            "",
        ]
    elif run.attempts and run.attempts[-1].checks_passed:
        out += ["## Checks", "", "The last attempt's checks passed.", ""]
    return out


def _changes_lines(store: StateStore, run: RunRecord) -> list[str]:
    """Where the work is: landing, the branch, and the last diff's stat."""
    out = ["## Changes", ""]
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
    return out


def _resolve_lines(rid: str) -> list[str]:
    return [
        "",
        "## How to resolve",
        "",
        f'- Retry with your instructions: `loopd escalations resolve {rid} --retry --note "..."`'
        " (the note goes into the next prompt under `# Note from a person`).",
        f"- Close it without a new run: `loopd escalations resolve {rid}`.",
        f"- Everything loopd recorded: `state/runs/{rid}/`.",
        "",
    ]


def render(store: StateStore, run: RunRecord, cause: str, suggestion: str) -> str:
    """The body of the escalation file for `run`."""
    out = [
        f"# Escalated: loop `{run.loop}`, run {run.id}",
        "",
        f"**Why:** {run.reason or run.outcome or 'unresolved'} ({cause})",
        "",
        f"**Suggested next step:** {suggestion}",
        "",
        *_last_message_lines(run),
        "## Task",
        "",
        quote(run.task),
        "",
    ]
    out += _trigger_lines(run)
    out += _attempts_lines(run)
    out += _failure_lines(store, run)
    out += ["## Rules that fired", ""]
    out += [f"- `{r}`" for r in run.rules_fired] or ["None."]
    out += [""]
    out += _changes_lines(store, run)
    out += _resolve_lines(run.id)
    return "\n".join(out)

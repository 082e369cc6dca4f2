"""`state/progress/LOOP.md`: handoff notes rebuilt from state after each run.

Built from run records, attempt folders, escalations and events, not from the agent's
prose, so a fresh agent session starts from what was recorded. The next prompt's
`# Progress so far` section is `read_progress`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from daemon.people.digest import (
    best_score,
    checks_word,
    format_stat,
    last_checks_failure,
    last_diff,
    one_line,
)
from daemon.people.escalation_file import open_escalations
from daemon.people.terminal import clean
from daemon.redact import redact
from daemon.state.atomic import write_atomic
from daemon.state.events import iso
from daemon.state.records import RunRecord
from daemon.state.store import StateStore

LAST_RUNS = 5
RULE_EVENTS = ("rule_accepted", "rule_promoted", "rule_demoted", "rule_retired", "rule_rejected")
_RULE_STATE = {
    "rule_accepted": "trial",
    "rule_promoted": "active",
    "rule_demoted": "retired",
    "rule_retired": "retired",
    "rule_rejected": "rejected",
}


def _rule_id(event: dict[str, Any]) -> str:
    for key in ("rule", "rule_id", "id"):
        value = event.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _rule_text(event: dict[str, Any]) -> str:
    for key in ("intent", "trigger_intent", "rule_text", "summary", "title"):
        if isinstance(event.get(key), str) and event[key]:
            return one_line(event[key], 140)
    return ""


def rule_events(store: StateStore, loop: str | None = None) -> list[dict[str, Any]]:
    """Rule lifecycle events of the current events file, oldest first, for one loop or all."""
    out: list[dict[str, Any]] = []
    try:
        fh = store.events.path.open("rb")
    except OSError:
        return out
    with fh:
        for raw in fh:
            if b'"rule_' not in raw:  # most lines are not about rules: skip the JSON parse
                continue
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if event.get("type") in RULE_EVENTS and (loop is None or event.get("loop") == loop):
                out.append(event)
    return out


def learned_rules_lines(store: StateStore, loop: str) -> list[str]:
    """One line per rule this loop's runs proposed, with the state its last event gave it."""
    latest: dict[str, dict[str, Any]] = {}
    for event in rule_events(store, loop):
        rule = _rule_id(event)
        if rule:
            merged = {**latest.get(rule, {}), **{k: v for k, v in event.items() if v}}
            latest[rule] = merged
    lines = []
    for rule, event in latest.items():
        state = _RULE_STATE.get(event.get("type", ""), "")
        if state == "rejected":
            continue
        text = _rule_text(event)
        lines.append(f"- `{rule}` ({state})" + (f": {text}" if text else ""))
    return lines


def _run_line(run: RunRecord) -> str:
    when = iso(run.finished or run.started)[:16] + "Z"
    parts = [f"{len(run.attempts)} attempt{'s' if len(run.attempts) != 1 else ''}"]
    if run.attempts:
        parts.append(f"checks {checks_word(run.attempts[-1].checks_passed)}")
    score = best_score(run.attempts)
    if score is not None:
        parts.append(f"best score {score}/10")
    outcome = run.outcome or run.phase
    reason = f" ({one_line(run.reason, 100)})" if run.reason and run.outcome != "succeeded" else ""
    line = f"- {when} run {run.id}, {run.trigger.kind}: **{outcome}**{reason}; " + ", ".join(parts)
    if run.branch:
        line += f"; branch `{run.branch}`"
    return line


def _failing_checks(store: StateStore, last: RunRecord) -> list[str]:
    """What the latest run found of the checks: a pass or a skip clears an older failure."""
    if last.outcome == "skipped":
        return [f"None: run {last.id} found the checks passing already and was skipped."]
    attempt = next(a for a in reversed(last.attempts) if a.checks_passed is not None)
    failure = last_checks_failure(store, last)
    if attempt.checks_passed is not False or failure is None:
        return [f"None: the checks of run {last.id} attempt {attempt.n} "
                f"{checks_word(attempt.checks_passed)}."]  # fmt: skip
    tail = failure.tail.replace("```", "'''")
    if last.worktree:  # the run's tree is removed as it ends: paths into it name nothing
        tail = tail.replace(last.worktree.rstrip("/") + "/", "")
    out = [f"Run {last.id}, attempt {failure.attempt}, checks.log (its failures and end):", ""]
    return out + ["```text", tail, "```"]


def build_progress(
    store: StateStore, loop: str, now: datetime, runs: list[RunRecord] | None = None
) -> str:
    """The Markdown of the loop's progress notes, from state."""
    if runs is None:
        runs = []
        for run_id in reversed(store.run_ids(loop)):
            try:
                run = store.load_run(run_id)
            except Exception:  # noqa: BLE001 - a broken run.toml must not hide the others
                continue
            if run.experiment is None:  # an experiment's runs are not the loop's work
                runs.append(run)
            if len(runs) == LAST_RUNS:
                break
    out = [f"# Progress: {loop}", "", f"Rebuilt by loopd from state at {iso(now)}.", ""]
    out += ["## Last runs (newest first)", ""]
    out += [_run_line(r) for r in runs] or ["No runs yet."]
    out += [""]

    diff_run = next(((r, d) for r in runs if (d := last_diff(store, r)) is not None), None)
    out += ["## What the last diff changed", ""]
    if diff_run is None:
        out += ["No run left changes yet."]
    else:
        run, diff = diff_run
        where = f" on branch `{run.branch}`" if run.branch else ""
        out += [f"Run {run.id}, attempt {diff.attempt}{where} ({run.outcome or run.phase}):", ""]
        out += [f"- {line}" for line in format_stat(diff.stat, limit=20)]
    out += [""]

    out += ["## Checks that still fail", ""]
    # The newest run that learned anything of the checks (a skip or an attempt checked)
    # says what fails now; a run cancelled in the queue, say, learned nothing.
    told = [r for r in runs if r.outcome == "skipped" or any(a.checks_passed is not None
            for a in r.attempts)]  # fmt: skip
    out += _failing_checks(store, told[0]) if told else ["No checks have run yet."]
    out += [""]

    out += ["## Open escalations", ""]
    waiting = open_escalations(store, loop)
    out += [
        f"- run {e.run}: {one_line(e.reason or e.cause, 120)} (state/escalations/{e.run}.md)"
        for e in waiting
    ] or ["None."]
    out += [""]

    out += ["## Rules learned", ""]
    out += learned_rules_lines(store, loop) or ["None yet."]
    out += [""]
    return "\n".join(out)


def update_progress(store: StateStore, loop: str, now: datetime) -> str:
    """Rewrite `state/progress/LOOP.md` from state; returns its text."""
    text = clean(redact(build_progress(store, loop, now)))  # agent text: no escapes
    write_atomic(store.progress_path(loop), text)
    return text


def read_progress(store: StateStore, loop: str) -> str:
    """The progress notes for the next prompt's `# Progress so far`, without their title."""
    try:
        text = store.progress_path(loop).read_text(encoding="utf-8")
    except OSError:
        return ""
    lines = text.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(lines).strip()

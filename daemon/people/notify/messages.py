"""What a notification says: one line for a person and a JSON payload, per kind."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.people.digest import best_score, checks_word, last_message, one_line
from daemon.people.escalation_file import Escalation
from daemon.people.terminal import clean
from daemon.state.events import iso
from daemon.state.records import AttemptRecord, RunRecord


def _run_payload(run: RunRecord) -> dict[str, Any]:
    return {
        "loop": run.loop,
        "run": run.id,
        "task": run.task,
        "outcome": run.outcome,
        "reason": run.reason,
        "branch": run.branch,
        "tokens": run.tokens,
        "rules_fired": run.rules_fired,
        "attempts": [
            {
                "n": a.n,
                "checks_passed": a.checks_passed,
                "score": a.score,
                "verdict": a.verdict,
                "feedback": a.feedback,
                "nudges": a.nudges,
                "stalls": len(a.stalls),
            }
            for a in run.attempts
        ],
    }


def escalation_message(run: RunRecord, path: Path) -> tuple[str, dict[str, Any]]:
    """The notification for an escalation; the payload carries the escalation file's text."""
    score = best_score(run.attempts)
    said = last_message(run)
    words = f' The agent said: "{one_line(said.text, 240)}".' if said is not None else ""
    text = (
        f"loopd: {run.loop} needs a person: {one_line(clean(run.reason or str(run.outcome)), 100)} "
        f"({len(run.attempts)} attempts"
        + (f", best score {score}/10" if score is not None else "")
        + f").{words} Read {path}"
    )
    payload = {"kind": "escalated", **_run_payload(run), "file": str(path)}
    payload["last_message"] = said.text if said is not None else ""
    try:
        payload["escalation"] = path.read_text(encoding="utf-8")
    except OSError:
        payload["escalation"] = ""
    return text, payload


def question_message(run: RunRecord, path: Path, question: str) -> tuple[str, dict[str, Any]]:
    """The notification for an agent's question (`ask_person`): the run goes on."""
    text = (
        f"loopd: {run.loop} asks a person: {one_line(question, 160)} "
        f"(run {run.id} goes on). Read {path}"
    )
    payload = {"kind": "question", **_run_payload(run), "file": str(path), "question": question}
    return text, payload


def repeat_digest_message(meta: Escalation, path: Path) -> tuple[str, dict[str, Any]]:
    """The daily digest of an open escalation's repeats: how many since the last notice."""
    new = meta.count - meta.notified_count
    text = (
        f"loopd: {meta.loop} still needs a person: {new} more run"
        + ("s" if new != 1 else "")
        + f" of the same task escalated since {iso(meta.notified or meta.escalated)[:16]}Z "
        f"({meta.count} in all; latest {meta.latest_run}: "
        f"{one_line(meta.latest_reason or meta.latest_cause, 100)}). Read {path}"
    )
    payload = {
        "kind": "escalation-repeated",
        "loop": meta.loop,
        "run": meta.latest_run,
        "escalation": meta.run,
        "count": meta.count,
        "new": new,
        "file": str(path),
    }
    return text, payload


def outcome_message(run: RunRecord) -> tuple[str, dict[str, Any]]:
    """The notification for a finished run (for `notify_on = ["succeeded"]`)."""
    score = best_score(run.attempts)
    text = (
        f"loopd: {run.loop} run {run.id} {run.outcome}"
        + (f", score {score}/10" if score is not None else "")
        + (f"; branch {run.branch}" if run.branch else "")
    )
    return text, {"kind": run.outcome or "finished", **_run_payload(run)}


def attempt_failed_message(run: RunRecord, attempt: AttemptRecord) -> tuple[str, dict[str, Any]]:
    """The notification for a failed attempt (for `notify_on = ["failed-attempt"]`)."""
    score = f", score {attempt.score}/10" if attempt.score is not None else ""
    why = (
        f": {one_line(attempt.feedback or attempt.verdict, 120)}"
        if (attempt.feedback or attempt.verdict)
        else ""
    )
    text = (
        f"loopd: {run.loop} run {run.id} attempt {attempt.n} failed "
        f"(checks {checks_word(attempt.checks_passed)}{score}){why}"
    )
    return text, {"kind": "failed-attempt", **_run_payload(run), "attempt": attempt.n}


def daemon_failure_message(home: Path, error: str) -> tuple[str, dict[str, Any]]:
    """The notification for the daemon failing (it is about to exit or cannot go on)."""
    text = f"loopd for {home} failed: {one_line(error, 200)}"
    return text, {"kind": "daemon-failed", "home": str(home), "error": error}


def state_full_message(home: Path, what: str) -> tuple[str, dict[str, Any]]:
    """The notification for `state/` full: loopd stays up and waits for room."""
    text = (
        f"loopd for {home}: state/ is full (writing {one_line(what, 120)} found no room). "
        "loopd stays up: deliveries are answered 503 (their senders retry) and no run starts "
        "until there is room; free space on the disk of state/ (or lower state_max) and it "
        "goes on by itself"
    )
    return text, {"kind": "state-full", "home": str(home), "what": what}


def quota_wait_message(run: RunRecord) -> tuple[str, dict[str, Any]]:
    """The notification for a run parked on its agent's usage limit (`notify_on` "waiting")."""
    park = run.park
    when = run.resume_at.strftime("%Y-%m-%d %H:%M UTC") if run.resume_at else "later"
    words = one_line(park.message, 120) if park else ""
    text = (
        f"loopd: {run.loop} run {run.id} waits for the usage limit of agent profile "
        f"{park.profile if park else '?'!r} and resumes at {when}" + (f": {words}" if words else "")
    )
    payload = {
        "kind": "waiting",
        **_run_payload(run),
        "resume_at": run.resume_at.isoformat() if run.resume_at else None,
        "message": park.message if park else "",
    }
    return text, payload


def _ago(since: datetime, now: datetime) -> str:
    minutes = max(0, int((now - since).total_seconds() // 60))
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes} min"


def verifier_down_message(
    base_url: str, since: datetime, error: str, now: datetime
) -> tuple[str, dict[str, Any]]:
    """The notification for a verifier unreachable past the notice time."""
    text = (
        f"loopd: the verifier at {base_url} has been unreachable for {_ago(since, now)}; "
        f"runs wait in judging and free their slots: {one_line(error, 160)}"
    )
    payload = {
        "kind": "verifier-down",
        "base_url": base_url,
        "since": since.isoformat(),
        "error": error,
    }
    return text, payload


def verifier_up_message(
    base_url: str, since: datetime, now: datetime
) -> tuple[str, dict[str, Any]]:
    """The notification for a verifier that answers again after an announced outage."""
    text = f"loopd: the verifier at {base_url} answers again, after {_ago(since, now)} down"
    payload = {"kind": "verifier-up", "base_url": base_url, "down_since": since.isoformat()}
    return text, payload

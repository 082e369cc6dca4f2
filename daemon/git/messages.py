"""The messages of loopd's commits: what each one holds, in a first line that stays short.

`loopd(LOOP): TASK (run RUN_ID, attempt N: checks pass, score 8)`, the task cut to its first
words; the whole task follows in the body. They end up in the target's history when a run
lands, so they say what a person reading `git log` wants to know.
"""

from __future__ import annotations

from daemon.state.records import AttemptRecord, RunRecord

TASK_WORDS = 48  # characters of the task in the first line


def short_task(task: str, limit: int = TASK_WORDS) -> str:
    """The task's first line, cut at a word to at most `limit` characters."""
    first = " ".join((task.strip().splitlines() or [""])[0].split())
    if len(first) <= limit:
        return first
    cut = first[: limit - 1].rsplit(" ", 1)[0] if " " in first[: limit - 1] else first[: limit - 1]
    return cut.rstrip(" ,.;:") + "…"


def attempt_state(attempt: AttemptRecord) -> str:
    """What an attempt's commit holds, as far as loopd knows it."""
    if attempt.checks_passed is None:
        return "checks not run"
    words = "checks pass" if attempt.checks_passed else "checks fail"
    if attempt.judged and attempt.score is not None:
        words += f", score {attempt.score}"
    return words


def commit_message(run: RunRecord, n: int, state: str = "") -> str:
    """The message of loopd's commit of attempt `n` of `run` (`state`: what it holds)."""
    what = f"attempt {n}: {state}" if state else f"attempt {n}"
    subject = f"loopd({run.loop}): {short_task(run.task)} (run {run.id}, {what})"
    return f"{subject}\n\n{run.task.strip()}\n"


def merge_message(run: RunRecord, target: str, state: str) -> str:
    """The message of a landing merge of `target` into the run's branch."""
    return (
        f"loopd({run.loop}): merge {target} into run {run.id} ({state})\n\n"
        f"{short_task(run.task, 200)}\n"
    )


def pr_title(run: RunRecord) -> str:
    return f"loopd({run.loop}): {short_task(run.task, 72)}"


def squash_message(run: RunRecord, checks: list[str]) -> str:
    """The message of the one commit a run lands as (`land_commits = "squash"`): the loop,
    the task, the run id and the checks that passed on it."""
    subject = f"loopd({run.loop}): {short_task(run.task)} (run {run.id})"
    passed = [f"- {command}" for command in checks] or ["- none (the loop has no done_when)"]
    lines = [subject, "", run.task.strip(), "", f"loopd run {run.id} of loop {run.loop}"]
    if run.attempts:
        lines[-1] += f", {len(run.attempts)} attempt{'s' if len(run.attempts) > 1 else ''}"
    return "\n".join([*lines, "", "Checks that passed:", *passed]) + "\n"

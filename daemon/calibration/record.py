"""The home's own record as labelled attempts: outcomes that are known without the judge."""

from __future__ import annotations

from daemon.calibration.cases import Case, Label
from daemon.people.escalation_file import list_escalations
from daemon.state.records import AttemptRecord, RunRecord
from daemon.state.store import StateStore


def _stayed_green(run: RunRecord, later: list[RunRecord]) -> bool:
    """The run landed, and the next run of its loop succeeded on top of its work."""
    return run.landed and bool(later) and later[0].outcome == "succeeded"


def _label(
    run: RunRecord, attempt: AttemptRecord, later: list[RunRecord], person: Label | None
) -> Label | None:
    """A person's verdict on the last attempt first; then failed clean checks; then landing."""
    last = attempt is run.attempts[-1]
    if last and person is not None:
        return person
    if attempt.checks_passed is False:
        return "bad"
    if last and _stayed_green(run, later):
        return "good"
    return None


def home_record_cases(store: StateStore, limit: int | None = None) -> list[Case]:
    """Bad: attempts whose clean checks failed. Good: the last attempt of a run that landed
    and whose loop's next run then succeeded. `escalations resolve --verdict` overrides both
    for the run's last attempt."""
    verdicts: dict[str, Label] = {e.run: e.verdict for e in list_escalations(store) if e.verdict}
    runs = list(store.iter_runs(newest_first=False))
    cases: list[Case] = []
    for index, run in enumerate(runs):
        later = [r for r in runs[index + 1 :] if r.loop == run.loop and r.outcome is not None]
        for attempt in run.attempts:
            folder = store.attempt_dir(run.id, attempt.n)
            label = _label(run, attempt, later, verdicts.get(run.id))
            if label is None or not folder.is_dir():
                continue  # its outcome is not known without the judge, or nothing is kept
            cases.append(
                Case(
                    id=f"{run.id}/attempt-{attempt.n}",
                    label=label,
                    task=run.task,
                    summary=attempt.summary,
                    checks_passed=bool(attempt.checks_passed),
                    folder=folder,
                    kind="home record",
                )
            )
    return cases[:limit] if limit is not None else cases

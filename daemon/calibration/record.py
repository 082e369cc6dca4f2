"""The home's own record as labelled attempts: outcomes that are known without the judge."""

from __future__ import annotations

from daemon.calibration.cases import Case
from daemon.state.records import RunRecord
from daemon.state.store import StateStore


def _stayed_green(run: RunRecord, later: list[RunRecord]) -> bool:
    """The run landed, and the next run of its loop succeeded on top of its work."""
    return run.landed and bool(later) and later[0].outcome == "succeeded"


def home_record_cases(store: StateStore, limit: int | None = None) -> list[Case]:
    """Bad: attempts whose clean checks failed. Good: the last attempt of a run that landed
    and whose loop's next run then succeeded (its checks were green with that work in)."""
    runs = list(store.iter_runs(newest_first=False))
    cases: list[Case] = []
    for index, run in enumerate(runs):
        later = [r for r in runs[index + 1 :] if r.loop == run.loop and r.outcome is not None]
        for attempt in run.attempts:
            folder = store.attempt_dir(run.id, attempt.n)
            if not (folder / "checks.log").is_file():
                continue  # never checked (stopped before): nothing is known of it
            if attempt.checks_passed is False:
                label = "bad"
            elif attempt is run.attempts[-1] and _stayed_green(run, later):
                label = "good"
            else:
                continue
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

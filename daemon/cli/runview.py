"""A run as the commands print it on either engine: a run's outcome, its exit (the runs table:
cli/runlines.py)."""

from __future__ import annotations

from typing import Any

from daemon.people.digest import checks_word
from daemon.people.landstate import landing_state
from daemon.people.terminal import clean
from daemon.state.records import DONE_OUTCOMES


def exit_code(run: Any) -> int:
    """0 for a run that did its job: succeeded (landed or not) or skipped (already done)."""
    return 0 if run.outcome in DONE_OUTCOMES else 1


def print_outcome(run: Any) -> None:
    """A finished run's outcome, attempts and landing, as `once` and `trigger --wait` print."""
    print(f"{run.outcome}: {clean(run.reason)}")
    for a in run.attempts:
        score = "-" if a.score is None else a.score
        print(
            f"  attempt {a.n}: checks {checks_word(a.checks_passed)}, score {score}, "
            f"nudges {a.nudges}, exit {a.exit_code}"
        )
    if run.branch and run.isolation != "in-place" and run.outcome != "skipped":
        print(f"  branch {run.branch}")
    if run.outcome == "succeeded":
        print(f"  {clean(landing_state(run).line())}")
    if run.cost_usd:
        print(f"  cost ${run.cost_usd:.4f} ({run.input_tokens} in, {run.output_tokens} out)")
    if run.waited:
        print(f"  parked {run.waited}s on usage limits")

""" "Verified correct": attempts that passed the clean checks and the judge, and how many of
them the judge's measured false-pass rate says may still be wrong (docs/calibration.md)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from daemon.state.calibration import UnreadableFile, load_calibration
from daemon.state.records import RunRecord


class Verified(BaseModel):
    """A window's (or a night's) verified attempts beside the judge's calibration."""

    verified: int = 0  # succeeded runs' last attempts: clean checks and the judge passed
    caught: int = 0  # attempts the judge scored that did not pass
    judge: str = ""
    false_pass_rate: float | None = None  # None: the judge has no calibration
    false_pass_ci: list[float] = []
    correct: list[float] = []  # [low, high]: how many verified attempts are correct

    def add(self, run: RunRecord) -> None:
        """Count the judged attempts of `run`."""
        judged = [a for a in run.attempts if a.judged]
        last = run.attempts[-1] if run.attempts else None
        passed = run.outcome == "succeeded" and last is not None and last.judged
        if passed and last is not None and last.checks_passed:
            self.verified += 1
            self.caught += len(judged) - 1
        else:
            self.caught += len(judged)

    def calibrate(self, state_dir: Path, judge: str) -> None:
        """The judge's last calibration beside the counts, and the interval it gives them.

        Of all bad attempts B the judge passes a share r, so it failed about (1 - r) B of
        them: the `caught` ones. The bad attempts among the verified are then about
        r / (1 - r) x caught; the ends of r's 95% interval give the ends of the estimate.
        """
        self.judge = judge
        try:
            found = load_calibration(state_dir, judge) if judge else None
        except UnreadableFile:
            found = None
        if found is None:
            return
        self.false_pass_rate = found.false_pass_rate
        self.false_pass_ci = list(found.false_pass_ci)
        low_rate, high_rate = found.false_pass_ci
        self.correct = [self._correct(high_rate), self._correct(low_rate)]

    def _correct(self, rate: float) -> float:
        if rate >= 1.0:
            return 0.0
        slipped = rate / (1.0 - rate) * self.caught
        return round(max(0.0, self.verified - slipped), 1)

    def line(self) -> str:
        """One line for the report: the count, the judge's rate, the interval."""
        text = f"Verified correct: {self.verified} attempt(s) passed the clean checks and the judge"
        if self.false_pass_rate is None:
            return text + (f"; the judge {self.judge!r} has no calibration (`loopd calibrate`)")
        low, high = self.false_pass_ci
        return (
            f"{text}; the judge {self.judge!r} passes {self.false_pass_rate:.0%} of bad attempts "
            f"(95% CI {low:.0%}-{high:.0%}), so about {self.correct[0]:g} to "
            f"{self.correct[1]:g} of them are correct"
        )

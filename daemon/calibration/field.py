"""The judge measured in the field: a landed run it passed that a person reverted is a false
pass found after the fact (docs/aftermath.md). The rate is over the landed runs followed
whose last attempt the judge passed (judged, its score at or above the loop's
`critic_threshold`), with the Wilson interval `loopd calibrate` gives its own rate."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from daemon.aftermath.identity import follows
from daemon.config.home_file import DaemonConfig
from daemon.state.aftermath import load_aftermath
from daemon.state.calibration import (
    FieldCalibration,
    UnreadableFile,
    load_calibration,
    save_field,
)
from daemon.state.records import RunRecord
from daemon.state.store import StateStore
from daemon.stats import wilson

DEFAULT_THRESHOLD = 7  # a loop no longer configured: the loop file's default


def judge_name(config: DaemonConfig) -> str:
    """The judge in use as its calibration names it ("" when it has no name)."""
    verifier, second = config.verifier, config.second_judge()
    if not verifier.configured or not verifier.model:
        return ""
    return f"{verifier.model} + {second.model}" if second else verifier.model


def judge_passed(run: RunRecord, threshold: int) -> bool:
    """Whether the judge passed the run's last attempt."""
    last = run.attempts[-1] if run.attempts else None
    return last is not None and last.judged and (last.score or 0) >= threshold


def field_figures(
    store: StateStore, config: DaemonConfig, thresholds: Mapping[str, int], now: datetime
) -> FieldCalibration:
    """The field false-pass rate over every landed run followed (written to state/ too)."""
    landed, reverted = 0, []
    for run in store.iter_runs(newest_first=False):
        if not follows(run) or not judge_passed(run, thresholds.get(run.loop, DEFAULT_THRESHOLD)):
            continue
        try:
            record = load_aftermath(store.run_dir(run.id))
        except UnreadableFile as problem:
            store.report_unreadable(problem)
            continue
        if record is None or record.state == "pending":
            continue  # not on its target yet: neither kept nor reverted
        landed += 1
        if record.state == "reverted" or record.reverts():
            reverted.append(run.id)
    low, high = wilson(len(reverted), landed)
    figures = FieldCalibration(
        judge=judge_name(config),
        measured=now,
        landed=landed,
        false_passes=len(reverted),
        false_pass_rate=len(reverted) / landed if landed else 0.0,
        false_pass_ci=[low, high],
        reverted=reverted,
        max_false_pass=config.verifier.max_false_pass,
    )
    try:
        found = load_calibration(store.root, figures.judge) if figures.judge else None
    except UnreadableFile:
        found = None
    if found is not None:
        figures.calibrated_rate = found.false_pass_rate
        figures.calibrated_ci = list(found.false_pass_ci)
    save_field(store.root, figures)
    return figures


def field_line(figures: FieldCalibration) -> str:
    """One line: the field rate, its interval and count, beside the calibrated rate."""
    low, high = figures.false_pass_ci
    text = (
        f"judge in the field: {figures.false_passes} of {figures.landed} landed runs it passed "
        f"were reverted ({figures.false_pass_rate:.0%}, 95% CI {low:.0%}-{high:.0%})"
    )
    if figures.calibrated_rate is None:
        return text + "; no calibration to compare (`loopd calibrate`)"
    c_low, c_high = figures.calibrated_ci or [0.0, 1.0]
    return text + (f"; calibrated: {figures.calibrated_rate:.0%} (95% CI {c_low:.0%}-{c_high:.0%})")


def field_warning(figures: FieldCalibration | None) -> str:
    """A warning when the field rate is above `[verifier] max_false_pass` ("" otherwise)."""
    limit = figures.max_false_pass if figures is not None else None
    if figures is None or limit is None or not figures.landed:
        return ""
    if figures.false_pass_rate <= limit:
        return ""
    low, high = figures.false_pass_ci
    return (
        f"the judge {figures.judge!r} passed {figures.false_pass_rate:.0%} of the landed runs "
        f"a person then reverted (95% CI {low:.0%}-{high:.0%}, {figures.landed} landed runs), "
        f"above [verifier] max_false_pass = {limit}; use a stronger model or raise "
        "max_false_pass knowingly (`loopd calibrate --field`)"
    )

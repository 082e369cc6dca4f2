"""An experiment's report: per arm, success with its 95% interval, tokens, time, nudges.

Written to `state/experiments/ID/report.json` and `report.md` after every finished run, so an
experiment stopped half way still leaves what it measured.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

from daemon.experiments.arms import Arm, wilson
from daemon.state.atomic import write_atomic
from daemon.state.records import RunRecord, escalates


class ArmReport(BaseModel):
    """One arm's runs, summed up."""

    arm: str
    without: list[str] = []
    planned: int = 0
    runs: int = 0  # finished
    succeeded: int = 0
    success_rate: float | None = None
    interval: tuple[float, float] = (0.0, 1.0)  # Wilson, 95%
    tokens: int = 0
    mean_tokens: float | None = None
    wall_seconds: float = 0.0
    mean_wall_seconds: float | None = None
    nudges: int = 0
    escalations: int = 0  # runs that would have been escalated outside an experiment
    outcomes: dict[str, int] = {}
    run_ids: list[str] = []


class ExperimentReport(BaseModel):
    """`report.json`."""

    id: str
    loop: str
    commit: str
    repeat: int
    without: list[str]
    started: datetime
    finished: datetime | None = None
    parallel: int = 1
    stopped: str = ""  # why runs were left unstarted (a stop, a budget), or ""
    arms: list[ArmReport] = []


def arm_report(arm: Arm, planned: int, runs: list[RunRecord]) -> ArmReport:
    """The summary of one arm's finished runs."""
    done = [r for r in runs if r.outcome is not None]
    succeeded = sum(r.outcome == "succeeded" for r in done)
    seconds = [((r.finished or r.started) - r.started).total_seconds() for r in done]
    outcomes: dict[str, int] = {}
    for run in done:
        outcomes[str(run.outcome)] = outcomes.get(str(run.outcome), 0) + 1
    tokens = sum(r.tokens for r in done)
    return ArmReport(
        arm=arm.name,
        without=list(arm.without),
        planned=planned,
        runs=len(done),
        succeeded=succeeded,
        success_rate=succeeded / len(done) if done else None,
        interval=wilson(succeeded, len(done)),
        tokens=tokens,
        mean_tokens=tokens / len(done) if done else None,
        wall_seconds=round(sum(seconds), 3),
        mean_wall_seconds=round(sum(seconds) / len(done), 3) if done else None,
        nudges=sum(a.nudges for r in done for a in r.attempts),
        escalations=sum(escalates(r.outcome, r.cause) for r in done),
        outcomes=outcomes,
        run_ids=[r.id for r in runs],
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _reading(base: ArmReport, arm: ArmReport) -> str:
    """What the intervals of `arm` and the all-supports arm say, in a sentence."""
    if not base.runs or not arm.runs:
        return "not enough runs to compare"
    if arm.interval[1] < base.interval[0]:
        return "worse without it: the intervals do not overlap, the model still needs this support"
    if arm.interval[0] > base.interval[1]:
        return "better without it: the intervals do not overlap"
    return "the intervals overlap: no difference shown at this many runs"


def render_markdown(report: ExperimentReport) -> str:
    """The report for a person."""
    out = [
        f"# Experiment {report.id}",
        "",
        f"Loop `{report.loop}` at commit `{report.commit[:12]}`, {report.repeat} runs per arm, "
        f"up to {report.parallel} at a time; the same agent, checks and critic in every arm. "
        "Experiment runs never land, escalate, notify, teach rules or count for them.",
        "",
        "| arm | runs | succeeded | success rate | 95% interval (Wilson) | mean tokens | "
        "mean wall time | nudges | escalations |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in report.arms:
        low, high = arm.interval
        tokens = "-" if arm.mean_tokens is None else f"{arm.mean_tokens:.0f}"
        wall = "-" if arm.mean_wall_seconds is None else f"{arm.mean_wall_seconds:.1f} s"
        out.append(
            f"| {arm.arm} | {arm.runs}/{arm.planned} | {arm.succeeded} | "
            f"{_pct(arm.success_rate)} | {low:.0%} to {high:.0%} | {tokens} | {wall} | "
            f"{arm.nudges} | {arm.escalations} |"
        )
    base = report.arms[0] if report.arms else None
    if base is not None and len(report.arms) > 1:
        out += ["", "## Each support removed", ""]
        for arm in report.arms[1:]:
            out.append(
                f"- without {', '.join(arm.without)}: {_pct(arm.success_rate)} "
                f"(all supports: {_pct(base.success_rate)}); {_reading(base, arm)}."
            )
    if report.stopped:
        out += ["", f"Stopped early: {report.stopped}."]
    out += ["", "## Runs", ""]
    for arm in report.arms:
        out.append(f"- {arm.arm}: " + (", ".join(f"`{r}`" for r in arm.run_ids) or "none"))
    out.append("")
    return "\n".join(out)


def write_report(folder: Path, report: ExperimentReport) -> None:
    """`report.json` and `report.md` in the experiment's folder, atomically."""
    write_atomic(folder / "report.json", json.dumps(report.model_dump(mode="json"), indent=2))
    write_atomic(folder / "report.md", render_markdown(report))

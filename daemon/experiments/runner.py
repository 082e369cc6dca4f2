"""Running an experiment: N runs per arm from one commit, in parallel up to max_concurrent_runs.

Each run is an ordinary run (state/runs/RUN_ID/, the same state machine, agent, checks and
critic as the loop's own runs) with trigger kind `experiment` and an `[experiment]` table
naming its arm; what an arm removes is removed where the run is prepared (see arms.py). The
runs of all arms are interleaved (run 1 of every arm, then run 2, ...) so that a slow hour
or a busy machine falls on every arm alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from daemon.config import Loop
from daemon.experiments.arms import Arm
from daemon.experiments.report import ExperimentReport, arm_report, write_report
from daemon.runparts.services import RunServices
from daemon.runs.budget import Hold, loop_hold
from daemon.runs.executor import RunExecutor, new_run
from daemon.scheduling.queue import PendingRun
from daemon.state.atomic import ensure_dir
from daemon.state.eventtypes import Event
from daemon.state.records import ExperimentArm, RunRecord, Trigger, make_run_id
from daemon.units import format_duration

# Seconds between looks at the clock while the loop's new runs are held by its agent
# profile's usage limit (a stop ends the wait at once).
POLL = 30.0

# What holds the loop's new runs back now (its profile's usage limit, a spent token budget),
# or None: the daemon's own rule (runs/budget.py), over the home's state, unless a test says.
HoldOf = Callable[[Loop, datetime], Hold | None]


@dataclass
class Experiment:
    """What to run: the loop, the commit, the arms, how many runs each."""

    loop: Loop
    commit: str
    arms: list[Arm]
    repeat: int
    parallel: int = 1
    id: str = ""


@dataclass
class _Slot:
    arm: Arm
    index: int


@dataclass
class ExperimentRunner:
    """Runs one experiment in the foreground; `stop()` may be called from a signal handler."""

    services: RunServices
    experiment: Experiment
    hold_of: HoldOf | None = None
    on_run: Callable[[RunRecord], None] | None = None  # told of each finished run
    on_hold: Callable[[Hold], None] | None = None  # told once a hold until a new moment
    _runs: dict[str, list[RunRecord]] = field(default_factory=dict)
    _live: dict[str, RunExecutor] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: str = ""
    _grace: float = 0.0
    _wake: threading.Event = field(default_factory=threading.Event)  # set by stop()

    def __post_init__(self) -> None:
        exp = self.experiment
        if not exp.id:
            exp.id = make_run_id(exp.loop.name, self.services.clock())
        self.folder = ensure_dir(self.services.store.root / "experiments" / exp.id)
        self.report = ExperimentReport(
            id=exp.id,
            loop=exp.loop.name,
            commit=exp.commit,
            repeat=exp.repeat,
            without=[s for arm in exp.arms for s in arm.without],
            started=self.services.clock(),
            parallel=exp.parallel,
        )
        self._runs = {arm.name: [] for arm in exp.arms}

    @property
    def path(self) -> Path:
        return self.folder

    def stop(self, grace: float, why: str = "stopped by a signal") -> None:
        """Start no more runs; the running ones end within `grace` as `interrupted`."""
        with self._lock:
            self._stopped = self._stopped or why
            self._grace = grace
            running = list(self._live.values())
        self._wake.set()
        for executor in running:
            executor.interrupt(grace)

    def run(self) -> ExperimentReport:
        """Every run of every arm; the report is rewritten after each one."""
        exp = self.experiment
        slots = [_Slot(arm, i) for i in range(exp.repeat) for arm in exp.arms]
        self._write()
        with ThreadPoolExecutor(max_workers=max(1, exp.parallel)) as pool:
            for future in [pool.submit(self._one, slot) for slot in slots]:
                future.result()
        self.report.finished = self.services.clock()
        self._write()
        return self.report

    def _one(self, slot: _Slot) -> None:
        exp = self.experiment
        if not self._clear_to_start():
            return
        loop = arm_loop(exp.loop, exp.commit, slot.arm)
        run = self._new_run(loop, slot)
        executor = RunExecutor(self.services, loop, run)
        with self._lock:
            self._live[run.id] = executor
            if self._stopped:  # a stop came while this run was being made
                executor.interrupt(self._grace)
        try:
            run = executor.execute()
        finally:
            with self._lock:
                self._live.pop(run.id, None)
                self._runs[slot.arm.name].append(run)
            self._write()
        if self.on_run is not None:
            self.on_run(run)

    def _hold(self, now: datetime) -> Hold | None:
        loop = self.experiment.loop
        if self.hold_of is not None:
            return self.hold_of(loop, now)
        return loop_hold(self.services.store, self.services.config, loop, now)

    def _clear_to_start(self) -> bool:
        """Whether the next run may start: the experiment's runs count toward budgets and wait
        for their profile's usage limit like the daemon's. A usage limit is waited out (no
        longer than `[limits] max_wait`); a spent budget starts no more runs."""
        told: datetime | None = None
        max_wait = self.services.config.limits.max_wait
        while True:
            with self._lock:
                if self._stopped:
                    return False
            now = self.services.clock()
            hold = self._hold(now)
            if hold is None:
                return True
            if hold.until is None:  # a refused login: waiting does not lift it
                with self._lock:
                    self._stopped = self._stopped or f"{hold.why}; {hold.wait_text()}"
                return False
            until = f"{hold.until:%Y-%m-%d %H:%M %Z}".strip()
            why = ""
            if hold.kind != "quota":
                why = f"{hold.why}; new runs of {self.experiment.loop.name} wait until {until}"
            elif hold.until - now > max_wait:
                wait = format_duration(max_wait)
                why = f"{hold.why} lifts at {until}, more than [limits] max_wait ({wait}) away"
            if why:
                with self._lock:
                    self._stopped = self._stopped or why
                return False
            if told != hold.until and self.on_hold is not None:
                self.on_hold(hold)
            told = hold.until
            self._wake.wait(min(POLL, max(0.0, (hold.until - now).total_seconds())))

    def _new_run(self, loop: Loop, slot: _Slot) -> RunRecord:
        services, exp = self.services, self.experiment
        now = services.clock()
        reason = f"experiment {exp.id}, arm {slot.arm.name}, run {slot.index + 1}/{exp.repeat}"
        trigger = Trigger(loop=loop.name, kind="experiment", reason=reason, ts=now)
        with self._lock:  # ids of runs made at the same instant must differ
            pending = PendingRun(
                id=services.store.new_run_id(loop.name, now),
                loop=loop.name,
                trigger=trigger,
                queued_at=now,
            )
            arm = ExperimentArm(id=exp.id, arm=slot.arm.name, without=list(slot.arm.without))
            run = new_run(services, loop, pending, experiment=arm)
        services.event(Event.TRIGGER, loop=loop.name, run=run.id, kind="experiment", reason=reason)
        return run

    def _write(self) -> None:
        with self._lock:
            runs = {name: list(found) for name, found in self._runs.items()}
            self.report.stopped = self._stopped
        exp = self.experiment
        self.report.arms = [arm_report(arm, exp.repeat, runs[arm.name]) for arm in exp.arms]
        write_report(self.folder, self.report)


def arm_loop(loop: Loop, commit: str, arm: Arm) -> Loop:
    """The loop as an arm runs it: from `commit`, without nudges when the arm says so."""
    update: dict[str, object] = {"base": commit}
    if "nudges" in arm.without:
        update["max_nudges"] = 0
    return Loop(name=loop.name, path=loop.path, config=loop.config.model_copy(update=update))

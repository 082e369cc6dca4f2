"""Repeated failures of a loop while its escalation is open: one file that counts them, one
notification then at most a daily digest, and every view shows the count."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from daemon.config import Loop
from daemon.home import Home
from daemon.housekeeping import cited_by_open_escalations
from daemon.people.escalation import open_escalations, resolve
from daemon.people.escalation_repeat import escalate
from daemon.people.notify import Notifications
from daemon.people.notify.base import Notifier
from daemon.runparts.services import RunServices
from daemon.runs.executor import new_run
from daemon.runs.finish import finish_run
from daemon.scheduling.queue import PendingRun
from daemon.state.records import AttemptRecord, Cause, RunRecord, Trigger
from tests.helpers import loopd, make_home, make_repo, wait_for

START = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
TASK = "Make check.py pass."


class Recorder(Notifier):
    """Keeps what it was asked to send."""

    name = "recorder"

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def send(self, message: str, payload: dict[str, Any]) -> None:
        with self.lock:
            self.sent.append({"message": message, **payload})

    def kinds(self) -> list[str]:
        with self.lock:
            return [p["kind"] for p in self.sent]


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def setup(tmp_path: Path) -> tuple[RunServices, Loop, Recorder, Clock]:
    repo = make_repo(tmp_path / "repo", {"check.py": "raise SystemExit(1)\n"})
    config = '[agents.a]\nadapter = "command"\ncommand = ["true"]\n'
    loop = f'repo = "{repo}"\ntask = "{TASK}"\nagent = "a"\ndone_when = ["python3 check.py"]\n'
    home = Home(make_home(tmp_path / "home", config, {"calc": loop}))
    loaded = home.load()
    assert not loaded.errors, loaded.errors
    clock = Clock()
    recorder = Recorder()
    store = home.state()
    services = RunServices(
        home=home,
        config=loaded.daemon,
        store=store,
        clock=clock,
        notifications=Notifications(
            loaded.daemon.notify, store.events, notifiers=[recorder], clock=clock
        ),
    )
    return services, loaded.loops["calc"], recorder, clock


def fail_once(services: RunServices, loop: Loop, clock: Clock, minutes: float = 6) -> RunRecord:
    """A push-triggered run whose checks keep failing, ended `escalated`."""
    clock.now += timedelta(minutes=minutes)
    trigger = Trigger(loop="calc", kind="push", reason="push", ts=clock.now)
    pending = PendingRun(
        id=services.store.new_run_id("calc", clock.now),
        loop="calc",
        trigger=trigger,
        queued_at=clock.now,
    )
    run = new_run(services, loop, pending)
    run.attempts = [
        AttemptRecord(n=1, started=clock.now, finished=clock.now, checks_passed=False, score=2)
    ]
    (services.store.attempt_dir(run.id, 1) / "checks.log").write_text(f"FAILED in {run.id}\n")
    run.phase = "learning"
    services.store.save_run(run)
    reason = f"attempts used up; checks still fail ({run.id})"
    return finish_run(services, run, "escalated", reason, Cause.CHECKS_FAILED)


def test_repeats_count_in_the_open_escalation_and_notify_once_then_daily(tmp_path: Path) -> None:
    services, loop, recorder, clock = setup(tmp_path)
    store = services.store
    first = fail_once(services, loop, clock)
    second = fail_once(services, loop, clock)
    third = fail_once(services, loop, clock)

    [meta] = open_escalations(store)
    assert meta.run == first.id and meta.count == 3 and meta.latest_run == third.id
    assert meta.latest_cause == "checks-failed" and third.id in meta.latest_reason
    assert not store.escalation_path(second.id).exists()
    assert not store.escalation_path(third.id).exists()
    assert [store.load_run(r.id).escalation for r in (first, second, third)] == [first.id] * 3
    text = store.escalation_path(first.id).read_text()
    # One section for the repeats, rewritten: it names the latest run and its evidence.
    assert text.count("## Failed again") == 1 and f"`loopd show {third.id}`" in text
    assert f"state/runs/{third.id}/attempt-1/checks.log" in text
    escalated = [e for e in store.events.read() if e["type"] == "escalated"]
    assert [e.get("repeat_of") for e in escalated] == [None, first.id, first.id]
    assert [e.get("count") for e in escalated] == [None, 2, 3]
    # The person was told once, not three times.
    wait_for(lambda: recorder.kinds(), what="the first notification")
    assert recorder.kinds() == ["escalated"]

    # A day later the next repeat sends one digest of what is new since; the next does not.
    fail_once(services, loop, clock, minutes=24 * 60)
    wait_for(lambda: len(recorder.kinds()) == 2, what="the digest")
    digest = recorder.sent[-1]
    assert digest["kind"] == "escalation-repeated" and digest["count"] == 4
    assert digest["new"] == 3 and digest["escalation"] == first.id
    assert "3 more runs" in digest["message"]
    fifth = fail_once(services, loop, clock, minutes=60)
    [meta] = open_escalations(store)
    assert meta.count == 5 and meta.notified_count == 4
    assert recorder.kinds() == ["escalated", "escalation-repeated"]

    # Retention keeps the first run and the latest one; the runs between may go.
    assert cited_by_open_escalations(store) == {first.id, fifth.id}

    # Every view shows the count.
    home = services.home.root
    listed = loopd(home, "escalations", "list")
    assert "escalated 5 times" in listed.stdout and fifth.id in listed.stdout, listed.stderr
    as_json = json.loads(loopd(home, "escalations", "list", "--json").stdout)
    assert [(e["run"], e["count"], e["latest_run"]) for e in as_json] == [(first.id, 5, fifth.id)]
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert status["loops"]["calc"]["escalation"] == {
        "run": first.id,
        "count": 5,
        "latest_run": fifth.id,
    }
    shown = loopd(home, "status", env={"COLUMNS": "200"}).stdout
    assert f"calc: open escalation {first.id} (escalated 5 times)" in " ".join(shown.split())
    report = loopd(home, "report", "--since", "30d", env={"COLUMNS": "200"}).stdout
    assert f"{first.id} " in report and "(5 times)" in report, report

    # A repeat's own id points at the escalation it counts in.
    shown = loopd(home, "escalations", "show", third.id)
    assert shown.returncode != 0 and f"`loopd escalations show {first.id}`" in shown.stderr

    # Resolved, the next failure files an escalation of its own again.
    resolve(store, first.id, clock.now)
    sixth = fail_once(services, loop, clock)
    assert [e.run for e in open_escalations(store)] == [sixth.id]
    wait_for(lambda: len(recorder.kinds()) == 3, what="the new escalation's notification")
    assert recorder.kinds()[-1] == "escalated"


def test_counting_a_repeat_again_after_a_crash_counts_it_once(tmp_path: Path) -> None:
    services, loop, _, clock = setup(tmp_path)
    first = fail_once(services, loop, clock)
    second = fail_once(services, loop, clock)
    # Finishing again after a crash between counting and recording asks once more.
    assert escalate(services.store, second, clock.now) == (first.id, True)
    assert escalate(services.store, first, clock.now) == (first.id, False)
    [meta] = open_escalations(services.store)
    assert meta.count == 2

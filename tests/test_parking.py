"""A run parked on its agent's usage limit: it waits without a slot, resumes the same attempt
after the reset, escalates past max_wait, survives a restart, and holds its profile.

In process with an injected clock (the park's polling made short): real git repositories,
real agent and check processes. Across restarts: `loopd run` as a real process, whose parked
run.toml the test moves into the past instead of sleeping until a reset.
"""

from __future__ import annotations

import json
import sys
import threading
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from daemon.home import Home
from daemon.runparts.services import RunServices
from daemon.runs import parking
from daemon.runs.executor import RunExecutor, new_run
from daemon.runs.slots import RunSlots
from daemon.scheduling.queue import PendingRun
from daemon.state.holds import load_quota
from daemon.state.records import Trigger
from tests.helpers import (
    daemon_log,
    events,
    git,
    loopd,
    make_home,
    make_repo,
    runs,
    start_daemon,
    stop_daemon,
    talk,
    wait_for,
)

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}
NOW = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
JOIN = 120


def quota_agent(calls: Path, first_words: str, later_words: str | None = None) -> str:
    """An agent that hits its usage limit on its first call (and, given `later_words`, on
    every call); otherwise it fixes calc.py. Each call appends what it was asked to `calls`."""
    return (
        "import pathlib, sys\n"
        f"calls = pathlib.Path({str(calls)!r})\n"
        "prompt = sys.stdin.read()\n"
        "n = len(calls.read_text().split('\\x00')) + 1 if calls.exists() else 1\n"
        "calls.write_text((calls.read_text() + '\\x00' if calls.exists() else '') + prompt)\n"
        f"first, later = {first_words!r}, {later_words!r}\n"
        "if n == 1 or later:\n"
        "    pathlib.Path('notes.txt').write_text('started\\n')\n"
        "    print('working on it')\n"
        "    print(first if n == 1 else later)\n"
        "    sys.exit(1)\n"
        "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
        "print('fixed add()')\n"
    )


def calls_file(tmp_path: Path) -> Path:
    """Where the agent records what it was asked: outside its tree, in a folder that
    `sandbox_config` lets the sandboxed agent write."""
    return talk(tmp_path)[0] / "calls"


def sandbox_config(tmp_path: Path) -> str:
    return talk(tmp_path)[1]


def asked(calls: Path) -> list[str]:
    return calls.read_text().split("\x00") if calls.exists() else []


class Clock:
    """The run's wall clock, moved by the test."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def set(self, now: datetime) -> None:
        with self._lock:
            self.now = now


def in_process(
    tmp_path: Path, agent: str, limits: str = "", **loop: Any
) -> tuple[RunServices, Any, Clock]:
    repo = make_repo(tmp_path / "repo", BUGGY)
    argv = [sys.executable, "-c", agent]
    config = f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    config += f'[limits]\nworktrees = "{tmp_path / "worktrees"}"\n{limits}'
    config += sandbox_config(tmp_path)
    settings = {
        "repo": str(repo),
        "task": "Make check.py pass.",
        "agent": "a",
        "done_when": ["python3 check.py"],
        "attempt_timeout": "120s",
        "stall_after": "60s",
        "max_nudges": 0,
        "max_attempts": 1,
        "timezone": "UTC",
        **loop,
    }
    text = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    home = Home(make_home(tmp_path / "home", config, {"calc": text}))
    loaded = home.load()
    assert not loaded.errors, loaded.errors
    clock = Clock(NOW)
    services = RunServices(home=home, config=loaded.daemon, store=home.state(), clock=clock)
    services.slots = RunSlots(lambda: 1)
    return services, loaded.loops["calc"], clock


def start(services: RunServices, loop: Any) -> tuple[RunExecutor, threading.Thread]:
    trigger = Trigger(loop="calc", kind="manual", reason="test", ts=NOW)
    pending = PendingRun(
        id=services.store.new_run_id("calc", NOW), loop="calc", trigger=trigger, queued_at=NOW
    )
    run = new_run(services, loop, pending)
    services.slots.add(run.id)
    executor = RunExecutor(services, loop, run)
    thread = threading.Thread(target=executor.execute, daemon=True)
    thread.start()
    return executor, thread


def run_toml(services: RunServices, run_id: str) -> dict[str, Any]:
    path = services.store.run_dir(run_id) / "run.toml"
    return tomllib.loads(path.read_text())


def parked(services: RunServices, run_id: str, parks: int = 1) -> dict[str, Any]:
    """Wait until the run is parked for the `parks`-th time; its run.toml."""

    def ready() -> dict[str, Any] | None:
        record = run_toml(services, run_id)
        park = record.get("park") or {}
        waiting = record.get("phase") == "waiting" and park.get("count") == parks
        # Its event is written right after the record: wait for both.
        recorded = len(kinds(services, run_id, "quota_wait")) == parks
        return record if waiting and recorded else None

    return wait_for(ready, timeout=60, what=f"park {parks}")


def kinds(services: RunServices, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in services.store.events.read() if e["run"] == run_id and e["type"] == kind]


@pytest.fixture(autouse=True)
def quick_park(monkeypatch: pytest.MonkeyPatch) -> None:
    """The park looks at the (injected) clock often, so moving it ends the wait at once."""
    monkeypatch.setattr(parking, "POLL", 0.05)


# -- in process ---------------------------------------------------------------------------------
def test_a_quota_parks_the_run_without_a_slot_and_the_same_attempt_goes_on_after_the_reset(
    tmp_path: Path,
) -> None:
    calls = calls_file(tmp_path)
    words = "Error: You've hit your limit · resets 9am (UTC)"
    services, loop, clock = in_process(tmp_path, quota_agent(calls, words))
    executor, thread = start(services, loop)
    run_id = executor.run.id
    record = parked(services, run_id)
    # Parked until the reset plus a minute; the slot is free for another run meanwhile.
    resume_at = datetime(2026, 12, 1, 9, 1, tzinfo=UTC)
    assert record["resume_at"] == resume_at
    assert record["park"]["reset_named"] is True and "resets 9am" in record["park"]["message"]
    assert services.slots.holders() == set() and services.slots.free() == 1
    attempt = record["attempts"][0]
    assert "finished" not in attempt and attempt["nudges"] == 0 and not attempt.get("stalls")
    hold = load_quota(services.store).profiles["a"]
    assert hold.resume_at == resume_at and hold.run == run_id
    (wait,) = kinds(services, run_id, "quota_wait")
    assert wait["resume_at"] == resume_at.isoformat() and wait["profile"] == "a"
    # Nothing happens before the reset...
    clock.set(resume_at - timedelta(seconds=1))
    thread.join(timeout=0.5)
    assert thread.is_alive() and len(asked(calls)) == 1
    # ...and the attempt goes on after it: the same attempt, asked the same again.
    clock.set(resume_at + timedelta(seconds=30))
    thread.join(timeout=JOIN)
    assert not thread.is_alive()
    record = run_toml(services, run_id)
    assert record["outcome"] == "succeeded", record.get("reason")
    assert len(record["attempts"]) == 1 and record["attempts"][0]["nudges"] == 0
    assert record["waited"] == int((resume_at + timedelta(seconds=30) - NOW).total_seconds())
    assert "resume_at" not in record and "park" not in record
    first, second = asked(calls)
    assert "Make check.py pass." in first and second == first  # not a nudge: the prompt again
    assert not kinds(services, run_id, "nudge") and not kinds(services, run_id, "stall")
    assert len(kinds(services, run_id, "quota_wait")) == 1
    assert len(kinds(services, run_id, "quota_resumed")) == 1
    # The work before the park is in the result too.
    assert git(Path(record["repo"]), "show", f"{record['branch']}:notes.txt") == "started"


def test_with_no_reset_named_the_wait_doubles_to_4h_and_past_max_wait_it_escalates(
    tmp_path: Path,
) -> None:
    calls = calls_file(tmp_path)
    words = "HTTP 429 Too Many Requests"
    services, loop, clock = in_process(tmp_path, quota_agent(calls, words, words))
    executor, thread = start(services, loop)
    run_id = executor.run.id
    waits = []
    for n in range(1, 6):
        record = parked(services, run_id, n)
        waits.append(record["resume_at"] - clock())
        clock.set(record["resume_at"])
    thread.join(timeout=JOIN)
    assert not thread.is_alive()
    assert [int(w.total_seconds() // 60) for w in waits] == [30, 60, 120, 240, 240]
    # The sixth park would end 15h30m after the first began: past max_wait (12h).
    record = run_toml(services, run_id)
    assert record["outcome"] == "escalated" and record["cause"] == "quota-wait-exceeded"
    assert "max_wait (12h)" in record["reason"]
    assert len(asked(calls)) == 6 and record["attempts"][0]["nudges"] == 0
    escalation = services.store.escalation_path(run_id).read_text()
    assert "max_wait" in escalation
    # New runs of the profile still wait for the limit.
    assert load_quota(services.store).profiles["a"].resume_at > clock()


def test_a_reset_later_than_max_wait_escalates_at_once(tmp_path: Path) -> None:
    calls = calls_file(tmp_path)
    words = "You've hit your usage limit. Try again in 2 days 17 hours 14 minutes."
    services, loop, _ = in_process(tmp_path, quota_agent(calls, words), 'max_wait = "1d"\n')
    executor, thread = start(services, loop)
    thread.join(timeout=JOIN)
    record = run_toml(services, executor.run.id)
    assert record["outcome"] == "escalated" and record["cause"] == "quota-wait-exceeded"
    assert record["phase"] == "idle" and len(asked(calls)) == 1
    assert not kinds(services, executor.run.id, "quota_wait")


def test_notify_on_waiting_sends_one_notification_a_park(tmp_path: Path) -> None:
    from daemon.people.notify import Notifications

    calls, sent = calls_file(tmp_path), tmp_path / "sent"
    notifier = [
        sys.executable,
        "-c",
        f"import sys; open({str(sent)!r}, 'a').write(sys.argv[1] + '\\n')",
    ]
    words = "Error: You've hit your limit · resets 9am (UTC)"
    services, loop, clock = in_process(
        tmp_path, quota_agent(calls, words), notify_on=["escalated", "waiting"]
    )
    services.notifications = Notifications(
        services.config.notify.model_copy(update={"command": notifier}), services.store.events
    )
    executor, thread = start(services, loop)
    record = parked(services, executor.run.id)
    wait_for(lambda: sent.exists(), what="the notification")
    clock.set(record["resume_at"])
    thread.join(timeout=JOIN)
    services.notifications.drain(10)
    (line,) = sent.read_text().splitlines()
    assert "waits for the usage limit of agent profile 'a'" in line and "2026-12-01 09:01" in line


# -- across a restart of the daemon ------------------------------------------------------------
def daemon_home(tmp_path: Path, calls: Path, words: str, **more_loops: str) -> Path:
    repo = make_repo(tmp_path / "repo", BUGGY)
    quota = [sys.executable, "-c", quota_agent(calls, words)]
    plain = [sys.executable, "-c", "print('nothing to do')"]
    config = (
        f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(quota)}\n'
        f'[agents.b]\nadapter = "command"\ncommand = {json.dumps(plain)}\n'
        f"{sandbox_config(tmp_path)}"
    )
    loop = (
        f'repo = "{repo}"\ntask = "Make check.py pass."\nagent = "a"\n'
        'done_when = ["python3 check.py"]\nattempt_timeout = "120s"\nstall_after = "60s"\n'
        "max_nudges = 0\nmax_attempts = 1\n"
    )
    loops = {"calc": loop}
    for name, agent in more_loops.items():
        loops[name] = (
            f'repo = "{repo}"\ntask = "Look around."\nagent = "{agent}"\n'
            'attempt_timeout = "60s"\nmax_attempts = 1\n'
        )
    return make_home(tmp_path / "home", config, loops)


def test_a_parked_run_stays_parked_across_a_restart_and_resumes_the_same_attempt(
    tmp_path: Path, daemons: list
) -> None:
    calls = calls_file(tmp_path)
    home = daemon_home(tmp_path, calls, "Error: You've hit your limit · resets in 5h")
    daemon = start_daemon(home)
    daemons.append(daemon)
    assert loopd(home, "trigger", "calc").returncode == 0
    record = wait_for(
        lambda: next((r for r in runs(home) if r.get("phase") == "waiting"), None),
        timeout=60,
        what="the park",
    )
    run_id, worktree = record["id"], record["worktree"]

    def in_status() -> dict[str, Any] | None:
        status = tomllib.loads((home / "state" / "status.toml").read_text())
        entry = status["loops"]["calc"]
        return entry if entry["phase"] == "waiting" else None

    entry = wait_for(in_status, what="status.toml to show the park")
    assert entry["resume_at"] == record["resume_at"]
    assert "usage limit" in entry["waiting_for"]
    assert stop_daemon(daemon) == 0, daemon_log(home)
    # Stopped while parked: not interrupted, no retry; the tree stays where it was.
    (record,) = runs(home)
    assert record["phase"] == "waiting" and "outcome" not in record
    assert Path(worktree).is_dir() and (home / "state" / "live" / run_id).exists()
    assert not list((home / "state" / "inbox").glob("*.json"))
    # The reset has passed (the test moves the park into the past instead of sleeping).
    path = home / "state" / "runs" / run_id / "run.toml"
    data = tomllib.loads(path.read_text())
    data["resume_at"] = datetime.now(UTC) - timedelta(minutes=1)
    data["park"]["started"] = data["park"]["since"] = datetime.now(UTC) - timedelta(hours=5)
    path.write_text(tomli_w.dumps(data))
    daemon = start_daemon(home)
    daemons.append(daemon)
    done = wait_for(
        lambda: next((r for r in runs(home) if r.get("outcome")), None), timeout=90, what="the end"
    )
    assert done["outcome"] == "succeeded", (done.get("reason"), daemon_log(home))
    assert done["worktree"] == worktree and len(done["attempts"]) == 1
    assert done["attempts"][0]["nudges"] == 0 and done["waited"] >= 5 * 3600
    first, second = asked(calls)
    assert second == first
    types = [e["type"] for e in events(home) if e["run"] == run_id]
    assert "run_recovered" in types and "quota_resumed" in types
    assert "interrupted" not in json.dumps([e for e in events(home) if e["run"] == run_id])
    assert stop_daemon(daemon) == 0


def test_the_profile_waits_for_its_limit_while_other_profiles_use_the_free_slot(
    tmp_path: Path, daemons: list
) -> None:
    calls = calls_file(tmp_path)
    home = daemon_home(
        tmp_path,
        calls,
        "Error: You've hit your limit · resets in 5h",
        same="a",  # another loop on the profile that hit its limit
        other="b",  # a loop on another profile
    )
    daemon = start_daemon(home)
    daemons.append(daemon)
    assert loopd(home, "trigger", "calc").returncode == 0
    wait_for(lambda: any(r.get("phase") == "waiting" for r in runs(home)), what="the park")
    assert loopd(home, "trigger", "same").returncode == 0
    # max_concurrent_runs = 1, yet the parked run holds no slot: another profile's run runs.
    proc = loopd(home, "trigger", "other", "--wait", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr + daemon_log(home)

    def same_waits() -> dict[str, Any] | None:
        status = json.loads(loopd(home, "status", "--json").stdout)
        entry = status["loops"]["same"]
        return entry if entry.get("phase") == "waiting" else None

    entry = wait_for(same_waits, what="the held loop")
    assert "usage limit of agent profile 'a'" in entry["waiting_for"] and entry["pending"] == 1
    assert not [r for r in runs(home) if r["loop"] == "same"]  # never started
    text = loopd(home, "status", env={"COLUMNS": "300"}).stdout
    assert "waiting (held until" in text and "usage limit of agent profile 'a'" in text
    assert stop_daemon(daemon) == 0

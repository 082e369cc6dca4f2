"""Token budgets hold new runs until the next day (of the right zone); a profile's price gives
cost_usd; `check` warns of budgets that cannot count.

The daemon runs in process with an injected clock and real state (a run record that spent the
tokens, as a finished run leaves it); `loopd once`, `show`, `report` and `check` run as real
processes, with a stand-in `qwen` program that prints Qwen Code's recorded stream.
"""

from __future__ import annotations

import itertools
import json
import sys
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import daemon.daemon as assembly
from daemon.daemon import Daemon
from daemon.home import Home
from daemon.runs.budget import budget_days, day_window, holds, recent_spends
from daemon.state.records import AttemptRecord, RunRecord, RunTrigger, make_run_id
from daemon.state.store import StateStore
from tests.helpers import loopd, make_home, make_repo, wait_for

NOW = datetime(2026, 11, 30, 20, 0, tzinfo=UTC)  # 21:00 in Berlin, 15:00 in New York
STREAMS = Path(__file__).parent / "data" / "streams"


class Clocks:
    """A wall clock set by the test, and a monotonic one that moves with it."""

    def __init__(self) -> None:
        self.now = NOW
        self.ticks = itertools.count()

    def wall(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        return 1000.0 + (self.now - NOW).total_seconds() + next(self.ticks) * 0.001


def spent(store: StateStore, loop: str, tokens: int, at: datetime) -> None:
    """A finished run of `loop` that spent `tokens`, as the run leaves its record."""
    run = RunRecord(
        id=make_run_id(loop, at - timedelta(minutes=10)),
        loop=loop,
        task="t",
        trigger=RunTrigger(kind="manual", ts=at),
        started=at - timedelta(minutes=10),
        finished=at,
        outcome="succeeded",
        phase="idle",
        tokens=tokens,
        attempts=[
            AttemptRecord(n=1, started=at - timedelta(minutes=10), finished=at, tokens=tokens)
        ],
    )
    store.save_run(run)


def home_with(tmp_path: Path, limits: str = "", **loop: object) -> Home:
    repo = make_repo(tmp_path / "repo")
    lines = [f'repo = "{repo}"', 'task = "t"', 'agent = "a"', 'timezone = "Europe/Berlin"']
    lines += [f"{key} = {json.dumps(value)}" for key, value in loop.items()]
    config = '[agents.a]\nadapter = "command"\ncommand = ["true"]\n'
    config += f'[limits]\nworktrees = "{tmp_path / "worktrees"}"\n{limits}'
    return Home(make_home(tmp_path / "home", config, {"app": "\n".join(lines) + "\n"}))


@pytest.fixture
def no_subreaper(monkeypatch: pytest.MonkeyPatch) -> None:
    # Patched where Daemon.start calls it: daemon.daemon imports it at its top.
    monkeypatch.setattr(assembly, "set_child_subreaper", lambda: False)


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


def started(home: Home, clocks: Clocks) -> Daemon:
    return Daemon.start(home, NOW, clock=clocks.wall, monotonic=clocks.monotonic)


def trigger(daemon: Daemon, clocks: Clocks) -> None:
    from daemon.state.records import Trigger

    daemon.ctx.store.put_trigger(Trigger(loop="app", kind="manual", reason="t", ts=clocks.now))
    daemon.tick(clocks.now)


def status(daemon: Daemon) -> dict:
    return tomllib.loads(daemon.ctx.store.status_path.read_text())


def budget_events(daemon: Daemon) -> list[dict]:
    return [e for e in daemon.ctx.store.events.read() if e["type"] == "budget_exhausted"]


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    out: list[Daemon] = []
    yield out
    for daemon in out:
        daemon.stop(daemon.ctx.clock(), grace=0)


# -- the day ------------------------------------------------------------------------------------
def test_the_day_starts_at_midnight_of_its_zone() -> None:
    from zoneinfo import ZoneInfo

    start, end, day = day_window(NOW, ZoneInfo("Europe/Berlin"))
    assert (start, end, day) == (
        datetime(2026, 11, 29, 23, tzinfo=UTC),
        datetime(2026, 11, 30, 23, tzinfo=UTC),
        "2026-11-30",
    )
    start, end, day = day_window(NOW, ZoneInfo("Pacific/Auckland"))  # already tomorrow there
    assert day == "2026-12-01" and end == datetime(2026, 12, 1, 11, tzinfo=UTC)


def test_tokens_count_on_the_day_their_attempt_ended(tmp_path: Path) -> None:
    home = home_with(tmp_path, daily_tokens=100)
    store = home.state()
    spent(store, "app", 70, NOW - timedelta(hours=1))  # today in Berlin
    spent(store, "app", 500, NOW - timedelta(hours=22))  # yesterday in Berlin
    loaded = home.load()
    (day,) = budget_days(loaded.daemon, loaded.loops, recent_spends(store, NOW), NOW)
    assert (day.scope, day.tokens, day.exhausted) == ("loop:app", 70, False)
    spent(store, "app", 30, NOW)
    (day,) = budget_days(loaded.daemon, loaded.loops, recent_spends(store, NOW), NOW)
    assert day.exhausted and day.until == datetime(2026, 11, 30, 23, tzinfo=UTC)
    held = holds(store, loaded.daemon, loaded.loops, [day], NOW)
    assert held["app"].kind == "budget" and "100 of 100" in held["app"].why


# -- the daemon holds new runs -----------------------------------------------------------------
def test_a_spent_loop_budget_holds_new_runs_until_the_loops_next_day(
    tmp_path: Path, clocks: Clocks, no_subreaper: None, daemons: list
) -> None:
    home = home_with(tmp_path, daily_tokens=100)
    spent(home.state(), "app", 150, NOW - timedelta(minutes=30))
    daemon = started(home, clocks)
    daemons.append(daemon)
    trigger(daemon, clocks)
    assert not daemon.pool.workers, "a run started on a spent budget"
    entry = status(daemon)["loops"]["app"]
    assert entry["phase"] == "waiting" and entry["pending"] == 1
    assert entry["waiting_for"] == "daily_tokens: 150 of 100 tokens spent today"
    assert entry["resume_at"] == datetime(2026, 11, 30, 23, tzinfo=UTC)  # midnight in Berlin
    (event,) = budget_events(daemon)
    assert (event["scope"], event["loop"], event["day"]) == ("loop", "app", "2026-11-30")
    # Still the same day: still held, and the event is not repeated.
    clocks.now = datetime(2026, 11, 30, 22, 59, 59, tzinfo=UTC)
    daemon.tick(clocks.now)
    assert not daemon.pool.workers and len(budget_events(daemon)) == 1
    # Midnight in Berlin: the run starts and ends.
    clocks.now = datetime(2026, 11, 30, 23, 0, 1, tzinfo=UTC)
    daemon.tick(clocks.now)
    assert daemon.pool.workers
    wait_for(lambda: daemon.tick(clocks.now) or not daemon.pool.workers, what="the run's end")
    (run,) = [r for r in daemon.ctx.store.iter_runs("app") if r.tokens == 0]
    assert run.outcome == "succeeded"


def test_a_spent_home_budget_holds_every_loop_until_the_next_day_of_limits_timezone(
    tmp_path: Path, clocks: Clocks, no_subreaper: None, daemons: list
) -> None:
    limits = 'daily_tokens = 100\ntimezone = "America/New_York"\n'
    home = home_with(tmp_path, limits)
    spent(home.state(), "app", 150, NOW - timedelta(minutes=30))
    daemon = started(home, clocks)
    daemons.append(daemon)
    trigger(daemon, clocks)
    assert not daemon.pool.workers
    budget = status(daemon)["budget"]
    assert budget["exhausted"] is True and (budget["tokens"], budget["limit"]) == (150, 100)
    assert budget["until"] == datetime(2026, 12, 1, 5, tzinfo=UTC)  # midnight in New York
    assert "[limits] daily_tokens" in status(daemon)["loops"]["app"]["waiting_for"]
    (event,) = budget_events(daemon)
    assert event["scope"] == "home" and event["loop"] is None
    # Midnight in Berlin means nothing to the home's budget.
    clocks.now = datetime(2026, 11, 30, 23, 0, 1, tzinfo=UTC)
    daemon.tick(clocks.now)
    assert not daemon.pool.workers
    clocks.now = datetime(2026, 12, 1, 5, 0, 1, tzinfo=UTC)
    daemon.tick(clocks.now)
    assert daemon.pool.workers
    wait_for(lambda: daemon.tick(clocks.now) or not daemon.pool.workers, what="the run's end")
    # Announced once a day, across a restart too.
    daemon.stop(clocks.now, grace=0)
    daemons.remove(daemon)
    clocks.now = NOW + timedelta(minutes=5)
    again = started(home, clocks)
    daemons.append(again)
    again.tick(clocks.now)
    assert len(budget_events(again)) == 1


# -- price, once, check ---------------------------------------------------------------------
def fake_qwen(tmp_path: Path) -> dict[str, str]:
    """A `qwen` on PATH that prints Qwen Code's recorded stream and fixes calc.py."""
    lines = (STREAMS / "qwen.jsonl").read_text().splitlines()[:-1]  # without the garbage line
    stream = tmp_path / "qwen-stream.jsonl"
    stream.write_text("\n".join(lines) + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "qwen"
    program.write_text(
        f"#!{sys.executable}\n"
        "import pathlib, sys\n"
        "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
        f"sys.stdout.write(open({str(stream)!r}).read())\n"
    )
    program.chmod(0o755)
    import os

    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def priced_home(tmp_path: Path, **loop: object) -> Path:
    repo = make_repo(
        tmp_path / "repo",
        {
            "calc.py": "def add(a, b):\n    return a - b\n",
            "check.py": "from calc import add\nassert add(2, 3) == 5\n",
        },
    )
    config = '[agents.q]\nadapter = "qwen"\nmodel = "m"\nprice = { input = 3.0, output = 15.0 }\n'
    lines = [
        f'repo = "{repo}"',
        'task = "Make check.py pass."',
        'agent = "q"',
        'done_when = ["python3 check.py"]',
        "max_nudges = 0",
        'critic = "off"',
    ]
    lines += [f"{key} = {json.dumps(value)}" for key, value in loop.items()]
    return make_home(tmp_path / "home", config, {"calc": "\n".join(lines) + "\n"})


def test_a_profiles_price_gives_cost_usd_per_attempt_and_run_and_in_the_report(
    tmp_path: Path,
) -> None:
    home = priced_home(tmp_path)
    env = fake_qwen(tmp_path)
    proc = loopd(home, "once", "calc", env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    record = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    # The recorded stream's result: 2500 input and 42 output tokens; $3 and $15 a million.
    cost = round((2500 * 3.0 + 42 * 15.0) / 1_000_000, 6)
    (attempt,) = record["attempts"]
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (2500, 42)
    assert attempt["cost_usd"] == cost and record["cost_usd"] == cost
    assert (record["input_tokens"], record["output_tokens"], record["tokens"]) == (2500, 42, 2542)
    assert "cost $0.0081" in proc.stdout
    assert "$0.0081" in loopd(home, "show", run_id, env={"COLUMNS": "200"}).stdout
    loopd(home, "report", "--since", "1h")
    (report,) = (home / "state" / "reports").glob("report-*.md")
    assert "| $0.01 |" in report.read_text()


def test_once_does_not_start_a_run_on_a_spent_budget(tmp_path: Path) -> None:
    home = priced_home(tmp_path, daily_tokens=100)
    spent(StateStore(home / "state"), "calc", 150, datetime.now(UTC) - timedelta(seconds=1))
    proc = loopd(home, "once", "calc", env=fake_qwen(tmp_path))
    assert proc.returncode == 1
    assert "not run: daily_tokens: 150 of 100 tokens spent today" in proc.stdout
    assert len(list((home / "state" / "runs").iterdir())) == 1  # only the spent one


def test_check_warns_of_a_budget_on_an_agent_that_reports_no_usage(tmp_path: Path) -> None:
    home = home_with(tmp_path, "daily_tokens = 1000\n", daily_tokens=100)
    proc = loopd(home.root, "check")
    assert proc.returncode == 0, proc.stdout
    assert "app.toml: daily_tokens: agent profile 'a' (adapter 'command') reports no" in proc.stdout
    assert "[limits] daily_tokens in loopd.toml does not count this loop's runs" in proc.stdout

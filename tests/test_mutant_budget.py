"""Tests that kill mutants of token budgets (daemon/runs/budget.py) that the other tests let
live (bench/mutation.py): whose tokens a budget counts, the edges of its day, which hold
comes first, and the warnings of `loopd check`; in process, on a real home and state."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from daemon.config import LoadedConfig
from daemon.home import Home
from daemon.runs.budget import (
    LOOKBACK,
    BudgetDay,
    Spend,
    budget_days,
    budget_warnings,
    day_window,
    holds,
    home_zone,
    loop_hold,
    recent_spends,
)
from daemon.state.holds import QuotaHold, hold_profile
from daemon.state.records import AttemptRecord, RunRecord, RunTrigger, make_run_id
from daemon.state.store import StateStore
from tests.helpers import make_home, make_repo

NOW = datetime(2026, 11, 30, 20, 0, tzinfo=UTC)  # 21:00 in Berlin
BERLIN = ZoneInfo("Europe/Berlin")


def home_of(tmp_path: Path, limits: str = "", **loops: dict[str, object]) -> Home:
    """A home whose loops (name -> extra keys) use profile `a` (command: reports no usage)
    unless they name `agent`; profile `q` is qwen, which reports usage."""
    repo = make_repo(tmp_path / "repo")
    config = (
        '[agents.a]\nadapter = "command"\ncommand = ["true"]\n'
        '[agents.q]\nadapter = "qwen"\n'
        f'[limits]\nworktrees = "{tmp_path / "worktrees"}"\n{limits}'
    )
    files = {}
    for name, keys in loops.items():
        lines = [f'repo = "{repo}"', 'task = "t"', 'timezone = "Europe/Berlin"']
        keys = {"agent": "a", **keys}
        lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
        files[name] = "\n".join(lines) + "\n"
    return Home(make_home(tmp_path / "home", config, files))


def spent(store: StateStore, loop: str, tokens: int, at: datetime | None, n: int = 0) -> str:
    """A run of `loop` whose attempt spent `tokens` and finished at `at` (None: still running),
    started ten minutes before; its id."""
    begun = (at or NOW) - timedelta(minutes=10)
    run = RunRecord(
        id=make_run_id(loop, begun, n),
        loop=loop,
        task="t",
        trigger=RunTrigger(kind="manual", ts=begun),
        started=begun,
        attempts=[AttemptRecord(n=1, started=begun, finished=at, tokens=tokens)],
    )
    store.save_run(run)
    return run.id


# -- whose tokens, which day ---------------------------------------------------------------------


def test_a_loops_budget_counts_its_own_tokens_and_the_homes_counts_all(tmp_path: Path) -> None:
    limits = 'daily_tokens = 1000\ntimezone = "Pacific/Auckland"\n'
    home = home_of(tmp_path, limits, app={"daily_tokens": 100}, web={})
    loaded = home.load()
    spends = [Spend("app", NOW, 70), Spend("web", NOW, 50), Spend("app", NOW, 5)]
    days = budget_days(loaded.daemon, loaded.loops, spends, NOW)
    assert [(d.scope, d.tokens, d.limit) for d in days] == [
        ("home", 125, 1000),
        ("loop:app", 75, 100),
    ]
    # Each in its own zone's day: already tomorrow in Auckland, still today in Berlin.
    _, auckland_end, auckland_day = day_window(NOW, ZoneInfo("Pacific/Auckland"))
    assert (
        (days[0].day, days[0].until)
        == (auckland_day, auckland_end)
        == (
            "2026-12-01",
            datetime(2026, 12, 1, 11, tzinfo=UTC),
        )
    )
    assert (days[1].day, days[1].until) == ("2026-11-30", day_window(NOW, BERLIN)[1])


def test_a_day_holds_its_first_instant_and_not_the_next_days(tmp_path: Path) -> None:
    home = home_of(tmp_path, app={"daily_tokens": 100})
    loaded = home.load()
    start, end, _ = day_window(NOW, BERLIN)
    spends = [
        Spend("app", start, 1),
        Spend("app", end, 10),
        Spend("app", start - timedelta(microseconds=1), 100),
        Spend("app", end - timedelta(microseconds=1), 1000),
    ]
    (day,) = budget_days(loaded.daemon, loaded.loops, spends, NOW)
    assert day.tokens == 1001
    assert day.until == end and day.day == "2026-11-30"


def test_the_homes_day_is_limits_timezone_else_this_machines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        zoned = home_of(tmp_path / "zoned", 'timezone = "Asia/Tokyo"\ndaily_tokens = 10\n')
        assert home_zone(zoned.load().daemon).utcoffset(NOW) == timedelta(hours=9)
        local = home_of(tmp_path / "local", "daily_tokens = 10\n")
        assert home_zone(local.load().daemon).utcoffset(NOW) == timedelta(hours=-5)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_spends_are_those_of_runs_started_within_the_lookback_and_of_live_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = StateStore(tmp_path / "state")
    edge = NOW - LOOKBACK + timedelta(minutes=10)  # its run started exactly LOOKBACK ago
    spent(store, "app", 1, edge)
    spent(store, "app", 10, edge - timedelta(seconds=1))  # started a second too early
    old_but_live = spent(store, "app", 100, NOW - timedelta(days=5))
    store.mark_live(old_but_live)
    spent(store, "app", 1000, None, n=1)  # running: counts now
    spent(store, "web", 0, NOW - timedelta(hours=1))  # no usage: nothing to count
    # An unreadable record in the middle is passed over, the rest still read.
    broken = make_run_id("app", NOW - timedelta(days=1))
    (store.run_dir(broken)).mkdir(parents=True)
    (store.run_dir(broken) / "run.toml").write_text("not = [toml")
    spent(store, "app", 10000, NOW - timedelta(minutes=1), n=2)
    # The run ids are in UTC: a machine far from it must not move the floor.
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")
    time.tzset()
    try:
        found = recent_spends(store, NOW)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert sorted(s.tokens for s in found) == [1, 100, 1000, 10000]
    running = next(s for s in found if s.tokens == 1000)
    assert running.at == NOW and running.loop == "app"
    assert next(s for s in found if s.tokens == 1).at == edge


# -- holds ---------------------------------------------------------------------------------------


def day(scope: str, tokens: int, limit: int, until: datetime) -> BudgetDay:
    return BudgetDay(scope, "2026-11-30", tokens, limit, until)


def test_a_usage_limit_comes_first_then_the_homes_budget_then_the_loops(tmp_path: Path) -> None:
    home = home_of(tmp_path, app={}, web={"agent": "q"}, cli={})
    loaded = home.load()
    store = home.state()
    resume = NOW + timedelta(hours=2)
    hold_profile(store, "q", QuotaHold(resume_at=resume, since=NOW))
    midnight = NOW + timedelta(hours=3)
    spent_home = day("home", 500, 500, midnight)
    own = day("loop:app", 80, 50, midnight + timedelta(hours=1))
    out = holds(store, loaded.daemon, loaded.loops, [spent_home, own], NOW)
    assert out["web"].kind == "quota" and out["web"].until == resume
    assert out["web"].why == "the usage limit of agent profile 'q'"
    assert out["app"].kind == "budget" and out["app"].until == midnight
    assert out["app"].why == "[limits] daily_tokens: 500 of 500 tokens spent today"
    assert out["cli"] == out["app"]
    alone = holds(store, loaded.daemon, loaded.loops, [own], NOW)
    assert set(alone) == {"web", "app"}
    assert alone["app"].kind == "budget" and alone["app"].until == own.until
    assert alone["app"].why == "daily_tokens: 80 of 50 tokens spent today"


def test_budgets_not_spent_and_limits_past_hold_nothing(tmp_path: Path) -> None:
    home = home_of(tmp_path, app={"agent": "q"}, web={})
    loaded = home.load()
    store = home.state()
    hold_profile(store, "q", QuotaHold(resume_at=NOW, since=NOW - timedelta(hours=1)))
    days = [day("home", 499, 500, NOW), day("loop:web", 10, 0, NOW), day("loop:app", 1, 2, NOW)]
    assert holds(store, loaded.daemon, loaded.loops, days, NOW) == {}
    # Another loop's spent budget holds only that loop.
    other = [day("loop:web", 2, 2, NOW + timedelta(hours=1))]
    assert set(holds(store, loaded.daemon, loaded.loops, other, NOW)) == {"web"}


def test_loopd_once_asks_the_same_question_for_its_one_loop(tmp_path: Path) -> None:
    home = home_of(tmp_path, app={"daily_tokens": 100}, web={})
    loaded = home.load()
    store = home.state()
    assert loop_hold(store, loaded.daemon, loaded.loops["app"], NOW) is None
    spent(store, "app", 60, NOW - timedelta(hours=1))
    spent(store, "app", 40, NOW - timedelta(minutes=5), n=1)
    held = loop_hold(store, loaded.daemon, loaded.loops["app"], NOW)
    assert held is not None and held.kind == "budget"
    assert held.until == day_window(NOW, BERLIN)[1]
    assert held.why == "daily_tokens: 100 of 100 tokens spent today"
    # A loop without a budget of its own is not held by another loop's.
    assert loop_hold(store, loaded.daemon, loaded.loops["web"], NOW) is None


def test_loopd_once_is_held_by_the_homes_budget_and_by_a_usage_limit(tmp_path: Path) -> None:
    home = home_of(tmp_path, "daily_tokens = 50\n", app={"agent": "q"})
    loaded = home.load()
    store = home.state()
    spent(store, "other", 50, NOW - timedelta(minutes=5))
    held = loop_hold(store, loaded.daemon, loaded.loops["app"], NOW)
    assert held is not None and held.why.startswith("[limits] daily_tokens: 50 of 50")
    hold_profile(store, "q", QuotaHold(resume_at=NOW + timedelta(hours=1), since=NOW))
    quota = loop_hold(store, loaded.daemon, loaded.loops["app"], NOW)
    assert quota is not None and quota.kind == "quota"


# -- warnings ------------------------------------------------------------------------------------


def warnings_of(home: Home) -> list[str]:
    loaded: LoadedConfig = home.load()
    return budget_warnings(loaded)


def test_a_budget_on_an_agent_that_reports_no_usage_is_warned_of(tmp_path: Path) -> None:
    home = home_of(
        tmp_path,
        "daily_tokens = 1000\n",
        app={"daily_tokens": 100},
        counted={"agent": "q", "daily_tokens": 100},
        off={"enabled": False, "daily_tokens": 100},
        plain={},
    )
    found = warnings_of(home)
    loops = home.root / "loops"
    why = "agent profile 'a' (adapter 'command') reports no token usage"
    assert found == [
        f"{loops / 'app.toml'}: daily_tokens: {why}, so this loop's runs never count toward "
        "its budget and it never holds them; use an adapter that reports usage or remove "
        "daily_tokens",
        f"{loops / 'app.toml'}: [limits] daily_tokens in loopd.toml does not count this "
        f"loop's runs: {why}",
        f"{loops / 'plain.toml'}: [limits] daily_tokens in loopd.toml does not count this "
        f"loop's runs: {why}",
    ]


def test_no_budget_no_warning(tmp_path: Path) -> None:
    assert warnings_of(home_of(tmp_path, app={}, web={"agent": "q"})) == []


@pytest.fixture(autouse=True)
def _zone_restored() -> Iterator[None]:
    """A test that moved TZ puts it back even when it fails midway."""
    yield
    time.tzset()

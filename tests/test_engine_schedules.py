"""Schedules fire at the same instants on both engines: daylight-saving days, the day OR rule.

The local engine's fires come from loopd's cron (daemon/scheduling/cron.py); the Temporal
engine's from the server itself (its matching times of the Schedules loopd makes for a loop,
daylight-saving patches included), on a real dev server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from daemon.scheduling.cron import Schedule
from tests.helpers import ROOT

Fires = Callable[[list[str], str, datetime, datetime], list[datetime]]


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.fixture(params=["local", "temporal"])
def fires(request: pytest.FixtureRequest) -> Fires:
    """Fire times in (start, end] of a loop's `schedule` in `timezone`, as the engine has them."""
    if request.param == "local":
        return lambda crons, zone, start, end: Schedule(crons, zone).fires_between(start, end)
    server, namespace = request.getfixturevalue("temporal")

    def on_engine(crons: list[str], zone: str, start: datetime, end: datetime) -> list[datetime]:
        case = {
            "crons": crons,
            "timezone": zone,
            "start": start.isoformat(),
            "end": end.isoformat(),
        }
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.engine_fires",
                server.address,
                namespace,
                json.dumps(case),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [datetime.fromisoformat(t) for t in json.loads(proc.stdout)]

    return on_engine


def test_a_daily_fire_in_the_spring_gap_is_shifted_forward_and_fires_once(fires: Fires) -> None:
    # 2026-03-29 in Berlin: 02:00 CET jumps to 03:00 CEST (01:00 UTC); 02:xx never happens.
    daily = fires(["0 2 * * *"], "Europe/Berlin", utc(2026, 3, 27), utc(2026, 3, 30, 12))
    assert daily == [
        utc(2026, 3, 27, 1),
        utc(2026, 3, 28, 1),
        utc(2026, 3, 29, 1),
        utc(2026, 3, 30, 0),
    ]
    half = fires(["30 2 * * *"], "Europe/Berlin", utc(2026, 3, 28, 12), utc(2026, 3, 30, 12))
    assert half == [utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 0, 30)]


def test_several_times_in_the_spring_gap_stay_unique_and_ordered(fires: Fires) -> None:
    got = fires(["0,15,30 2,3 * * *"], "Europe/Berlin", utc(2026, 3, 28, 23), utc(2026, 3, 29, 3))
    assert got == [utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 15), utc(2026, 3, 29, 1, 30)]


def test_a_daily_fire_in_the_repeated_autumn_hour_fires_once_at_its_first_occurrence(
    fires: Fires,
) -> None:
    # 2026-10-25 in Berlin: 03:00 CEST falls back to 02:00 CET; 02:xx happens twice.
    daily = fires(["30 2 * * *"], "Europe/Berlin", utc(2026, 10, 24, 12), utc(2026, 10, 26, 12))
    assert daily == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]


def test_an_hourly_fire_through_the_repeated_hour_never_goes_back_or_repeats(fires: Fires) -> None:
    got = fires(["0 * * * *"], "Europe/Berlin", utc(2026, 10, 24, 22), utc(2026, 10, 25, 4))
    assert got == [
        utc(2026, 10, 24, 23),
        utc(2026, 10, 25, 0),
        utc(2026, 10, 25, 2),
        utc(2026, 10, 25, 3),
        utc(2026, 10, 25, 4),
    ]


def test_both_day_fields_restricted_fire_on_either(fires: Fires) -> None:
    # January 2026: the 13th is a Tuesday; the Fridays are the 2nd, 9th, 16th, 23rd, 30th.
    got = fires(["0 0 13 * 5"], "UTC", utc(2026, 1, 1), utc(2026, 2, 1))
    assert [f.day for f in got] == [2, 9, 13, 16, 23, 30]


def test_a_year_of_two_schedules_in_new_york_agrees_with_loopds_cron(fires: Fires) -> None:
    crons = ["30 1 * * *", "15 */6 1,15 * 1"]
    start, end = utc(2027, 1, 1), utc(2028, 1, 1)
    got = fires(crons, "America/New_York", start, end)
    assert got == Schedule(crons, "America/New_York").fires_between(start, end)
    daily = [
        f for f in got if f.astimezone(Schedule(crons, "America/New_York").timezone).minute == 30
    ]
    assert len(daily) == 365  # one a day, the repeated and the missing hour included


def test_check_compares_each_loops_schedules_on_the_engine_with_its_cron(
    tmp_path: Path, temporal: Any
) -> None:
    from tests.helpers import loopd, make_home, make_repo
    from tests.machines import command_agent, engine_toml, loop_toml
    from tests.temporal_server import client_call, free_port

    server, namespace = temporal
    repo = make_repo(tmp_path / "repo")
    loop = loop_toml(
        repo,
        task="t",
        agent="a",
        schedule=["30 2 * * *", "0 9 13 * 5"],
        timezone="Europe/Berlin",
    )
    agent = command_agent("a", "print('hi')")
    home = make_home(
        tmp_path / "home", agent + engine_toml(server.address, namespace), {"calc": loop}
    )
    proc = loopd(home, "check", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["errors"] == []
    assert not [w for w in report["warnings"] if "offline" in w]
    left = client_call(
        server.address,
        namespace,
        "print(json.dumps([s.id async for s in await client.list_schedules()]))",
    )
    assert json.loads(left.splitlines()[-1]) == []  # the check's own schedules are gone
    # No engine to ask: the mapping is checked offline, and the check says so.
    away = make_home(
        tmp_path / "away",
        agent + engine_toml(f"127.0.0.1:{free_port()}", namespace),
        {"calc": loop},
    )
    proc = loopd(away, "check", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [w for w in json.loads(proc.stdout)["warnings"] if "checked offline only" in w]

"""Cron keeps its standard meaning: weekdays, the day OR rule, steps, names, timezones, errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from daemon.config import DaemonConfig, LoopConfig, load_loop
from daemon.scheduling.cron import CronExpression, Schedule


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def fires(expression: str, start: datetime, end: datetime, timezone: str = "UTC") -> list[datetime]:
    return Schedule([expression], timezone).fires_between(start, end)


# weekdays ---------------------------------------------------------------------------------
def test_weekday_zero_is_sunday() -> None:
    got = fires("0 2 * * 0", utc(2026, 1, 1), utc(2026, 3, 1))
    assert got[0] == utc(2026, 1, 4, 2)  # 2026-01-04 is a Sunday
    assert len(got) == 8
    assert all(f.weekday() == 6 and (f.hour, f.minute) == (2, 0) for f in got)
    assert [b - a for a, b in zip(got, got[1:], strict=False)] == [timedelta(days=7)] * 7


def test_weekday_seven_is_sunday_too() -> None:
    start, end = utc(2026, 1, 1), utc(2026, 6, 1)
    assert fires("0 2 * * 7", start, end) == fires("0 2 * * 0", start, end)
    assert fires("0 2 * * sun", start, end) == fires("0 2 * * 0", start, end)
    assert fires("@weekly", start, end)[0] == utc(2026, 1, 4, 0)


def test_weekday_range_is_monday_to_friday() -> None:
    got = fires("0 0 * * 1-5", utc(2026, 1, 4), utc(2026, 1, 18))  # two whole weeks
    assert len(got) == 10
    assert sorted({f.weekday() for f in got}) == [0, 1, 2, 3, 4]
    assert fires("0 0 * * mon-fri", utc(2026, 1, 4), utc(2026, 1, 18)) == got


def test_saturday_is_six() -> None:
    got = fires("0 12 * * 6", utc(2026, 1, 1), utc(2026, 2, 1))
    assert [f.day for f in got] == [3, 10, 17, 24, 31]


# the day-of-month / day-of-week OR rule ---------------------------------------------------
def test_both_day_fields_restricted_fire_on_either() -> None:
    # January 2026: the 13th is a Tuesday; the Fridays are the 2nd, 9th, 16th, 23rd, 30th.
    got = fires("0 0 13 * 5", utc(2026, 1, 1), utc(2026, 2, 1))
    assert [f.day for f in got] == [2, 9, 13, 16, 23, 30]


def test_one_day_field_restricted_uses_that_field_alone() -> None:
    january = (utc(2026, 1, 1), utc(2026, 2, 1))
    assert [f.day for f in fires("0 0 13 * *", *january)] == [13]
    assert [f.day for f in fires("0 0 * * 5", *january)] == [2, 9, 16, 23, 30]


def test_or_rule_respects_month() -> None:
    got = fires("0 0 1 jun mon", utc(2026, 1, 1), utc(2027, 1, 1))
    # June 2026: the 1st (a Monday) and every Monday, nothing outside June.
    assert [f.day for f in got] == [1, 8, 15, 22, 29]
    assert {f.month for f in got} == {6}


# steps, lists, names ----------------------------------------------------------------------
def test_every_fifteen_minutes() -> None:
    got = fires("*/15 * * * *", utc(2026, 5, 1, 9, 0), utc(2026, 5, 1, 10, 0))
    assert [f.minute for f in got] == [15, 30, 45, 0]
    assert got[-1] == utc(2026, 5, 1, 10, 0)


def test_step_from_a_start_and_lists() -> None:
    got = fires("5/20 8,17 * * *", utc(2026, 5, 1), utc(2026, 5, 2))
    assert [(f.hour, f.minute) for f in got] == [
        (8, 5),
        (8, 25),
        (8, 45),
        (17, 5),
        (17, 25),
        (17, 45),
    ]


def test_month_and_weekday_names() -> None:
    got = fires("0 9 * jan mon-fri", utc(2025, 12, 1), utc(2027, 1, 1))
    assert got[0] == utc(2026, 1, 1, 9)  # a Thursday
    assert len(got) == 22  # the weekdays of January 2026
    assert {f.month for f in got} == {1}
    assert all(f.weekday() < 5 for f in got)
    assert Schedule(["0 9 * JAN MON-FRI"]).next_fire(got[-1]) == utc(2027, 1, 1, 9)


def test_every_minute() -> None:
    got = fires("* * * * *", utc(2026, 5, 1, 9, 0), utc(2026, 5, 1, 9, 10))
    assert got == [utc(2026, 5, 1, 9, m) for m in range(1, 11)]


def test_never_matching_day_has_no_fire() -> None:
    assert Schedule(["0 0 30 2 *"]).next_fire(utc(2026, 1, 1)) is None
    assert Schedule(["0 0 29 2 *"]).next_fire(utc(2026, 1, 1)) == utc(2028, 2, 29)


def test_several_expressions_merge_in_order() -> None:
    schedule = Schedule(["0 2 * * *", "30 1 * * *"])
    got = schedule.fires_between(utc(2026, 5, 1), utc(2026, 5, 2, 12))
    assert got == [
        utc(2026, 5, 1, 1, 30),
        utc(2026, 5, 1, 2),
        utc(2026, 5, 2, 1, 30),
        utc(2026, 5, 2, 2),
    ]


def test_next_fire_is_strictly_after_and_in_utc() -> None:
    schedule = Schedule(["0 2 * * *"], "Europe/Berlin")
    fire = schedule.next_fire(utc(2026, 1, 15))
    assert fire == utc(2026, 1, 15, 1)
    assert fire.utcoffset() == timedelta(0)
    assert schedule.next_fire(fire) == utc(2026, 1, 16, 1)
    assert schedule.next_fire(fire - timedelta(microseconds=1)) == fire
    assert schedule.next_fire(fire + timedelta(microseconds=1)) == utc(2026, 1, 16, 1)


# timezones --------------------------------------------------------------------------------
def test_berlin_two_am_in_winter_and_summer() -> None:
    schedule = Schedule(["0 2 * * *"], "Europe/Berlin")
    assert schedule.next_fire(utc(2026, 1, 15)) == utc(2026, 1, 15, 1)  # CET, UTC+1
    assert schedule.next_fire(utc(2026, 7, 14, 12)) == utc(2026, 7, 15, 0)  # CEST, UTC+2


def test_other_zone_and_utc_default() -> None:
    assert Schedule(["0 9 * * *"], "America/New_York").next_fire(utc(2026, 1, 15)) == utc(
        2026, 1, 15, 14
    )
    assert Schedule(["0 9 * * *"]).next_fire(utc(2026, 1, 15)) == utc(2026, 1, 15, 9)


def test_dst_gap_day_fires_once() -> None:
    # 2026-03-29 in Berlin: 02:00 CET jumps to 03:00 CEST (01:00 UTC); 02:xx never happens.
    daily = fires("0 2 * * *", utc(2026, 3, 27), utc(2026, 3, 30, 12), "Europe/Berlin")
    assert daily == [
        utc(2026, 3, 27, 1),
        utc(2026, 3, 28, 1),
        utc(2026, 3, 29, 1),
        utc(2026, 3, 30, 0),
    ]
    # A time inside the gap fires shifted forward by the gap (02:30 -> 03:30 CEST).
    half = fires("30 2 * * *", utc(2026, 3, 28, 12), utc(2026, 3, 30, 12), "Europe/Berlin")
    assert half == [utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 0, 30)]
    # Asked from inside the shifted window, the gap's fire is still found.
    assert Schedule(["30 2 * * *"], "Europe/Berlin").next_fire(utc(2026, 3, 29, 1, 10)) == utc(
        2026, 3, 29, 1, 30
    )


def test_dst_gap_minutes_are_unique_and_ordered() -> None:
    got = fires("* * * * *", utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 2, 0), "Europe/Berlin")
    assert got == [utc(2026, 3, 28, 23, 1) + timedelta(minutes=i) for i in range(180)]
    several = fires("0,15,30 2,3 * * *", utc(2026, 3, 28, 23), utc(2026, 3, 29, 3), "Europe/Berlin")
    assert several == sorted(set(several))
    assert several == [utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 15), utc(2026, 3, 29, 1, 30)]


def test_dst_repeated_hour_fires_once() -> None:
    # 2026-10-25 in Berlin: 03:00 CEST falls back to 02:00 CET; 02:xx happens twice.
    daily = fires("30 2 * * *", utc(2026, 10, 24, 12), utc(2026, 10, 26, 12), "Europe/Berlin")
    assert daily == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]


def test_dst_repeated_hour_never_goes_back_or_repeats() -> None:
    schedule = Schedule(["0 * * * *"], "Europe/Berlin")
    got = schedule.fires_between(utc(2026, 10, 24, 22), utc(2026, 10, 25, 4))
    assert got == sorted(set(got))
    # 02:00 CET names a wall time that already fired at 00:00 UTC: the next is 03:00 CET.
    assert got == [
        utc(2026, 10, 24, 23),
        utc(2026, 10, 25, 0),
        utc(2026, 10, 25, 2),
        utc(2026, 10, 25, 3),
        utc(2026, 10, 25, 4),
    ]
    # From inside the repeated hour (second pass) the answer moves forward, never back.
    inside = utc(2026, 10, 25, 1, 15)  # 02:15 CET
    assert schedule.next_fire(inside) == utc(2026, 10, 25, 2)


# errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("61 * * * *", ["'61'", "0-59", "minute field"]),
        ("* 24 * * *", ["'24'", "0-23", "hour field"]),
        ("0 0 32 * *", ["'32'", "1-31", "day-of-month field"]),
        ("0 0 * 13 *", ["'13'", "1-12", "month field"]),
        ("0 0 * * 8", ["'8'", "0-7", "day-of-week field"]),
        ("* * * *", ["4 fields", "five", "minute hour day-of-month month day-of-week"]),
        ("* * * * * *", ["6 fields", "five"]),
        ("a b c d e", ["'a'", "minute field"]),
        ("0 0 * * fri-mon", ["backwards", "day-of-week field"]),
        ("*/0 * * * *", ["step", "minute field"]),
        ("0 0 * xyz *", ["'xyz'", "month field"]),
        ("0 0 1,,2 * *", ["empty", "day-of-month field"]),
    ],
)
def test_bad_expressions_name_the_field(expression: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        CronExpression.parse(expression)
    message = str(info.value)
    assert expression in message
    for word in words:
        assert word in message


def test_bad_timezone_is_rejected() -> None:
    with pytest.raises(ValueError, match="Europe/Berlin"):
        Schedule(["0 2 * * *"], "Mars/Olympus")


def test_loop_config_reports_a_bad_cron_on_the_schedule_key() -> None:
    with pytest.raises(ValidationError) as info:
        LoopConfig.model_validate(
            {"repo": "/tmp", "task": "t", "schedule": ["0 2 * * *", "0 0 * * 8"]}
        )
    errors = info.value.errors()
    assert [e["loc"] for e in errors] == [("schedule", 1)]  # the bad one, at its place
    assert "day-of-week field" in errors[0]["msg"]


def test_loop_file_with_bad_cron_names_file_key_and_field(tmp_path: Path) -> None:
    path = tmp_path / "nightly.toml"
    path.write_text('repo = "/tmp"\ntask = "t"\nschedule = ["61 * * * *"]\n')
    loop, errors = load_loop(path, DaemonConfig())
    assert loop is None
    assert len(errors) == 1
    text = str(errors[0])
    assert errors[0].key == "schedule[0]"
    assert str(path) in text and "minute field" in text and "61" in text


def test_loop_file_with_bad_timezone_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "nightly.toml"
    path.write_text('repo = "/tmp"\ntask = "t"\nschedule = ["0 2 * * *"]\ntimezone = "Nowhere"\n')
    loop, errors = load_loop(path, DaemonConfig())
    assert loop is None
    assert [e.key for e in errors] == ["timezone"]

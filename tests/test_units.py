"""Durations and sizes: parsed without overflow, bounded per key with the range in the error."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from daemon.units import (
    LONGEST,
    Bounds,
    OutOfRange,
    duration,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
    size,
)


@pytest.mark.parametrize(
    "text, seconds",
    [("800ms", 0.8), ("30s", 30), ("5m", 300), ("2h", 7200), ("1.5d", 129600), (90, 90)],
)
def test_durations_parse(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "huge", ["99999999999d", "1000000000000000000000h", 1e300, float("inf"), 10**30, -5, "36501d"]
)
def test_a_huge_or_negative_duration_is_out_of_range_not_an_overflow(huge: object) -> None:
    with pytest.raises(OutOfRange):
        parse_duration(huge)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["5 minutes", "m5", "", float("nan"), True, None, [1]])
def test_a_malformed_duration_is_a_value_error_with_examples(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(bad)  # type: ignore[arg-type]
    assert not isinstance(info.value, OutOfRange)
    assert "30s" in str(info.value)


@pytest.mark.parametrize(
    "text, size_bytes",
    [("100KB", 100_000), ("50MB", 50_000_000), ("1GiB", 1024**3), ("4096", 4096), (512, 512)],
)
def test_sizes_parse(text: str | int, size_bytes: int) -> None:
    assert parse_size(text) == size_bytes


@pytest.mark.parametrize("huge", ["99999999999999999999GB", "1" + "0" * 400 + "TB", 10**40, -1])
def test_a_huge_or_negative_size_is_out_of_range(huge: object) -> None:
    with pytest.raises(OutOfRange):
        parse_size(huge)  # type: ignore[arg-type]


def test_formats_round_trip() -> None:
    assert format_duration(parse_duration("45m")) == "45m"
    assert format_duration(LONGEST) == "36500d"
    assert format_size(parse_size("64MB")) == "64MB"
    assert format_size(1500) == "1500B"


class _Keys(BaseModel):
    model_config = ConfigDict(validate_default=True)

    timeout: duration("1s", "7d") = "45m"  # type: ignore[valid-type]
    cap: size("4KB", "10MB") = "100KB"  # type: ignore[valid-type]


@pytest.mark.parametrize(
    "field, value, kind",
    [
        ("timeout", "99999999999d", "duration_range"),
        ("timeout", "8d", "duration_range"),
        ("timeout", "500ms", "duration_range"),
        ("timeout", float("inf"), "duration_range"),
        ("timeout", "soon", "duration_syntax"),
        ("cap", "11MB", "size_range"),
        ("cap", "99999999999999GB", "size_range"),
        ("cap", "big", "size_syntax"),
    ],
)
def test_a_key_outside_its_range_names_the_range(field: str, value: object, kind: str) -> None:
    with pytest.raises(ValidationError) as info:
        _Keys.model_validate({field: value})
    (error,) = info.value.errors()
    assert error["type"] == kind
    low, high = ("1s", "7d") if field == "timeout" else ("4KB", "10MB")
    assert error["ctx"]["low"] == low and error["ctx"]["high"] == high
    if kind.endswith("_range"):
        assert f"{low} to {high}" in error["msg"]


def test_the_range_is_kept_in_the_annotation() -> None:
    bounds = [m for m in _Keys.model_fields["timeout"].metadata if isinstance(m, Bounds)]
    assert bounds == [Bounds("duration", "1s", "7d")]
    assert _Keys().timeout == timedelta(minutes=45)
    assert _Keys(timeout="7d").model_dump(mode="json")["timeout"] == "7d"

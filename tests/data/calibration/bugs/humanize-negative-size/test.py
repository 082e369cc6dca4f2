import pytest

from filesize import naturalsize


def test_positive():
    assert naturalsize(300) == "300 Bytes"
    assert naturalsize(123456) == "123.5 kB"
    assert naturalsize(123456789) == "123.5 MB"


def test_negative_kilobytes():
    assert naturalsize(-123456) == "-123.5 kB"


def test_negative_megabytes():
    assert naturalsize(-123456789) == "-123.5 MB"


def test_negative_one():
    assert naturalsize(-1) == "-1 Byte"


@pytest.mark.parametrize("value", [0, 2, 999])
def test_small(value):
    assert naturalsize(value) == f"{value} Bytes"

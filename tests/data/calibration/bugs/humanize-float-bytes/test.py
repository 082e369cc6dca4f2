import pytest

from filesize import naturalsize


def test_whole_bytes():
    assert naturalsize(300) == "300 Bytes"
    assert naturalsize(1) == "1 Byte"
    assert naturalsize(300, gnu=True) == "300B"


def test_float_bytes():
    assert naturalsize(1.123456789) == "1 Bytes"
    assert naturalsize(999.9) == "999 Bytes"


def test_float_bytes_gnu():
    assert naturalsize(1.123456789, gnu=True) == "1B"


@pytest.mark.parametrize(
    ("value", "gnu", "expected"),
    [(1.123456789 * 10**3, False, "1.1 kB"), (1.123456789 * 10**6, False, "1.1 MB"), (2048, True, "2.0K")],
)
def test_scaled(value, gnu, expected):
    assert naturalsize(value, gnu=gnu) == expected

from strutils import binary_ratio, is_mostly_bin


def test_text():
    assert not is_mostly_bin(b"hello world\n")
    assert binary_ratio(b"abc") == 0.0


def test_binary():
    assert is_mostly_bin(bytes(range(0, 8)) * 4)


def test_empty_ratio():
    assert binary_ratio(b"") == 0.0


def test_empty_is_not_binary():
    assert is_mostly_bin(b"") is False

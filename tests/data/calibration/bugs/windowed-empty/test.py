from windows import windowed


def test_full_windows():
    assert list(windowed([1, 2, 3, 4], 2)) == [(1, 2), (2, 3), (3, 4)]


def test_short_input_is_filled():
    assert list(windowed([1, 2], 3)) == [(1, 2, None)]
    assert list(windowed([1, 2], 3, fillvalue="!")) == [(1, 2, "!")]


def test_step():
    assert list(windowed([1, 2, 3, 4, 5], 3, step=2)) == [(1, 2, 3), (3, 4, 5)]


def test_empty_list():
    assert list(windowed([], 3)) == []


def test_empty_iterator():
    assert list(windowed(iter([]), 3)) == []

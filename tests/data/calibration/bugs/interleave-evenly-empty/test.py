from interleave import interleave_evenly


def test_two_iterables():
    assert list(interleave_evenly([[1, 2, 3, 4, 5], ["a", "b"]])) == [1, 2, "a", 3, 4, "b", 5]


def test_three_iterables():
    result = list(interleave_evenly([[1, 2, 3], ["a"], ["x", "y"]]))
    assert sorted(map(str, result)) == ["1", "2", "3", "a", "x", "y"]
    assert [v for v in result if isinstance(v, int)] == [1, 2, 3]


def test_no_iterables():
    assert list(interleave_evenly([])) == []


def test_no_iterables_explicit_lengths():
    assert list(interleave_evenly([], lengths=[])) == []

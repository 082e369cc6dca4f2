from partitions import partition, partition_all


def test_partition():
    assert list(partition(2, [1, 2, 3, 4, 5])) == [(1, 2), (3, 4)]
    assert list(partition(2, [1, 2, 3], pad=None)) == [(1, 2), (3, None)]


def test_partition_all():
    assert list(partition_all(2, [1, 2, 3])) == [(1, 2), (3,)]
    assert list(partition_all(2, iter([1, 2, 3, 4]))) == [(1, 2), (3, 4)]


def test_sentinel_string_in_data():
    assert list(partition_all(2, ["a", "__no__pad__"])) == [("a", "__no__pad__")]
    assert list(partition_all(2, iter(["a", "b", "__no__pad__"]))) == [("a", "b"), ("__no__pad__",)]


def test_sentinel_string_as_pad():
    assert list(partition(2, [1, 2, 3], pad="__no__pad__")) == [(1, 2), (3, "__no__pad__")]

import asyncio

from agroup import groupby


def groups(iterable):
    async def collect():
        return [(k, list(g)) async for k, g in groupby(iterable)]

    return asyncio.run(collect())


def test_groups():
    assert groups([1, 1, 2, 3, 3]) == [(1, [1, 1]), (2, [2]), (3, [3, 3])]


def test_empty_list():
    assert groups([]) == []


def test_empty_async_iterable():
    async def nothing():
        return
        yield

    assert groups(nothing()) == []

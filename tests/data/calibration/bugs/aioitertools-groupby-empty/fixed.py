"""Async groupby (re-created from aioitertools' groupby before its PR #39)."""


async def _aiter(iterable):
    if hasattr(iterable, "__aiter__"):
        async for item in iterable:
            yield item
    else:
        for item in iterable:
            yield item


async def groupby(iterable, key=None):
    if key is None:
        key = lambda x: x  # noqa: E731
    it = _aiter(iterable).__aiter__()
    try:
        item = await it.__anext__()
    except StopAsyncIteration:
        return
    grouping = [item]
    current = key(item)
    async for item in it:
        k = key(item)
        if k != current:
            yield current, grouping
            grouping = [item]
            current = k
        else:
            grouping.append(item)
    yield current, grouping

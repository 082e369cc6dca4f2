"""Partition sequences into tuples (re-created from toolz.itertoolz at toolz PR #639)."""

from itertools import zip_longest

no_pad = "__no__pad__"


def partition(n, seq, pad=no_pad):
    args = [iter(seq)] * n
    if pad is no_pad:
        return zip(*args)
    return zip_longest(*args, fillvalue=pad)


def partition_all(n, seq):
    args = [iter(seq)] * n
    it = zip_longest(*args, fillvalue=no_pad)
    try:
        prev = next(it)
    except StopIteration:
        return
    for item in it:
        yield prev
        prev = item
    if prev[-1] is no_pad:
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if prev[mid] is no_pad:
                hi = mid
            else:
                lo = mid + 1
        yield prev[:lo]
    else:
        yield prev

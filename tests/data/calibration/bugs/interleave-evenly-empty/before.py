"""Interleave iterables evenly (re-created from more-itertools at issue #1192)."""


def interleave_evenly(iterables, lengths=None):
    if lengths is None:
        try:
            lengths = [len(it) for it in iterables]
        except TypeError:
            raise ValueError("Iterable lengths could not be determined automatically.")
    if len(iterables) != len(lengths):
        raise ValueError("Mismatching number of iterables and lengths.")

    dims = len(lengths)
    order = sorted(range(dims), key=lambda i: lengths[i], reverse=True)
    lengths_desc = [lengths[i] for i in order]
    iters_desc = [iter(iterables[i]) for i in order]

    delta_primary, deltas_secondary = lengths_desc[0], lengths_desc[1:]
    iter_primary, iters_secondary = iters_desc[0], iters_desc[1:]
    errors = [delta_primary // dims] * len(deltas_secondary)

    to_yield = sum(lengths)
    while to_yield:
        yield next(iter_primary)
        to_yield -= 1
        errors = [e - delta for e, delta in zip(errors, deltas_secondary)]
        for i, e in enumerate(errors):
            if e < 0:
                yield next(iters_secondary[i])
                to_yield -= 1
                errors[i] += delta_primary

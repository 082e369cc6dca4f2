"""File sizes for people (re-created from humanize's naturalsize before jmoiron/humanize#122)."""

SUFFIXES = {
    "decimal": ("kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"),
    "binary": ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"),
}


def naturalsize(value, binary=False, format="%.1f"):
    suffix = SUFFIXES["binary" if binary else "decimal"]
    base = 1024 if binary else 1000
    size = float(value)
    if size == 1:
        return "%d Byte" % size
    if abs(size) < base:
        return "%d Bytes" % size
    for i, s in enumerate(suffix):
        unit = base ** (i + 2)
        if size < unit:
            return (format + " %s") % ((base * size / unit), s)
    return (format + " %s") % ((base * size / unit), s)

"""File sizes for people (re-created from humanize's naturalsize at python-humanize/humanize#239)."""

DECIMAL = ("kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")
GNU = "KMGTPEZY"


def naturalsize(value, gnu=False, format="%.1f"):
    suffix = GNU if gnu else DECIMAL
    base = 1024 if gnu else 1000
    size = float(value) if isinstance(value, str) else value
    abs_size = abs(size)
    if abs_size == 1 and not gnu:
        return f"{int(size)} Byte"
    if abs_size < base and not gnu:
        return f"{int(size)} Bytes"
    if abs_size < base and gnu:
        return f"{int(size)}B"
    for i, s in enumerate(suffix):
        unit = base ** (i + 2)
        if abs_size < unit:
            break
    scaled = format % (base * size / unit)
    return scaled + s if gnu else f"{scaled} {s}"

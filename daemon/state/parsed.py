"""State files parsed once for a long-lived reader: the console (`loopd web`, `[listen] ui`)
reads the same run records request after request, and parsing a run.toml (tomllib, about
1 ms of CPU) was most of a runs page. Kept by the file's bytes, so a changed file is parsed
again; each reader gets its own copy. Off (every read parses) unless `keep_parsed` is called:
the one-shot commands gain nothing from it."""

from __future__ import annotations

import copy
import threading
import tomllib
from collections import OrderedDict
from typing import Any

_lock = threading.Lock()
_kept: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
_most = 0  # entries kept; 0: off


def keep_parsed(entries: int) -> None:
    """Keep up to `entries` parsed files from now on, the least recently read dropped first
    (0: none, every read parses)."""
    global _most
    with _lock:
        _most = entries
        while len(_kept) > _most:
            _kept.popitem(last=False)


def parse_toml(data: bytes) -> dict[str, Any]:
    """`data` (a TOML file's bytes) parsed: from what is kept when the same bytes were parsed."""
    if not _most:
        return tomllib.loads(data.decode("utf-8"))
    with _lock:
        found = _kept.get(data)
        if found is not None:
            _kept.move_to_end(data)
    if found is None:
        found = tomllib.loads(data.decode("utf-8"))
        with _lock:
            _kept[data] = found
            while len(_kept) > _most:
                _kept.popitem(last=False)
    # A copy: a model may hold the parsed lists and tables, and its reader may change them.
    return copy.deepcopy(found)

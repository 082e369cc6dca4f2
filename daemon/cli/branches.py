"""`loopd branches`: the run branches in the loops' repositories, and pruning them."""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii
from typing import Any

from daemon.cli.common import CommandError, console, home_of
from daemon.cli.jsonout import json_value
from daemon.clock import utc_now
from daemon.landing.branches import list_branches, prune_branches


def branches(args: argparse.Namespace) -> int:
    """List run branches (outcome, +/- lines, landed); --prune deletes landed and expired ones."""
    # The listing makes objects by the hundred thousand and frees them at exit: the cyclic
    # collector only walked them over and over (70 ms at 10,000 branches), so it waits.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _branches(args)
    finally:
        if collecting:
            gc.enable()


def _branches(args: argparse.Namespace) -> int:
    home = home_of(args)
    loaded = home.load()
    repos = {name: loop.config.repo_path for name, loop in loaded.loops.items()}
    if args.loop and args.loop not in repos:
        raise CommandError(f"unknown loop {args.loop!r}; known loops: {', '.join(repos) or 'none'}")
    store = home.state(loaded.daemon.limits.events_rotate)
    rows = list_branches(store, repos, utc_now(), args.loop or "")
    deleted = []
    if args.prune:
        retain = loaded.daemon.limits.retain_days
        deleted = prune_branches(store, rows, retain, utc_now())
        gone = {row.branch for row in deleted}
        rows = [row for row in rows if row.branch not in gone]
    if args.json:
        sys.stdout.write(
            json_text(
                {
                    # Its fields are plain values, read as they are: asdict's deep copies
                    # took 0.3 s at 10,000 (json_text changes nothing it is given).
                    "branches": [vars(row) for row in rows],
                    "deleted": [row.branch for row in deleted],
                }
            )
        )
        return 0
    lines = [f"deleted {row.branch} ({'landed' if row.landed else 'expired'})" for row in deleted]
    if not rows:
        lines.append("No run branches." if not deleted else "No other run branches.")
    for row in rows:
        state = "running" if row.live else (row.landing or "no record")
        lines.append(
            f"{row.branch}  {row.outcome or '(no record)'}  "
            f"+{row.added} -{row.removed}  {state}  {row.repo}"
        )
    _print_lines(lines)
    return 0


# What rich would change in a line printed to a pipe: control characters (stripped, tabs
# expanded) and emoji codes (`:name:`, as `:\S*?:` finds them); a line without them is printed
# as it is. A search for each control character and one for `:` are milliseconds at 10,000
# lines where one pattern for both took tens.
_CONTROL = "".join(map(chr, [*range(0x00, 0x0A), *range(0x0B, 0x20), 0x7F]))
_EMOJI_CODE = re.compile(r":[^\s:]*:")  # matches where `:\S*?:` does


def _rich_changes(text: str) -> bool:
    """Whether rich would print `text` to a pipe otherwise than it is."""
    return any(c in text for c in _CONTROL) or _EMOJI_CODE.search(text) is not None


HIGHLIGHT_MAX = 1000  # lines rich colours in a terminal; past it highlighting takes seconds


def _maybe_terminal() -> bool:
    """Whether rich could take stdout for a terminal (rich itself is not imported for a pipe)."""
    if os.environ.get("TTY_COMPATIBLE", "") or os.environ.get("FORCE_COLOR") is not None:
        return True
    try:
        return sys.stdout.isatty()
    except ValueError:
        return False


def _print_lines(lines: list[str]) -> None:
    """The lines as rich prints them (soft-wrapped, highlighted in a terminal), in one write:
    rich takes milliseconds a line, seconds at 10,000 branches."""
    text = "\n".join(lines)
    if not _maybe_terminal() and not _rich_changes(text):
        sys.stdout.write(text + "\n")  # what rich writes to a pipe, byte for byte
        return
    out = console()
    from rich.markup import escape

    if not out.is_terminal:
        out.print(text, soft_wrap=True, markup=False, highlight=False, emoji=True)
        return
    highlight = len(lines) <= HIGHLIGHT_MAX
    out.print("\n".join(escape(line) for line in lines), soft_wrap=True, highlight=highlight)


def json_text(value: dict[str, list[Any]]) -> str:
    """What print_json prints for {key: [flat dict or scalar, ...]}, byte for byte, with the C
    encoder for each string: json.dump with an indent encodes in Python, a second at 10,000
    rows, and a json.dumps per value costs as much again."""
    parts = ["{"]
    for i, (key, items) in enumerate(value.items()):
        head = f"\n  {_scalar(key)}: "
        if not items:
            parts.append(head + "[]")
        else:
            rendered = _objects(items)
            if rendered is None:
                rendered = [_item(item) for item in items]
            parts.append(head + "[" + ",".join(rendered) + "\n  ]")
        parts.append("," if i < len(value) - 1 else "")
    return "".join(parts) + "\n}\n"


def _item(item: Any) -> str:
    if isinstance(item, dict) and item:
        fields = ",".join(f"\n      {_scalar(k)}: {_scalar(v)}" for k, v in item.items())
        return "\n    {" + fields + "\n    }"
    return "\n    " + _scalar(item)


_BOOLS = {True: "true", False: "false"}


def _objects(items: list[Any]) -> list[str] | None:
    """The items rendered a column at a time, when they are dicts with the same keys (the rows
    of a listing): each column's values through one C call when they are of one plain type.
    None for other items."""
    first = items[0]
    if type(first) is not dict or not first:
        return None
    keys = tuple(first)
    if not all(type(item) is dict and tuple(item) == keys for item in items):
        return None
    columns = []
    for key in keys:
        values = [item[key] for item in items]
        kinds = set(map(type, values))
        if kinds == {str}:
            columns.append(list(map(encode_basestring_ascii, values)))
        elif kinds == {bool}:
            columns.append(list(map(_BOOLS.__getitem__, values)))
        elif kinds == {int}:
            columns.append(list(map(int.__repr__, values)))
        else:
            columns.append(list(map(_scalar, values)))
    names = (f"\n      {_scalar(key).replace('%', '%%')}: %s" for key in keys)
    template = "\n    {" + ",".join(names) + "\n    }"
    return [template % row for row in zip(*columns, strict=True)]


def _scalar(item: Any) -> str:
    """What json.dumps(item, default=json_value) gives for one value."""
    kind = type(item)
    if kind is str:
        return encode_basestring_ascii(item)  # what json.dumps does with ensure_ascii
    if kind is bool:
        return "true" if item else "false"
    if kind is int:
        return int.__repr__(item)
    if item is None:
        return "null"
    if isinstance(item, str):
        return encode_basestring_ascii(item)  # a StrEnum is encoded as its string
    if kind is datetime:
        if item.tzinfo is UTC:  # what json_value makes of it, without converting it
            return f'"{item.isoformat()[:-6]}Z"'
        return encode_basestring_ascii(json_value(item))  # the string default gives
    return json.dumps(item, default=json_value)

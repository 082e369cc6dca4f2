"""`loopd branches`: the run branches in the loops' repositories, and pruning them."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from daemon.cli.common import CommandError, console, home_of
from daemon.cli.jsonout import json_value
from daemon.clock import utc_now
from daemon.landing.branches import list_branches, prune_branches


def branches(args: argparse.Namespace) -> int:
    """List run branches (outcome, +/- lines, landed); --prune deletes landed and expired ones."""
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
                    # Its fields are plain values: asdict's deep copies took 0.3 s at 10,000.
                    "branches": [dict(vars(row)) for row in rows],
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
# expanded) and emoji codes (`:name:`); a line without them is printed as it is.
_RICH_CHANGES = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]|:\S*?:")
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
    if not _maybe_terminal() and not _RICH_CHANGES.search(text):
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
    encoder for each value: json.dump with an indent encodes in Python, a second at 10,000
    rows."""

    def scalar(item: Any) -> str:
        if isinstance(item, str):
            return encode_basestring_ascii(item)  # what json.dumps does with ensure_ascii
        if item is True or item is False or item is None:
            return "true" if item else "false" if item is False else "null"
        if type(item) is int:
            return int.__repr__(item)
        return json.dumps(item, default=json_value)

    parts = ["{"]
    for i, (key, items) in enumerate(value.items()):
        head = f"\n  {scalar(key)}: "
        if not items:
            parts.append(head + "[]")
        else:
            rendered = []
            for item in items:
                if isinstance(item, dict) and item:
                    fields = ",".join(f"\n      {scalar(k)}: {scalar(v)}" for k, v in item.items())
                    rendered.append("\n    {" + fields + "\n    }")
                else:
                    rendered.append("\n    " + scalar(item))
            parts.append(head + "[" + ",".join(rendered) + "\n  ]")
        parts.append("," if i < len(value) - 1 else "")
    return "".join(parts) + "\n}\n"

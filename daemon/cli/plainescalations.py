"""`loopd escalations [list]` by the plain path: the escalation files read without the
models (daemon/plain/escalations.py), printed by `print_list`, which the full path
(cli/escalations.py) prints with too. Another engine, `show`, `resolve`, or a file only the
model can read: None, and the full path answers."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC
from typing import Any

from daemon.cli.jsonout import print_json
from daemon.homepath import HomeNotFound, home_path
from daemon.people.terminal import clean
from daemon.plain.escalations import json_fields, list_escalations
from daemon.plain.home import reads_own_state

LIST = "escalations:list_escalations_cmd"


def list_plain(args: argparse.Namespace) -> int | None:
    """`loopd escalations [list] [--all] [--json]` from the home's own escalation files."""
    if getattr(args, "func", None) != LIST:
        return None  # show, resolve: the full path
    try:
        root = home_path(getattr(args, "home", None))
    except HomeNotFound:
        return None  # the full path says so
    if not reads_own_state(root):
        return None
    items = list_escalations(root / "state")
    if items is None:
        return None
    show_all = getattr(args, "all", False)
    if not show_all:
        items = [e for e in items if e["status"] == "open"]
    if getattr(args, "json", False):
        print_json([json_fields(e) for e in items])
    else:
        print_list(items, show_all)
    return 0


def print_list(items: list[dict[str, Any]], show_all: bool) -> None:
    """What `loopd escalations list` prints of `items` (each escalation's fields, as the
    model dumps them), rendered whole by rich, then written at once."""
    from rich.console import Console

    out = Console()
    with out.capture() as captured:
        if not items:
            out.print("None." if show_all else "No escalations waiting.")
        # Plain lines, not a table: run ids must stay whole so they can be copied.
        for e in items:
            out.print(listed(e), highlight=False, markup=False, soft_wrap=True)
    sys.stdout.write(captured.get())


def listed(e: dict[str, Any]) -> str:
    """One escalation's line."""
    when = e["escalated"].astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")
    reason = " ".join(clean(e["reason"]).split())
    if e["count"] > 1:
        reason += f" (escalated {e['count']} times, latest run {e['latest_run']})"
    return f"{e['run']}  {e['status']:<10} {when}  {e['cause']:<15} {reason}"

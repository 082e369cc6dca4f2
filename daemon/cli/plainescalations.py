"""`loopd escalations [list]` and `escalations show` by the plain path: the escalation files
read without the models (daemon/plain/escalations.py), printed by `print_list` and
`print_shown`, which the full path (cli/escalations.py) prints with too. Another engine,
`resolve`, an escalation not found, or a file only the model can read: None, and the full
path answers (and says what is wrong)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC
from pathlib import Path
from typing import Any

from daemon.cli.jsonout import print_json
from daemon.homepath import HomeNotFound, home_path
from daemon.people.terminal import clean
from daemon.plain.escalations import (
    escalation,
    escalation_file,
    json_fields,
    list_escalations,
    read_front_matter,
)
from daemon.plain.home import reads_own_state
from daemon.plain.records import Unsure

LIST = "escalations:list_escalations_cmd"
SHOW = "escalations:show_escalation_cmd"


def _own_state(args: argparse.Namespace, func: str) -> Path | None:
    """The home's `state/` when the command is `func` and reads it itself; else None."""
    if getattr(args, "func", None) != func:
        return None  # resolve (its parser inherits the list's plain path): the full path
    try:
        root = home_path(getattr(args, "home", None))
    except HomeNotFound:
        return None  # the full path says so
    return root / "state" if reads_own_state(root) else None


def list_plain(args: argparse.Namespace) -> int | None:
    """`loopd escalations [list] [--all] [--json]` from the home's own escalation files."""
    state_dir = _own_state(args, LIST)
    if state_dir is None:
        return None
    try:
        items = list_escalations(state_dir)
    except Unsure:
        return None
    show_all = getattr(args, "all", False)
    if not show_all:
        items = [e for e in items if e["status"] == "open"]
    if getattr(args, "json", False):
        print_json([json_fields(e) for e in items])
    else:
        print_list(items, show_all)
    return 0


def show_plain(args: argparse.Namespace) -> int | None:
    """`loopd escalations show RUN_ID [--json]` from the home's own escalation file."""
    state_dir = _own_state(args, SHOW)
    if state_dir is None:
        return None
    path = escalation_file(state_dir, args.run_id)
    data = read_front_matter(path) if path is not None else None
    if path is None or data is None:
        return None  # not found: the full path says where it counts, or what to list
    try:
        fields = escalation(data)
    except Unsure:
        return None
    if fields is None:
        return None
    fields["id"] = fields["id"] or path.stem
    text = path.read_text(encoding="utf-8")
    if args.json:
        print_json({**json_fields(fields), "text": text})
    else:
        print_shown(text)
    return 0


def print_list(items: list[dict[str, Any]], show_all: bool) -> None:
    """What `loopd escalations list` prints of `items` (each escalation's fields, as the
    model dumps them), written at once. Plain lines, not a table, and not rich: run ids
    stay whole to be copied, an agent's words are shown as written (no `:emoji:` codes
    turned into pictures), and the command answers without rich's import."""
    lines = [listed(e) for e in items]
    if not items:
        lines = ["None." if show_all else "No escalations waiting."]
    sys.stdout.write("".join(line + "\n" for line in lines))


def listed(e: dict[str, Any]) -> str:
    """One escalation's line."""
    when = e["escalated"].astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")
    reason = " ".join(clean(e["reason"]).split())
    if e["count"] > 1:
        reason += f" (escalated {e['count']} times, latest run {e['latest_run']})"
    return f"{e.get('id') or e['run']}  {e['status']:<10} {when}  {e['cause']:<15} {reason}"


def print_shown(text: str) -> None:
    """What `loopd escalations show` prints of an escalation file's `text`: its body,
    rendered as Markdown on a terminal."""
    body = clean(text.split("\n+++\n", 1)[1] if text.startswith("+++\n") else text)
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(body))
    else:
        sys.stdout.write(body)

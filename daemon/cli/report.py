"""`loopd report`: what happened: runs, outcomes, rules learned, escalations waiting."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.cli.common import CommandError, command, console, home_of, print_json
from daemon.clock import utc_now


def report_cmd(args: argparse.Namespace) -> int:
    """What happened since --since (default 12h): runs, outcomes, rules learned, escalations."""
    from daemon.people.report import build_report, render_rich, write_report
    from daemon.units import parse_duration

    try:
        window = parse_duration(args.since)
    except ValueError as exc:
        raise CommandError(f"--since: {exc}") from None
    home = home_of(args)
    store = home.state()
    now = utc_now()
    report = build_report(store, now - window, now, home.rules_dir)
    write_report(store, report)
    if args.json:
        print_json(report.model_dump(mode="json"))
    else:
        render_rich(report, console())
    return 0


def register(sub: Any) -> None:
    parser = command(sub, "report", report_cmd, json_flag=True)
    parser.add_argument("--since", default="12h", help="how far back, such as 12h or 2d")

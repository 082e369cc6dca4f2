"""What `status`, `runs`, `show` and `trigger` print when an engine (not state/) holds the runs."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.cli.common import CommandError, console, print_json


def show_status(control: Any, args: argparse.Namespace) -> int:
    """Loops on the engine, each machine polling it, next fires from the server."""
    import time

    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    def frame() -> Any:
        data = control.status()
        engine = data["engine"]
        homes = [w["seen"] for w in data["workers"] if w["queue"] == engine["task_queue"]]
        polled = f"the home's loopd run last polled at {max(homes)}" if homes else ""
        head = Text(
            f"engine: temporal at {engine['address']}, namespace {engine['namespace']}; "
            + (polled or "no loopd run polls the home's queue"),
            style=None if polled else "yellow",
        )
        loops = Table(title=data["home"])
        for col in (
            "loop",
            "phase",
            "run",
            "attempt",
            "worker",
            "last outcome",
            "next fire",
            "pending",
        ):
            loops.add_column(col)
        for name, info in data["loops"].items():
            phase = info["phase"] if info.get("enabled", True) else "disabled"
            loops.add_row(
                name,
                phase,
                info["run"],
                str(info["attempt"] or ""),
                info["worker"],
                f"{info['last_outcome']} {info['last_run']}".strip(),
                str(info["next_fire"] or ""),
                str(info["pending"] or ""),
            )
        machines = Table(title="polling the engine")
        for col in ("queue", "worker", "last seen"):
            machines.add_column(col)
        for poller in data["workers"]:
            machines.add_row(poller["queue"], poller["identity"], poller["seen"])
        parts: list[Any] = [head, loops, machines]
        parts += [Text(f"warning: {w}", style="yellow") for w in data["daemon"]["warnings"]]
        parts += [Text(f"error: {e}", style="red") for e in data["errors"]]
        return data, Group(*parts)

    if args.json:
        print_json(frame()[0])
        return 0
    out = console()
    if not args.watch:
        out.print(frame()[1])
        return 0
    try:
        while True:
            out.print(frame()[1])
            time.sleep(2)
    except KeyboardInterrupt:
        return 0


def show_runs(control: Any, args: argparse.Namespace) -> int:
    """Every machine's runs from the engine, newest first."""
    from rich.table import Table

    rows = control.runs(args.loop, args.limit)
    if args.json:
        print_json(rows)
        return 0
    table = Table(title=f"runs on the engine ({control.engine.address})")
    for col in ("run", "trigger", "outcome", "attempts", "score", "reason"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["id"],
            r["trigger"],
            r["outcome"] or r["phase"],
            str(r["attempts"]),
            "-" if r["score"] is None else str(r["score"]),
            r["reason"],
        )
    console().print(table)
    return 0


def engine_record(control: Any, run_id: str) -> Any:
    """The run's record from the engine, or a usage error for a queued or unknown run."""
    record = control.record(run_id)
    if record == "queued":
        raise CommandError(f"run {run_id} is queued and has no record yet", code=1)
    if record is None:
        raise CommandError(f"unknown run {run_id!r}; `loopd runs` lists them")
    return record


def trigger_on_engine(control: Any, args: argparse.Namespace) -> int:
    """`loopd trigger` through the loop's controller; --wait follows the run to its end."""
    from daemon.cli.runs import _print_outcome, exit_code

    def emit(run_id: str) -> None:
        print(run_id, flush=True)

    reason = args.reason or "loopd trigger"
    result = control.trigger(args.loop, reason, args.wait, emit)
    if not args.wait:
        print(f"queued {result} for {args.loop} (engine at {control.engine.address})")
        return 0
    if isinstance(result, str):
        print(f"trigger was {result}")
        return 1
    _print_outcome(result)
    return exit_code(result)

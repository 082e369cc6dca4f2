"""What `status`, `runs`, `show` and `trigger` print when an engine (not state/) holds the runs."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from daemon.cli.common import CommandError, console
from daemon.cli.jsonout import print_json
from daemon.cli.runlines import runs_table
from daemon.cli.runview import exit_code, print_outcome
from daemon.cli.textout import Terminal


def show_status(control: Any, args: argparse.Namespace) -> int:
    """Loops on the engine, each machine polling it, next fires from the server."""
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
            style="" if polled else "yellow",
        )
        rows: list[tuple[str, ...]] = []
        for name, info in data["loops"].items():
            phase = info["phase"] if info.get("enabled", True) else "disabled"
            if info.get("waiting_for"):
                phase += f" ({info['waiting_for']})"
            rows.append(
                (
                    name,
                    phase,
                    info["run"] or info["last_run"],
                    str(info["attempt"] or ""),
                    info["worker"],
                    info["last_outcome"],
                    str(info["next_fire"] or ""),
                    str(info["pending"] or ""),
                )
            )
        loops = _loops_table(data["home"], rows, console().width)
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


def _loops_table(title: str, rows: list[tuple[str, ...]], width: int) -> Any:
    """The loops as a table whose RUN_IDs are never wrapped or cut (what a person copies);
    too narrow for that, one block per loop with the RUN_ID on a line of its own."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    columns = ("loop", "phase", "run", "attempt", "worker", "last outcome", "next fire", "pending")
    run_width = max([3, *(len(r[2]) for r in rows)])
    if run_width + 8 * len(columns) + 3 * len(columns) + 1 <= width:
        table = Table(title=title)
        for col in columns:
            if col == "run":
                table.add_column(col, no_wrap=True, min_width=run_width)
            else:
                table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*row)
        return table
    parts: list[Any] = [Text(title, style="bold")]
    for name, phase, run, attempt, worker, outcome, fire, pending in rows:
        line = f"{name}  {phase}" + (f" (attempt {attempt})" if attempt else "")
        line += f" on {worker}" if worker else ""
        line += f", last {outcome}" if outcome else ""
        line += f", {pending} queued" if pending else ""
        parts.append(Text(line + (f"; next fire {fire}" if fire else "")))
        if run:
            parts.append(Text(f"  run {run}", no_wrap=True, overflow="ignore"))
    return Group(*parts)


def show_runs(control: Any, args: argparse.Namespace) -> int:
    """Every machine's runs from the engine, newest first."""

    rows = control.runs(args.loop, args.limit)
    if args.json:
        print_json(rows)
        return 0
    shown = [
        (
            r["run"],
            r["trigger"],
            r["outcome"] or r["phase"],
            str(r["attempts"]),
            "-" if r["score"] is None else str(r["score"]),
            r["reason"] or "",
        )
        for r in rows
    ]
    sys.stdout.write(
        runs_table(f"runs on the engine ({control.engine.address})", shown, Terminal.of())
    )
    return 0


def engine_record(control: Any, run_id: str) -> Any:
    """The run's record from the engine, or a usage error for a queued or unknown run."""
    record = control.record(run_id)
    if record == "queued":
        raise CommandError(f"run {run_id} is queued and has no record yet", code=1)
    if record is None:
        raise CommandError(f"unknown run {run_id!r}; `loopd runs` lists them")
    return record


def report_routed(control: Any, loop: str, run_id: str) -> int:
    """Print the RUN_ID the loop's controller gave a trigger, on the first line."""
    if run_id.startswith("skipped"):
        print(f"the engine skipped the trigger for {loop}: {run_id.partition(': ')[2]}")
        return 1
    if not run_id:
        print(
            f"queued for {loop}; its controller has not taken the trigger yet: `loopd runs "
            f"{loop}` lists the run with its RUN_ID once it has"
        )
        return 0
    print(run_id, flush=True)
    print(
        f"queued for {loop} (engine at {control.engine.address}); `loopd logs {run_id} -f` "
        "follows it on the machine that runs it"
    )
    return 0


def trigger_on_engine(control: Any, args: argparse.Namespace) -> int:
    """`loopd trigger` through the loop's controller; --wait follows the run to its end."""

    def emit(run_id: str) -> None:
        print(run_id, flush=True)

    reason = args.reason or "loopd trigger"
    result = control.trigger(args.loop, reason, args.wait, emit, force=args.force)
    if not args.wait:
        return report_routed(control, args.loop, result)
    if isinstance(result, str):
        print(f"trigger was {result}")
        return 1
    print_outcome(result)
    return exit_code(result)

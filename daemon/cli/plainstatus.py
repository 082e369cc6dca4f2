"""`loopd status` by the plain path: the configuration's facts kept by the last full `status`
(plain/statusfacts.py) and `state/` read as plain TOML, built and rendered by the same code as
the full path (cli/statusdata.py, cli/statusview.py). None, and the full path answers, when
the facts are not kept for the files as they are now, another engine holds the runs, or a
file is one the models might refuse."""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path
from typing import Any

from daemon.cli.jsonout import print_json
from daemon.cli.statusdata import status_data
from daemon.cli.statusview import render_status
from daemon.cli.textout import Terminal
from daemon.homepath import HomeNotFound, home_path
from daemon.plain.escalations import open_escalations
from daemon.plain.home import daemon_pid, reads_own_state
from daemon.plain.records import Unsure, listing, read_status, read_usage, run_outline
from daemon.plain.statusfacts import read_facts
from daemon.state.runids import listed_run_ids, loop_of


def _same_task(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


class PlainReader:
    """`state/` for `status` as plain TOML (cli/statusdata.StatusReader); Unsure where the
    models might read a file otherwise."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._open: list[dict[str, Any]] | None = None

    def status(self) -> dict[str, Any]:
        return read_status(self.state_dir)

    def paused(self) -> set[str]:
        return set(listing(self.state_dir / "paused"))

    def newest(self, loops: set[str]) -> dict[str, str]:
        newest: dict[str, str] = {}
        for run_id in reversed(listed_run_ids(self.state_dir / "runs")):
            newest.setdefault(loop_of(run_id), run_id)
            if loops <= newest.keys():
                break  # ids sort by time: the rest are older
        return newest

    def newest_finished(self, loop: str, newest: str) -> tuple[str, str] | None:
        try:
            run = run_outline(self.state_dir, newest)
        except FileNotFoundError:
            return None  # being written: shown next time
        if run["outcome"] is not None:
            return run["id"], run["outcome"]
        for run_id in reversed(listed_run_ids(self.state_dir / "runs", loop)):
            try:
                run = run_outline(self.state_dir, run_id)
            except FileNotFoundError:
                continue
            if run["outcome"] is not None:
                return run["id"], run["outcome"]
        return None

    def live(self) -> dict[str, tuple[str, str, int]]:
        live: dict[str, tuple[str, str, int]] = {}
        for run_id in listing(self.state_dir / "live"):
            try:
                run = run_outline(self.state_dir, run_id)
            except FileNotFoundError:
                continue  # being written: shown next time
            live[run["loop"]] = (run["phase"], run["id"], run["n"])
        return live

    def has_escalation_files(self) -> bool:
        return any(n.endswith(".md") for n in listing(self.state_dir / "escalations"))

    def open_escalations(self) -> list[dict[str, Any]]:
        if self._open is None:
            self._open = open_escalations(self.state_dir)
        return self._open

    def held(self, tasks: dict[str, str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for loop, task in tasks.items():
            for meta in self.open_escalations():
                if meta["loop"] != loop:
                    continue
                if not _same_task(meta["task"], task):
                    # The full path compares the redacted task too: the redaction rules
                    # are not plain reading.
                    raise Unsure("an escalation's task differs from its loop's")
                out[loop] = meta["run"]
                break
        return out

    def usage(self) -> dict[str, Any] | None:
        return read_usage(self.state_dir)

    def landing_queues(self) -> list[dict[str, Any]]:
        queues = []
        for name in listing(self.state_dir / "landing"):
            if not name.endswith(".toml"):
                continue
            try:
                queue = tomllib.loads((self.state_dir / "landing" / name).read_text("utf-8"))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                raise Unsure(f"state/landing/{name}: {exc}") from None
            runs = queue.get("runs")
            if not isinstance(runs, list) or not all(
                isinstance(r, dict) and isinstance(r.get("run_id"), str) for r in runs
            ):
                raise Unsure(f"state/landing/{name} is not a landing queue the plain path reads")
            if runs:
                queues.append(queue)
        return queues


def status(args: argparse.Namespace) -> int | None:
    """`loopd status [--json]` by the plain path; None: the full path answers."""
    if args.watch:
        return None
    try:
        root = home_path(getattr(args, "home", None))
    except HomeNotFound:
        return None  # the full path says why
    if not reads_own_state(root):
        return None
    facts = read_facts(root)
    if facts is None:
        return None
    try:
        data = status_data(root, facts, PlainReader(root / "state"), daemon_pid(root / "state"))
    except Unsure:
        return None
    if args.json:
        print_json(data)
        return 0
    sys.stdout.write(render_status(data, Terminal.of()))
    return 0

"""Ctrl-C on `loopd run` says at once what it waits for, and a second Ctrl-C stops at once.

Reproduces a stop that said nothing for the whole grace (23 s in a user's try) and never
said that a second Ctrl-C stops at once. `loopd run` as a real process, a real agent that
ignores SIGTERM with a child of its own, real SIGINTs; a real restart finishes the run.
The stopped daemon is waited for with a bound far below the grace it would otherwise take.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path
from typing import Any

from tests.helpers import (
    daemon_log,
    loopd,
    make_home,
    make_repo,
    processes_with,
    runs,
    start_daemon,
    talk,
    unique_token,
    wait_for,
)
from tests.test_daemon import BUGGY, loop_text

GRACE = 600  # seconds: far past any wait here, so only a second Ctrl-C can end it soon
WAIT = 60  # seconds a test waits for the daemon after the second Ctrl-C (5 s at most)


def stubborn_agent(started: Path, token: str) -> str:
    """An agent that ignores SIGTERM and keeps a child (named by `token`) beside it."""
    script = (
        "import pathlib, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)', {token!r}])\n"
        f"pathlib.Path({str(started)!r}).write_text('x')\n"
        "time.sleep(3600)\n"
    )
    return (
        '[agents.fixer]\nadapter = "command"\n'
        f"command = {json.dumps([sys.executable, '-c', script])}\n"
    )


def test_ctrl_c_says_what_it_waits_for_and_a_second_one_stops_at_once(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    shared, sandbox = talk(tmp_path)
    started = shared / "started"
    token = unique_token("stubborn", tmp_path)
    config = (
        stubborn_agent(started, token)
        + sandbox
        + f'[limits]\nshutdown_grace = "{GRACE}s"\nworktrees = "{tmp_path / "wt"}"\n'
    )
    home = make_home(tmp_path / "home", config, {"calc": loop_text(repo, max_attempts=1)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    proc = loopd(home, "trigger", "calc", "--reason", "to be stopped")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    wait_for(started.exists, timeout=60, what="the agent to start")
    wait_for(lambda: processes_with(token), what="the agent's child")

    daemon.send_signal(signal.SIGINT)
    # At once: the runs it waits for by id, the seconds left, and how to stop at once.
    said = wait_for(
        lambda: re.search(
            r"loopd: stopping: waiting for run (\S+) \((\d+)s of shutdown_grace left.*",
            daemon_log(home),
        ),
        what="the first Ctrl-C's line",
    )
    assert said.group(1) == run_id, said.group(0)
    assert 0 < int(said.group(2)) <= GRACE, said.group(0)
    assert "Ctrl-C again stops at once" in said.group(0), said.group(0)
    assert daemon.poll() is None  # it waits: the agent ignores SIGTERM
    assert processes_with(token)

    daemon.send_signal(signal.SIGINT)
    # In order, not by the stop deadline's kill (exit 1): the processes died at once.
    assert daemon.wait(timeout=WAIT) == 0, daemon_log(home)
    log = daemon_log(home)
    assert re.search(rf"loopd: stopping at once: killing run {run_id}", log), log
    assert log.rstrip().endswith("loopd: stopped"), log
    # The agent's process group is gone, its child with it.
    assert processes_with(token) == []
    (ended,) = runs(home)
    assert ended["outcome"] == "interrupted", ended
    # A restart finishes what the stop left: the run is retried.
    daemon = start_daemon(home)
    daemons.append(daemon)
    retried = wait_for(
        lambda: [r for r in runs(home) if r["trigger"].get("retry_of") == run_id],
        what="its retry",
    )
    assert retried
    # The retry's agent is as stubborn: two Ctrl-C again, and nothing is left behind.
    wait_for(lambda: processes_with(token), what="the retry's agent")
    daemon.send_signal(signal.SIGINT)
    wait_for(lambda: daemon_log(home).count("loopd: stopping: waiting") == 2, what="the line")
    daemon.send_signal(signal.SIGINT)
    assert daemon.wait(timeout=WAIT) == 0, daemon_log(home)
    assert processes_with(token) == []


class _Thread:
    def __init__(self, alive: bool) -> None:
        self.alive = alive

    def is_alive(self) -> bool:
        return self.alive


def test_the_lines_count_the_grace_down_and_name_the_runs_still_live() -> None:
    """What the driver prints every few seconds: the live runs by id and the seconds left of
    the agents' grace, then (no run live) the seconds left of the whole stop."""
    from types import SimpleNamespace

    from daemon.service.context import Flags
    from daemon.service.stopdeadline import agent_grace, stop_within
    from daemon.service.stopping import StopWait

    clock = [100.0]
    workers = {
        "a": SimpleNamespace(run_id="r-a", thread=_Thread(True)),
        "b": SimpleNamespace(run_id="r-b", thread=_Thread(True)),
    }
    pool = SimpleNamespace(workers=workers)
    wait = StopWait(pool, Flags(), 30.0, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    first = wait.line(first=True)
    assert first.startswith("loopd: stopping: waiting for runs r-a, r-b (")
    assert f"({agent_grace(30.0):.0f}s of shutdown_grace left" in first
    assert first.endswith("Ctrl-C again stops at once")
    clock[0] += 8
    workers["a"].thread.alive = False
    later = wait.line(first=False)
    assert later.startswith("loopd: still waiting for run r-b (")
    assert f"({agent_grace(30.0) - 8:.0f}s of shutdown_grace left" in later
    workers["b"].thread.alive = False
    last = wait.line(first=False)
    assert f"at most {stop_within(30.0) - 8:.0f}s left" in last and "run" not in last.split("(")[0]


def test_on_the_temporal_engine_a_second_ctrl_c_leaves_no_agent_behind(
    tmp_path: Path, temporal: Any
) -> None:
    """The Temporal home says how to stop at once, and a second Ctrl-C kills what its
    attempts started before it exits (it exited at once, leaving the agents running)."""
    from tests.machines import Machine, engine_toml, loop_toml

    server, namespace = temporal
    root = tmp_path / "machine"
    repo = make_repo(root / "src" / "app", BUGGY)
    shared, sandbox = talk(tmp_path)
    started = shared / "started"
    token = unique_token("stubborn", tmp_path)
    text = (
        stubborn_agent(started, token)
        + sandbox
        + f'[limits]\nshutdown_grace = "{GRACE}s"\nworktrees = "{root / "worktrees"}"\n'
        + engine_toml(server.address, namespace)
    )
    loop = {"task": "Make check.py pass.", "agent": "fixer", "done_when": ["python3 check.py"],
            "max_attempts": 1, "max_nudges": 0, "critic": "off"}  # fmt: skip
    home = make_home(root / "loopd-home", text, {"calc": loop_toml(repo, **loop)})
    machine = Machine("machine", root, home, repo)
    proc = machine.start("run")
    try:
        assert machine.loopd("trigger", "calc").returncode == 0
        wait_for(started.exists, timeout=60, what="the agent to start")
        wait_for(lambda: processes_with(token), what="the agent's child")
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: "Ctrl-C again stops at once" in machine.log.read_text(), what="line")
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=WAIT)
        wait_for(lambda: processes_with(token) == [], what="the agent's group gone")
    finally:
        machine.stop(signal.SIGKILL)

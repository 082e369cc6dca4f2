"""A daemon killed with -9 never releases its runs' control groups: the next start removes
the empty groups of processes that no longer run, and leaves every other group alone."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from daemon.sandbox import limits
from tests.helpers import (
    loopd,
    make_home,
    make_repo,
    start_daemon,
    stop_daemon,
    talk,
    unique_token,
    wait_for,
)
from tests.test_daemon import BUGGY, agent, loop_text


def groups_of(pid: int) -> list[Path]:
    found = limits.backend()
    parents = dict.fromkeys(p for p in (found.pids, found.memory) if p is not None)
    return [g for parent in parents for g in parent.glob(f"loopd-{pid}-*")]


def test_a_killed_daemons_control_groups_are_swept_at_the_next_start(
    tmp_path: Path, daemons: list
) -> None:
    if limits.backend().kind not in ("cgroup1", "cgroup2"):
        pytest.skip(f"no control groups loopd may write here: {limits.backend().why}")
    repo = make_repo(tmp_path / "repo", BUGGY)
    shared, sandbox = talk(tmp_path)
    started = shared / "started"
    token = unique_token("cgsweep", tmp_path)
    script = f"# {token}\nimport pathlib, time\npathlib.Path({str(started)!r}).write_text('x')\n"
    script += "time.sleep(600)\n"
    home = make_home(tmp_path / "home", agent(script) + sandbox, {"calc": loop_text(repo)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    assert loopd(home, "trigger", "calc").returncode == 0
    wait_for(started.exists, timeout=60, what="the agent to start")
    assert groups_of(daemon.pid), "the attempt runs in a control group of its own"
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.wait()
    dead = daemon.pid
    # Nothing released them: they stay, however long, until a loopd starts again.
    left = groups_of(dead)
    assert left
    # A group of a live process (this test's) is never touched.
    ours = limits.Bounds.make(limits.RunLimits(), agent=False)
    try:
        restarted = start_daemon(home)
        daemons.append(restarted)
        wait_for(lambda: not groups_of(dead), timeout=60, what="the dead daemon's groups swept")
        assert all(group.is_dir() for group in ours.groups)
        assert stop_daemon(restarted) == 0
    finally:
        ours.release()

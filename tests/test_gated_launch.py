"""A gated launch: bubblewrap sets the sandbox up and holds the command at `--block-fd` until
loopd releases it (the attempt's record is fsynced meanwhile); a failure before the release
kills the sandbox, so the command never runs. Real bubblewrap, real processes."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from daemon.agents.base import Invocation
from daemon.agents.command import CommandAdapter
from daemon.agents.supervisor import Supervisor
from daemon.agents.transcript import Transcript
from daemon.config import AgentProfile
from daemon.processes import descendants, process_cwd, snapshot
from daemon.sandbox.base import Exposure, Launch
from daemon.sandbox.bwrap import BwrapSandbox
from tests.helpers import wait_for
from tests.sandboxing import require_bwrap

PATH = {"PATH": "/usr/bin:/bin"}
HOLD = 0.5  # seconds a held command is given to run anyway (it must not)


def gated(tree: Path) -> Exposure:
    return Exposure(cwd=tree, writable=(tree,), gated=True)


def test_a_gated_command_waits_set_up_until_released(tmp_path: Path) -> None:
    require_bwrap()
    assert BwrapSandbox.gates(), "this bubblewrap has no --block-fd"
    launch = BwrapSandbox().launch(["/bin/sh", "-c", "touch ran"], PATH, gated(tmp_path))
    assert "--block-fd" in launch.argv and launch.gate_fd is not None
    proc = subprocess.Popen(launch.argv, env=launch.env, pass_fds=launch.pass_fds)
    launch.spawned()
    try:
        # The sandbox's own process exists (set up or setting up) and the command has not run.
        wait_for(lambda: descendants(proc.pid), timeout=10)
        time.sleep(HOLD)
        assert proc.poll() is None and not (tmp_path / "ran").exists()
        launch.release()
        assert proc.wait(timeout=10) == 0
        assert (tmp_path / "ran").exists() and launch.command_ran()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        launch.close()


def test_a_launch_not_gated_runs_at_once(tmp_path: Path) -> None:
    require_bwrap()
    exposure = Exposure(cwd=tmp_path, writable=(tmp_path,))
    launch = BwrapSandbox().launch(["/bin/sh", "-c", "touch ran"], PATH, exposure)
    assert "--block-fd" not in launch.argv and launch.gate_fd is None
    proc = subprocess.run(launch.argv, env=launch.env, pass_fds=launch.pass_fds, timeout=10)
    launch.spawned()
    launch.close()
    assert proc.returncode == 0 and (tmp_path / "ran").exists()


def supervisor(tmp_path: Path, before_start, launches: list[Launch]) -> Supervisor:  # noqa: ANN001
    def launcher(argv: list[str], env: dict[str, str]) -> Launch:
        launch = BwrapSandbox().launch(argv, env, gated(tmp_path / "tree"))
        launches.append(launch)
        return launch

    (tmp_path / "tree").mkdir()
    transcript = Transcript(tmp_path / "transcript.jsonl", cap_bytes=1 << 20)
    adapter = CommandAdapter(AgentProfile(adapter="command", command=["agent"]))
    return Supervisor(
        adapter,
        transcript,
        tmp_path / "tree",
        dict(PATH),
        kill_grace=1.0,
        before_start=before_start,
        launcher=launcher,
    )


def test_the_supervisor_releases_the_command_after_before_start(tmp_path: Path) -> None:
    require_bwrap()
    seen: list[bool] = []
    marker = tmp_path / "tree" / "ran"

    def look() -> None:
        time.sleep(HOLD)  # a command not held would have run by now
        seen.append(marker.exists())

    sup = supervisor(tmp_path, look, [])
    result = sup.run(Invocation(argv=["/bin/sh", "-c", "touch ran"]), timeout=20, stall_after=20)
    assert result.exit_code == 0 and marker.exists()
    assert seen == [False]  # held while before_start ran


def test_a_failure_before_the_release_kills_the_held_command(tmp_path: Path) -> None:
    require_bwrap()
    launches: list[Launch] = []

    def disk_full() -> None:
        time.sleep(HOLD)  # the sandbox is set up and waits by now
        raise OSError(28, "No space left on device")

    sup = supervisor(tmp_path, disk_full, launches)
    with pytest.raises(OSError, match="No space"):
        sup.run(Invocation(argv=["/bin/sh", "-c", "touch ran"]), timeout=20, stall_after=20)
    time.sleep(HOLD)  # a command let through by the gate's closing would have run by now
    assert not (tmp_path / "tree" / "ran").exists()
    assert launches and launches[0].gate_fd is None  # closed, after the kill
    table = snapshot()  # nothing of the sandbox is left: no live process works in its tree
    tree = str(tmp_path / "tree")
    left = [p for p, info in table.items() if info.state not in "ZX" and _works_in(p, tree)]
    assert not left


def _works_in(pid: int, folder: str) -> bool:
    cwd = process_cwd(pid)
    return cwd is not None and (cwd == folder or cwd.startswith(folder + "/"))


def test_a_runs_agent_launch_is_gated_only_when_asked(tmp_path: Path) -> None:
    """A launch nobody releases must not wait forever: `launch_agent` gates only for the
    attempt's sessions, which release it (a bench that built launches itself once hung)."""
    require_bwrap()
    from datetime import UTC, datetime

    from daemon.git.tree import prepare_tree
    from daemon.git.userrepo import LedgerWriter
    from daemon.home import Home
    from daemon.runparts.confinement import Confinement
    from daemon.runparts.services import RunServices
    from daemon.runs.executor import new_run
    from daemon.scheduling.queue import PendingRun
    from daemon.state.ledger import ledger_of
    from daemon.state.records import Trigger
    from tests.helpers import make_home, make_repo

    repo = make_repo(tmp_path / "repo", {"README.md": "r\n"})
    home = Home(make_home(tmp_path / "home", "", {"l": f'repo = "{repo}"\ntask = "t"\n'}))
    loaded = home.load()
    services = RunServices(home=home, config=loaded.daemon, store=home.state())
    now = datetime.now(UTC)
    trigger = Trigger(loop="l", kind="manual", reason="test", ts=now)
    run_id = services.store.new_run_id("l", now)
    pending = PendingRun(id=run_id, loop="l", trigger=trigger, queued_at=now)
    run = new_run(services, loaded.loops["l"], pending)
    writer = LedgerWriter(ledger_of(services.store.root), services.clock, run.id)
    worktrees = loaded.daemon.limits.worktrees_path
    tree = prepare_tree(repo, "l", run.id, "clone", "HEAD", worktrees, writer)
    confined = Confinement.for_run(services, loaded.loops["l"].config, run, tree.path)
    assert confined.gated  # bubblewrap with --block-fd: a launch may be gated here
    argv = ["/bin/sh", "-c", "true"]
    plain = confined.launch_agent(argv, PATH, declared=[])
    held = confined.launch_agent(argv, PATH, declared=[], gated=True)
    try:
        assert plain.gate_fd is None and "--block-fd" not in plain.argv
        assert held.gate_fd is not None and "--block-fd" in held.argv
    finally:
        plain.close()
        held.close()

"""Which control groups bound a run, on a cgroup v2 host and a v1 one (a folder stands in for
/sys/fs/cgroup: this machine's kernel has v1, so the v2 path is shown on the files it reads).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from daemon.sandbox import limits
from daemon.sandbox.limits import Bounds, RunLimits


@pytest.fixture
def cgroupfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake cgroup root; this process's own group is `/loopd.service` in every hierarchy."""
    root = tmp_path / "cgroup"
    root.mkdir()
    monkeypatch.setattr(limits, "CGROUP", root)
    monkeypatch.setattr(limits, "_own_group", lambda hierarchy: "/loopd.service")
    monkeypatch.setattr(limits, "_backend", None)
    return root


def v2_home(root: Path, enabled: str) -> Path:
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    own = root / "loopd.service"
    own.mkdir()
    (own / "cgroup.subtree_control").write_text(enabled)
    return own


def test_a_delegated_v2_subtree_holds_each_launch_in_a_group_of_its_own(cgroupfs: Path) -> None:
    own = v2_home(cgroupfs, "memory pids\n")
    found = limits.backend()
    assert (found.kind, found.pids, found.memory) == ("cgroup2", own, own)
    bounds = Bounds.make(RunLimits(processes=64, memory=1 << 30), agent=True)
    (group,) = bounds.groups
    assert group.parent == own and group.name.startswith("loopd-")
    assert (group / "pids.max").read_text() == "64\n"
    assert (group / "memory.max").read_text() == f"{1 << 30}\n"
    # The launch joins it before bubblewrap starts.
    assert f'echo $$ > "{group}/cgroup.procs"' in bounds.prefix()[2]
    assert bounds.hit() == ""
    (group / "pids.events").write_text("max 3\n")
    assert bounds.hit() == "processes"
    (group / "pids.events").write_text("max 0\n")
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n")
    assert bounds.hit() == "memory"
    for name in ("pids.max", "memory.max", "pids.events", "memory.events"):
        (group / name).unlink()
    bounds.release()
    assert not group.exists()
    assert "(cgroup2)" in limits.describe(RunLimits(), is_root=True)


def test_v2_without_pids_and_memory_delegated_falls_back_to_rlimits(cgroupfs: Path) -> None:
    v2_home(cgroupfs, "cpu io\n")
    found = limits.backend()
    assert found.kind == "rlimit" and "delegated" in found.why
    assert Bounds.make(RunLimits(), agent=True).groups == []
    line = limits.describe(RunLimits(processes=100), is_root=False)
    assert "100 processes (RLIMIT_NPROC)" in line
    # As root, RLIMIT_NPROC does not count: check and status say so rather than promise it.
    assert "not bounded" in limits.describe(RunLimits(), is_root=True)


def test_a_writable_v1_hierarchy_is_used_when_there_is_no_v2(cgroupfs: Path) -> None:
    for controller in ("pids", "memory"):
        (cgroupfs / controller / "loopd.service").mkdir(parents=True)
    (cgroupfs / "memory" / "loopd.service" / "memory.limit_in_bytes").write_text("max\n")
    found = limits.backend()
    assert found.kind == "cgroup1"
    bounds = Bounds.make(RunLimits(processes=10, memory=1 << 20), agent=False)
    pids, memory = bounds.groups
    assert (pids / "pids.max").read_text() == "10\n"
    assert (memory / "memory.limit_in_bytes").read_text() == f"{1 << 20}\n"
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert bounds.hit() == "memory"


def test_a_group_systemd_delegated_is_taken_through_a_leaf_of_loopd(
    cgroupfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Delegate=pids memory` (the unit loopd writes): loopd moves itself into `loopd` and
    enables the controllers, since cgroup v2 allows no process beside child groups."""
    own = v2_home(cgroupfs, "")
    (own / "cgroup.controllers").write_text("memory pids\n")
    assert limits.backend().kind != "cgroup2"  # not delegated: the group is not loopd's
    monkeypatch.setattr(limits, "_backend", None)
    monkeypatch.setattr(limits, "_delegated", lambda group: group == own)
    found = limits.backend()
    assert (found.kind, found.pids) == ("cgroup2", own)
    assert (own / "loopd" / "cgroup.procs").read_text().split() == [str(os.getpid())]
    # A real cgroupfs answers the write with the enabled set; the fake keeps what was written.
    assert (own / "cgroup.subtree_control").read_text() == "+pids +memory\n"


def test_under_systemd_without_a_group_each_launch_gets_a_scope(
    cgroupfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No delegated v2, no v1: a transient scope with TasksMax and MemoryMax holds the launch.
    Real systemd is not on this machine: stand-ins record what loopd asks of it."""
    runtime = tmp_path / "run-systemd"
    runtime.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "asked"
    (bin_dir / "systemd-run").write_text(
        f'#!/bin/sh\necho "$@" >> {asked}\nwhile [ "$1" != "--" ]; do shift; done\nshift\n'
        'exec "$@"\n'
    )
    (bin_dir / "systemctl").write_text(
        f'#!/bin/sh\necho "systemctl $@" >> {asked}\ncase "$*" in *Result*) echo oom-kill;; esac\n'
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setattr(limits, "SYSTEMD_RUNTIME", str(runtime))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert limits.backend().kind == "systemd"
    bounds = Bounds.make(RunLimits(processes=50, memory=1 << 30), agent=True)
    assert bounds.groups == [] and bounds.scope.endswith(".scope")
    done = subprocess.run(
        [*bounds.prefix(), "/bin/echo", "inside"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and done.stdout.strip() == "inside"
    line = asked.read_text().splitlines()[0]
    assert f"--scope --quiet --unit={bounds.scope} -p TasksMax=50 -p MemoryMax={1 << 30}" in line
    assert bounds.hit() == "memory"  # the scope's Result was oom-kill
    bounds.release()
    assert f"reset-failed {bounds.scope}" in asked.read_text()
    assert "(systemd)" in limits.describe(RunLimits(), is_root=True)

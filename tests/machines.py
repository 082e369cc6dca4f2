"""Machines for the Temporal tests: a home and workers, each with its own HOME, home folder and
copy of the repository at its own path, all on one real dev server, as real `loopd` processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import ROOT, git, make_home, make_repo

START_TIMEOUT = 60.0
# A repository whose check fails until `add` is fixed, and the task that says so.
BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n",
}
TASK = "Make check.py pass: add in calc.py returns the wrong sum."


def engine_toml(address: str, namespace: str, remote: str = "", heartbeat: str = "3s") -> str:
    lines = [
        "[engine]",
        'kind = "temporal"',
        f'address = "{address}"',
        f'namespace = "{namespace}"',
        f'heartbeat_timeout = "{heartbeat}"',
    ]
    if remote:
        lines.append(f'remote = "{remote}"')
    return "\n".join(lines) + "\n"


def command_agent(name: str, script: str) -> str:
    """A `command` agent profile running a Python script."""
    argv = [sys.executable, "-c", script]
    return f'[agents.{name}]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'


def loop_toml(repo: Path, **settings: Any) -> str:
    values = {"repo": str(repo), **settings}
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())


@dataclass
class Machine:
    """One machine: a HOME of its own, a loopd home, a copy of the repository, a process."""

    name: str
    root: Path
    home: Path
    repo: Path
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "LOOPD_HOME"}
        env["HOME"] = str(self.root / "user")
        return env

    @property
    def log(self) -> Path:
        return self.root / "loopd.log"

    @property
    def proc(self) -> subprocess.Popen[str] | None:
        return self.procs[-1] if self.procs else None

    def start(self, *command: str) -> subprocess.Popen[str]:
        """`loopd run` or `loopd worker ...`, returned once it says it is running."""
        (self.root / "user").mkdir(parents=True, exist_ok=True)
        mark = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "a") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "daemon.cli.main", "--home", str(self.home), *command],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=ROOT,
                text=True,
            )
        self.procs.append(proc)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            text = self.log.read_text()[mark:]
            if " running for " in text or " worker for " in text:
                return proc
            if proc.poll() is not None:
                raise AssertionError(f"{self.name}: loopd {command} exited: {text}")
            time.sleep(0.05)
        proc.kill()
        raise AssertionError(f"{self.name}: loopd {command} did not start: {self.log.read_text()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int | None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else None
        proc.send_signal(sig)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise

    def kill9(self) -> None:
        proc = self.proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def loopd(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "daemon.cli.main", "--home", str(self.home), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )

    def runs(self) -> list[dict[str, Any]]:
        """The run.toml files of this home, oldest first."""
        from tests.helpers import runs

        return runs(self.home)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        from tests.helpers import events

        return [e for e in events(self.home) if kind is None or e["type"] == kind]


@dataclass
class Cluster:
    home: Machine
    workers: list[Machine]
    remote: Path

    def all(self) -> list[Machine]:
        return [self.home, *self.workers]

    def stop(self) -> None:
        for machine in self.all():
            for proc in machine.procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def make_cluster(
    tmp_path: Path,
    address: str,
    namespace: str,
    files: dict[str, str],
    agents: str,
    loop: dict[str, Any],
    workers: int = 2,
    heartbeat: str = "3s",
    name: str = "calc",
    config: str = "",
) -> Cluster:
    """A home (with the person's repository) and `workers` machines with clones of it, the
    run branches shared through a bare repository; loop `name` on every machine."""
    user_repo = make_repo(tmp_path / "home-machine" / "src" / "app", files)
    remote = tmp_path / "shared" / "app.git"
    remote.parent.mkdir(parents=True)
    git(tmp_path, "clone", "-q", "--bare", str(user_repo), str(remote))
    engine = engine_toml(address, namespace, str(remote), heartbeat)

    def machine(label: str, repo: Path) -> Machine:
        root = tmp_path / label
        text = agents + config + f'\n[limits]\nworktrees = "{root / "worktrees"}"\n' + engine
        home = make_home(root / "loopd-home", text, {name: loop_toml(repo, **loop)})
        return Machine(label, root, home, repo)

    home = machine("home-machine", user_repo)
    out = []
    for i in range(1, workers + 1):
        clone = tmp_path / f"worker-{i}" / "code" / f"app-copy-{i}"
        clone.parent.mkdir(parents=True)
        git(tmp_path, "clone", "-q", str(remote), str(clone))
        out.append(machine(f"worker-{i}", clone))
    return Cluster(home, out, remote)

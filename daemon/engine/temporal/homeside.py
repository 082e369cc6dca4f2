"""The home's side of the engine: its configuration, state and rules, and who may act on them.

Activities on the home's queue write the home's state/ and rules/ (one writer of rules/). Each
run they act for carries a token only this home can make (an HMAC of the run id under a key
kept in `state/engine.key`), and each activity checks that it runs for the workflow of that
very run: a workflow started by anyone else who reaches the engine gets nothing done here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import secrets
import threading
from pathlib import Path
from typing import Any

from daemon.clock import utc_now
from daemon.config import LoadedConfig, Loop, LoopConfig
from daemon.engine.temporal.models import RunRef
from daemon.engine.temporal.names import controller_id, run_workflow_id
from daemon.home import Home
from daemon.people.notify import Notifications
from daemon.runparts.journal import RunJournal
from daemon.runparts.services import RunServices
from daemon.service.reload import keep_running, restart_messages, restart_pending
from daemon.state.atomic import write_atomic
from daemon.state.records import RunRecord
from daemon.state.store import StateStore

KEY_FILE = "engine.key"


def NotOurs(message: str) -> Exception:  # noqa: N802 - reads as the exception it makes
    """An activity was asked to act for a run (or loop) this home did not start: refused for
    good (never retried)."""
    from temporalio.exceptions import ApplicationError

    return ApplicationError(message, type="NotOurs", non_retryable=True)


def home_key(store: StateStore) -> bytes:
    """The home's secret for run tokens, made on first use (0600, never sent anywhere)."""
    path = store.root / KEY_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        key = secrets.token_bytes(32)
        write_atomic(path, key.hex())
        os.chmod(path, 0o600)
        return key


def config_mark(home: Home) -> tuple:
    """Changes whenever loopd.toml or a loop file changes (mtime and size of each)."""
    marks = []
    for path in [home.config_path, *sorted(home.loops_dir.glob("*.toml"))]:
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        marks.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(marks)


class Configured:
    """A home's configuration, read again whenever its files change; a broken loopd.toml
    keeps the last good one."""

    follows_files = True  # False: `adopt` alone changes it (the home's reload, loop by loop)

    def __init__(self, home: Home, loaded: LoadedConfig) -> None:
        self.home = home
        self.loaded = loaded
        self._lock = threading.Lock()
        self._mark = config_mark(home)
        self.restart: list[str] = []  # changes kept for a restart

    def adopt(self, loaded: LoadedConfig) -> LoadedConfig:
        """Use `loaded` from now on (a reload that kept broken loops' last good files); it,
        with the running [engine]."""
        with self._lock:
            self._mark = config_mark(self.home)
            self._take(loaded)
            return self.loaded

    def _take(self, loaded: LoadedConfig) -> None:
        # The engine serves from its start: an [engine] change waits for a restart.
        running = self.loaded.daemon
        self.restart = restart_messages(restart_pending(running, loaded.daemon))
        loaded.daemon = keep_running(running, loaded.daemon)
        self.loaded = loaded
        self.reloaded(loaded)

    def config(self) -> LoadedConfig:
        with self._lock:
            mark = config_mark(self.home)
            if self.follows_files and mark != self._mark:
                self._mark = mark
                loaded = self.home.load()
                if loaded.daemon_ok:
                    self._take(loaded)
            return self.loaded

    def reloaded(self, loaded: LoadedConfig) -> None:
        """Called (under the lock) with a new configuration."""


class HomeSide(Configured):
    """What the home's activities share: the configuration, the services a run needs, the key."""

    follows_files = False  # the home's reload keeps a broken loop file's last good loop

    def __init__(self, home: Home, loaded: LoadedConfig, store: StateStore, client: Any) -> None:
        super().__init__(home, loaded)
        self.store = store
        self.client = client  # the engine, for a Fire that must start a controller
        self.key = home_key(store)
        self.services = RunServices(home=home, config=loaded.daemon, store=store)
        self.services.notifications = _notifications(loaded, store)
        self.holds: Any = None  # daemon.service.holds.Holds, once the home's context is made
        self._holds_lock = threading.Lock()

    def reloaded(self, loaded: LoadedConfig) -> None:
        self.services = dataclasses.replace(
            self.services,
            config=loaded.daemon,
            notifications=_notifications(loaded, self.store),
        )

    def loop(self, name: str) -> Loop | None:
        return self.config().loops.get(name)

    def hold(self, loop: str) -> Any:
        """What holds `loop`'s new runs now (a usage limit, a spent budget), or None."""
        if self.holds is None:
            return None

        with self._holds_lock:
            return self.holds.held(utc_now()).get(loop)

    # who may act --------------------------------------------------------------------------
    def token(self, run_id: str) -> str:
        return hmac.new(self.key, run_id.encode(), hashlib.sha256).hexdigest()[:32]

    def check_run(self, ref: RunRef) -> None:
        """The activity acts for the run the home started, from that run's own workflow."""
        from temporalio import activity

        if not hmac.compare_digest(self.token(ref.run_id), ref.token):
            raise NotOurs(f"run {ref.run_id} was not started by this home")
        workflow_id = activity.info().workflow_id
        if workflow_id != run_workflow_id(ref.loop, ref.run_id):
            raise NotOurs(f"workflow {workflow_id} is not the workflow of run {ref.run_id}")

    def check_controller(self, loop: str) -> None:
        from temporalio import activity

        workflow_id = activity.info().workflow_id
        if workflow_id != controller_id(loop):
            raise NotOurs(f"workflow {workflow_id} is not the controller of loop {loop}")

    # runs ---------------------------------------------------------------------------------
    def open_run(self, ref: RunRef) -> tuple[RunServices, RunJournal]:
        """The run's record (checked to be this home's) and a journal on it."""
        self.check_run(ref)
        self.config()
        run = self.store.load_run(ref.run_id)
        if run.loop != ref.loop:
            raise NotOurs(f"run {ref.run_id} is not a run of loop {ref.loop}")
        return self.services, RunJournal(self.services, run)


def loop_of(name: str, home: Home, config: dict[str, Any]) -> Loop:
    """The loop as the run started with it."""
    return Loop(name=name, path=home.loops_dir / f"{name}.toml", config=LoopConfig(**config))


def trimmed(run: RunRecord) -> RunRecord:
    """The run's record for a workflow: bounded (summaries cut), no host details."""
    copy = run.model_copy(deep=True)
    for attempt in copy.attempts:
        attempt.summary = attempt.summary[-4000:]
    copy.refs_before = {}
    copy.agent_pids = []
    return copy


def remote_for(remote: str, loop: str, repo: Path) -> str:
    """Where a loop's run branches live: `[engine] remote` (with {loop}), else the repo."""
    if not remote:
        return str(repo)
    return remote.replace("{loop}", loop)


def _notifications(loaded: LoadedConfig, store: StateStore) -> Any:
    return Notifications(loaded.daemon.notify, store.events)

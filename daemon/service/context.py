"""What every part of the daemon shares: the home, its state, the configuration, the flags."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import daemon as package
from daemon import example
from daemon.config import LoadedConfig, Loop, LoopConfig
from daemon.example.prepare import prepare_examples
from daemon.extras import install_command
from daemon.home import Home
from daemon.people.notify import Notifications, NotifyError
from daemon.runparts.services import RunServices
from daemon.runs.budget import budget_warnings
from daemon.service.preflight import Preflight
from daemon.service.reload import LoopFiles, first_load
from daemon.state.eventtypes import Event
from daemon.state.store import StateStore, UnreadableFile


class ConfigFatal(Exception):
    """`loopd.toml` itself is broken, or the configuration cannot be loaded at all (exit 2)."""


@dataclass
class Flags:
    """Set by signal handlers (and by threads that want a tick now), read by the driver."""

    stop: threading.Event = field(default_factory=threading.Event)
    reload: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    stops: int = 0


def load_config(home: Home) -> LoadedConfig:
    """The home's configuration; ConfigFatal when loopd.toml is broken or loading fails."""
    example.register()  # the daemon's assembly: the example is known before any loop is read
    try:
        loaded = home.load()
    except Exception as exc:  # noqa: BLE001 - whatever the files hold, the caller decides
        raise ConfigFatal(
            f"cannot load the configuration in {home.root}: {type(exc).__name__}: {exc}"
        ) from exc
    if not loaded.daemon_ok:
        raise ConfigFatal("\n".join(str(e) for e in loaded.errors if e.file == home.config_path))
    _require_extras(loaded)

    try:
        prepare_examples(loaded.loops)
    except Exception as exc:  # noqa: BLE001 - the example's run then fails and says why
        loaded.warnings.append(f"could not prepare the example's repository: {exc}")
    preflight = Preflight(loaded, home.config_path)
    loaded.warnings.extend(preflight.run())
    if preflight.probe is not None and preflight.probe.ok:
        loaded.notes.append(preflight.probe.text)
    loaded.warnings.extend(budget_warnings(loaded))
    return loaded


def _require_extras(loaded: LoadedConfig) -> None:
    """A key whose Python packages are missing stops the start (exit 2), naming the extra."""
    needs = []
    if loaded.daemon.listen is not None:
        needs += [("[listen]", "uvicorn", "listen"), ("[listen]", "prometheus_client", "listen")]
        if loaded.daemon.listen.ui:
            needs += [("[listen] ui", "starlette", "web"), ("[listen] ui", "jinja2", "web")]
    if loaded.daemon.notify.urls:
        needs.append(("[notify] urls", "apprise", "notify"))
    for key, module, extra in needs:
        try:
            __import__(module)
        except ImportError:
            raise ConfigFatal(
                f"loopd.toml: {key} needs the Python package {module!r}, which is not "
                f"installed; install loopd's `{extra}` extra: {install_command(extra)}, "
                f"or remove {key}"
            ) from None


def notifications_for(loaded: LoadedConfig, store: StateStore) -> Any:
    """The notifier of `[notify]`; ConfigFatal when one of its notifiers cannot be made (a
    plugin that fails to import, options it refuses)."""
    try:
        return Notifications(loaded.daemon.notify, store.events)
    except NotifyError as exc:
        raise ConfigFatal(str(exc)) from None


@dataclass
class Context:
    """The daemon's shared state; `config` and `services` are replaced by a reload."""

    home: Home
    store: StateStore
    flags: Flags
    config: LoadedConfig
    services: RunServices
    clock: Callable[[], datetime]
    monotonic: Callable[[], float] = time.monotonic
    # The loop files loaded (digests) and those kept stale; see daemon/service/reload.py.
    files: LoopFiles = field(default_factory=LoopFiles)
    config_error: str = ""  # loopd.toml did not load at the last reload: all is kept
    restart_pending: list[str] = field(default_factory=list)  # changes kept for a restart
    # (repository, branch) a push trigger, a hook or a poll saw move since the aftermath's
    # last look: its landed runs are brought up to date at the next tick (service/aftermath.py).
    targets_moved: set[tuple[str, str]] = field(default_factory=set)
    # Called from another thread (the remote feed's, once a webhook's or a poll's push is
    # fetched) after it marked targets moved: the aftermath looks now, not at the next tick.
    follow_moved: Callable[[], None] = lambda: None

    def fetched(self, repo: Path, branches: list[str]) -> None:
        """Branches of a repository moved by a fetch of the remote feed: the aftermath of the
        runs landed on them is brought up to date at once (service/aftermath.py)."""
        for branch in branches:
            self.targets_moved.add((str(repo.resolve()), branch))
        self.follow_moved()

    @property
    def loops(self) -> dict[str, Loop]:
        return self.config.loops

    def scheduled_loops(self) -> dict[str, LoopConfig]:
        """Enabled loops with a schedule, for the cron timer."""
        return {
            name: loop.config
            for name, loop in self.loops.items()
            if loop.config.enabled and loop.config.schedule
        }

    def event(self, type: Event, **fields: Any) -> None:
        """Record an event stamped now."""
        self.store.events.append(type, self.clock(), **fields)

    def report_config(self) -> None:
        """Record the configuration's errors and warnings."""
        for error in self.config.errors:
            self.event(
                Event.CONFIG_ERROR,
                file=str(error.file),
                key=error.key,
                message=error.message,
                fix=error.fix,
            )
        for warning in self.config.warnings:
            self.event(Event.CONFIG_WARNING, message=warning)


def unreadable_reporter(store: StateStore) -> Callable[[UnreadableFile], None]:
    """How the daemon names an unreadable state file: an event and a line on stderr."""

    def report(problem: UnreadableFile) -> None:
        print(f"loopd: warning: {problem}; skipped", file=sys.stderr, flush=True)
        store.events.append(Event.STATE_UNREADABLE, file=str(problem.path), error=problem.reason)

    return report


def started_context(
    home: Home,
    loaded: LoadedConfig,
    store: StateStore,
    flags: Flags,
    clock: Callable[[], datetime],
    monotonic: Callable[[], float],
) -> Context:
    """The context of a daemon starting: its services, the loop files as first loaded; the
    start recorded (loops loaded, loop files broken), then the configuration's errors and
    warnings."""
    services = RunServices(home=home, config=loaded.daemon, store=store, clock=clock)
    services.notifications = notifications_for(loaded, store)
    ctx = Context(
        home=home,
        store=store,
        flags=flags,
        config=loaded,
        services=services,
        clock=clock,
        monotonic=monotonic,
        files=first_load(home, loaded),
    )
    ctx.event(
        Event.DAEMON_STARTED,
        pid=os.getpid(),
        version=package.__version__,
        loops=sorted(loaded.loops),
        broken=sorted({e.file.stem for e in loaded.errors if e.file.parent.name == "loops"}),
    )
    ctx.report_config()
    return ctx

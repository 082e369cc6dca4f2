"""Watchers: the inbox (wakes the driver), each on_change loop's repository, and the home's
configuration (asks the driver for a reload)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from daemon.scheduling.changes import ChangeWatcher
from daemon.scheduling.inbox_watch import InboxWatcher
from daemon.service.context import Context
from daemon.service.reload import ConfigWatcher
from daemon.state.eventtypes import Event
from daemon.state.records import Trigger

if TYPE_CHECKING:
    from daemon.scheduling.changes import ChangeWatcher
    from daemon.scheduling.inbox_watch import InboxWatcher
    from daemon.service.reload import ConfigWatcher


class Watchers:
    """Started with the daemon; change watchers are rebuilt on reload."""

    def __init__(self, ctx: Context, inbox: InboxWatcher, is_running: Callable[[str], bool]):
        self.ctx = ctx
        self.inbox = inbox
        self.is_running = is_running
        self.changes: dict[str, ChangeWatcher] = {}
        self.config: ConfigWatcher | None = None

    @classmethod
    def start(cls, ctx: Context, is_running: Callable[[str], bool]) -> Watchers:
        inbox = InboxWatcher(ctx.store.inbox_dir, ctx.flags.wake)
        inbox.start()
        if inbox.warning:
            ctx.event(Event.WATCH_FALLBACK, reason=inbox.warning)
        watchers = cls(ctx, inbox, is_running)
        watchers.restart_changes()
        watchers.start_config()
        return watchers

    def start_config(self) -> None:
        """Watch loopd.toml and loops/: a change asks the driver for a reload (as SIGHUP)."""
        flags = self.ctx.flags

        def changed() -> None:
            flags.reload.set()
            flags.wake.set()

        self.config = ConfigWatcher(self.ctx.home, changed)
        try:
            self.config.start()
        except Exception as exc:  # noqa: BLE001 - without it, SIGHUP and `loopd reload` remain
            self.ctx.event(Event.WATCH_FAILED, what="configuration", error=str(exc)[:500])
            self.config = None
            return
        if self.config.warning:
            self.ctx.event(Event.WATCH_FALLBACK, reason=self.config.warning)

    def restart_changes(self) -> None:
        """(Re)start a change watcher for each enabled loop with `on_change`."""
        for watcher in self.changes.values():
            watcher.stop()
        self.changes = {}
        worktrees = self.ctx.config.daemon.limits.worktrees_path
        for name, loop in self.ctx.loops.items():
            if not (loop.config.enabled and loop.config.on_change):
                continue
            watcher = ChangeWatcher(
                loop=name,
                repo=loop.config.repo_path,
                globs=loop.config.on_change,
                debounce=loop.config.debounce.total_seconds(),
                ignore_under=[worktrees],
                is_running=functools.partial(self.is_running, name),
                events=self.ctx.store.events,
            )
            try:
                watcher.start()
            except Exception as exc:  # noqa: BLE001 - one loop's watcher must not stop the daemon
                self.ctx.event(Event.WATCH_FAILED, loop=name, error=str(exc)[:500])
                continue
            self.changes[name] = watcher

    def poll(self, now: datetime) -> list[Trigger]:
        """Debounced change triggers that are due (a dead watcher restarts itself, rescanning)."""
        out: list[Trigger] = []
        for watcher in self.changes.values():
            out += watcher.poll(now)
        return out

    def alive(self) -> bool:
        return self.inbox.alive()

    def stop(self) -> None:
        if self.config is not None:
            self.config.stop()
        self.inbox.stop()
        for watcher in self.changes.values():
            watcher.stop()

"""Reloading the configuration: per loop, on a file watcher, SIGHUP and `loopd reload`.

- A loop file that loads replaces its loop's configuration; a run keeps the configuration
  it started with, so the change applies from the loop's next run.
- A loop file that no longer loads keeps its last good configuration: the loop runs on,
  shown stale with the file's error until the file is fixed. A new broken file is not loaded.
- A broken loopd.toml keeps everything as it is.
- `[engine]` is chosen when loopd starts: a reload keeps the running engine's section, says
  that the change takes effect when loopd restarts (the event `restart_needed`, `loopd
  reload`'s answer, `loopd status`), and applies the rest.
- A change to loopd.toml or a loop file while an attempt runs is recorded
  (`config_changed_during_attempt`) when the agent could have made it: without a sandbox
  that hides the home from agents, any agent could write the home's files.

The watcher (watchdog: inotify, or polling past the inotify limit) asks for a reload a
moment after the last change, so an editor's several writes make one reload.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.config import DaemonConfig, LoadedConfig, Loop
from daemon.config.errors import ConfigError
from daemon.home import Home
from daemon.plain.digest import file_digest
from daemon.sandbox.registry import choose
from daemon.scheduling.inbox_watch import inotify_limit_message, is_inotify_limit

SETTLE = 0.3  # seconds without a further change before the reload
# Sections of loopd.toml a running daemon cannot change: the engine serves from its start.
# The listener binds its socket once, at the start; the tracer's exporter is made then too.
RESTART_ONLY = ("engine", "listen", "telemetry")


@dataclass
class LoopFiles:
    """What the daemon loaded from each loop file: its digest, and the stale ones' errors."""

    digests: dict[str, str] = field(default_factory=dict)  # loop -> digest of the loaded file
    stale: dict[str, str] = field(default_factory=dict)  # loop -> why its file does not load
    config_digest: str = ""  # of loopd.toml
    on_disk: dict[str, str] = field(default_factory=dict)  # every loop file, loaded or not


def _errors_by_loop(home: Home, errors: list[ConfigError]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for error in errors:
        if error.file.parent == home.loops_dir:
            out.setdefault(error.file.stem, []).append(str(error))
    return out


def first_load(home: Home, loaded: LoadedConfig) -> LoopFiles:
    """The loop files as a starting daemon loads them: nothing is stale yet."""
    return LoopFiles(
        digests={name: file_digest(loop.path) for name, loop in loaded.loops.items()},
        config_digest=file_digest(home.config_path),
        on_disk=_on_disk(home),
    )


def _on_disk(home: Home) -> dict[str, str]:
    folder = home.loops_dir
    paths = sorted(folder.glob("*.toml")) if folder.is_dir() else []
    return {path.stem: file_digest(path) for path in paths}


def keep_last_good(
    home: Home, before: LoadedConfig, files: LoopFiles, after: LoadedConfig
) -> LoopFiles:
    """Merge a fresh load into the running configuration, loop by loop (in `after`).

    A loop whose file is broken now keeps its configuration from `before` (stale), unless
    its agent profile is gone from the new loopd.toml: then it is not loaded either.
    """
    broken = _errors_by_loop(home, after.errors)
    merged = LoopFiles(config_digest=file_digest(home.config_path), on_disk=_on_disk(home))
    for name, loop in after.loops.items():
        merged.digests[name] = file_digest(loop.path)
    for name, problems in broken.items():
        kept = before.loops.get(name)
        if kept is None or name in after.loops or not kept.path.exists():
            continue
        if after.daemon.profile(kept.config.agent) is None:
            continue
        after.loops[name] = kept
        merged.digests[name] = files.digests.get(name, "")
        merged.stale[name] = "; ".join(problems)
    return merged


def restart_pending(running: DaemonConfig, loaded: DaemonConfig) -> dict[str, list[str]]:
    """The keys of each restart-only section whose new value waits for a restart."""
    out: dict[str, list[str]] = {}
    for section in RESTART_ONLY:
        old, new = _dump(getattr(running, section)), _dump(getattr(loaded, section))
        keys = [key for key in {**old, **new} if new.get(key) != old.get(key)]
        if keys:
            out[section] = keys
    return out


def _dump(section: Any) -> dict[str, Any]:
    """A section's keys; an absent optional table (`[listen]`) says so as `table`."""
    return {"table": False} if section is None else {"table": True, **section.model_dump()}


def restart_messages(pending: dict[str, list[str]]) -> list[str]:
    """One line per section changed, naming its keys."""
    return [
        f"the [{section}] change takes effect when loopd restarts (changed: "
        f"{', '.join(keys)}); until then the daemon keeps the [{section}] it started with"
        for section, keys in pending.items()
    ]


def keep_running(running: DaemonConfig, loaded: DaemonConfig) -> DaemonConfig:
    """`loaded` with the restart-only sections the daemon runs on."""
    return loaded.model_copy(update={s: getattr(running, s) for s in RESTART_ONLY})


def changed_loops(before: LoopFiles, after: LoopFiles) -> list[str]:
    """Loop files changed, added or removed since the last load (loaded or not)."""
    names = set(before.on_disk) | set(after.on_disk)
    return sorted(n for n in names if before.on_disk.get(n) != after.on_disk.get(n))


def broken_loop_files(home: Home, loaded: LoadedConfig) -> list[str]:
    """The loops whose files in the loops folder did not load (and were not kept stale)."""
    return sorted(
        {e.file.stem for e in loaded.errors if e.file.parent == home.loops_dir} - set(loaded.loops)
    )


def reload_message(
    loaded: LoadedConfig, pending: list[str], files: LoopFiles, broken: list[str]
) -> str:
    """A reload's answer: the loops loaded, what waits for a restart, what was kept, what
    was not loaded."""
    message = f"reloaded: {len(loaded.loops)} loop(s)"
    for line in pending:
        message += f"; {line}"
    if files.stale:
        message += "; kept the last good configuration of " + ", ".join(sorted(files.stale))
    if broken:
        message += "; not loaded: " + ", ".join(broken)
    return message


def agent_could_write_home(config: DaemonConfig) -> bool:
    """Whether a running agent could have written the home's files: no sandbox hides them."""
    # The sandbox in force, not the mode written: "auto" may have gone unconfined here.
    return choose(config.sandbox).name != "bwrap"


def not_loaded_why(home: Home, name: str, loaded: LoadedConfig, daemon_ok: bool) -> str:
    """Why the daemon has no loop `name`, and how to fix it (for `trigger_skipped`)."""
    path = home.loops_dir / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(sorted(loaded.loops)) or "none"
        return (
            f"no loop {name!r}: there is no {path}; write it (`loopd check` validates it) and "
            f"the daemon loads it within seconds. Loops loaded: {known}"
        )
    problems = [str(e) for e in loaded.errors if e.file == path]
    if problems:
        return (
            f"loop {name!r} is not loaded: {'; '.join(problems)}. Fix the file; the daemon "
            "reloads it within seconds (or run `loopd reload`)"
        )
    if not daemon_ok:
        return (
            f"loop {name!r} is not loaded: loopd.toml does not load, so the daemon keeps the "
            "configuration it had; fix loopd.toml (`loopd check` says how), then `loopd reload`"
        )
    return f"loop {name!r} is not loaded yet; run `loopd reload`"


class ConfigWatcher:
    """Calls `changed()` a moment after loopd.toml or a file in loops/ changes."""

    def __init__(self, home: Home, changed: Callable[[], None], poll_interval: float = 1.0):
        self.home = home
        self.changed = changed
        self.poll_interval = poll_interval
        self.mode = "stopped"
        self.warning = ""
        self._observer: Any = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def _relevant(self, path: str | bytes) -> bool:
        name = Path(path.decode() if isinstance(path, bytes) else path)
        if name.name.startswith("."):
            return False  # an editor's swap file, an atomic write's temporary
        if name.parent == self.home.loops_dir and name.suffix == ".toml":
            return True
        return name == self.home.config_path

    def _poke(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(SETTLE, self.changed)
            self._timer.daemon = True
            self._timer.start()

    def _handler(self) -> Any:
        from watchdog.events import FileSystemEventHandler

        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: Any) -> None:
                if event.event_type in ("opened", "closed_no_write"):
                    return
                paths = [event.src_path, getattr(event, "dest_path", "") or ""]
                if any(p and watcher._relevant(p) for p in paths):
                    watcher._poke()

        return Handler()

    def start(self) -> None:
        """Watch the home and loops/ (inotify; polling past the inotify limit)."""
        from watchdog.observers import Observer
        from watchdog.observers.polling import PollingObserver

        self.home.loops_dir.mkdir(parents=True, exist_ok=True)
        folders = [self.home.root, self.home.loops_dir]
        observer: Any = Observer()
        try:
            for folder in folders:
                observer.schedule(self._handler(), str(folder), recursive=False)
            observer.start()
            self.mode = "watching"
        except OSError as exc:
            if not is_inotify_limit(exc):
                raise
            self.warning = inotify_limit_message(exc, str(self.home.loops_dir))
            observer = PollingObserver(timeout=self.poll_interval)
            for folder in folders:
                observer.schedule(self._handler(), str(folder), recursive=False)
            observer.start()
            self.mode = "polling"
        self._observer = observer

    def alive(self) -> bool:
        return self._observer is not None and self._observer.is_alive()

    def stop(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
            self.mode = "stopped"


__all__ = [
    "ConfigWatcher",
    "LoopFiles",
    "agent_could_write_home",
    "changed_loops",
    "file_digest",
    "first_load",
    "keep_last_good",
    "keep_running",
    "restart_messages",
    "restart_pending",
    "not_loaded_why",
    "Loop",
]

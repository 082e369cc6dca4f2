"""Wake the daemon the moment a trigger file lands in `state/inbox/`.

The daemon's loop waits on a threading.Event with a 1 s timeout, then clears it and takes
the inbox; this watcher sets the event when a `*.json` file is created or renamed into the
inbox (`loopd trigger` writes a temporary dot-file and renames it), or a git hook's record
is closed there (written in place, see hooks.py), so a trigger is taken within milliseconds
instead of at the next second.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

from daemon.scheduling.hook_script import RECORD_SUFFIX

INOTIFY_LIMIT_FIX = (
    "raise it, e.g. `echo fs.inotify.max_user_watches=524288 | sudo tee "
    "/etc/sysctl.d/60-loopd.conf && sudo sysctl --system` (and likewise "
    "fs.inotify.max_user_instances)"
)


def inotify_limit_message(exc: OSError, what: str) -> str:
    """A clear message for an exhausted inotify limit, naming the knob and the fix."""
    knob = "max_user_instances" if exc.errno == errno.EMFILE else "max_user_watches"
    try:
        current = Path(f"/proc/sys/fs/inotify/{knob}").read_text().strip()
    except OSError:
        current = "?"
    return (
        f"cannot watch {what}: the inotify limit /proc/sys/fs/inotify/{knob} ({current}) "
        f"is reached; {INOTIFY_LIMIT_FIX}. Falling back to polling, which is slower."
    )


def is_inotify_limit(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EMFILE)


def _is_trigger_file(path: str | bytes) -> bool:
    """A trigger file, or a git hook's record (hook_script.py) the daemon makes triggers of."""
    name = Path(path.decode() if isinstance(path, bytes) else path).name
    return name.endswith((".json", RECORD_SUFFIX)) and not name.startswith(".")


def _is_inotify(observer: Any) -> bool:
    try:
        from watchdog.observers.inotify import InotifyObserver
    except ImportError:  # not Linux
        return False
    return isinstance(observer, InotifyObserver)


class InboxWatcher:
    """Sets `wake` whenever a trigger file appears in the inbox folder."""

    def __init__(self, inbox: Path, wake: threading.Event, poll_interval: float = 0.25) -> None:
        self.inbox = Path(inbox)
        self.wake = wake
        self.poll_interval = poll_interval
        self.warning = ""  # set when inotify could not be used
        self.mode = "stopped"  # "inotify" | "polling" | "stopped"
        self._observer: Any = None

    def _handler(self) -> Any:
        from watchdog.events import FileSystemEventHandler

        wake = self.wake

        class Handler(FileSystemEventHandler):
            def on_created(self, event: Any) -> None:
                if not event.is_directory and _is_trigger_file(event.src_path):
                    wake.set()

            def on_closed(self, event: Any) -> None:
                # A hook's record is written in place (no rename): whole when it is closed.
                if not event.is_directory and event.src_path.endswith(RECORD_SUFFIX):
                    wake.set()

            def on_moved(self, event: Any) -> None:
                if not event.is_directory and _is_trigger_file(event.dest_path):
                    wake.set()

        return Handler()

    def start(self) -> None:
        """Start watching; falls back to polling (and sets `warning`) at the inotify limit."""
        from watchdog.events import FileClosedEvent, FileCreatedEvent, FileMovedEvent
        from watchdog.observers import Observer
        from watchdog.observers.polling import PollingObserver

        self.inbox.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Only creations, renames and closes after writing: the daemon's own reads and
        # deletions of a burst of ten thousand files must not wake watchdog's thread for each.
        only = [FileCreatedEvent, FileMovedEvent, FileClosedEvent]
        observer = Observer()
        try:
            observer.schedule(self._handler(), str(self.inbox), recursive=False, event_filter=only)
            observer.start()
            self.mode = "inotify" if _is_inotify(observer) else "polling"
        except OSError as exc:
            if not is_inotify_limit(exc):
                raise
            self.warning = inotify_limit_message(exc, str(self.inbox))
            observer = PollingObserver(timeout=self.poll_interval)
            observer.schedule(self._handler(), str(self.inbox), recursive=False, event_filter=only)
            observer.start()
            self.mode = "polling"
        self._observer = observer
        # A trigger written before the watch began must not wait for the next tick.
        if any(_is_trigger_file(p.name) for p in self.inbox.iterdir() if p.is_file()):
            self.wake.set()

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
            self.mode = "stopped"

    def alive(self) -> bool:
        """Whether the watching thread runs; the daemon restarts the watcher when not."""
        return self._observer is not None and self._observer.is_alive()

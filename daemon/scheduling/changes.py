"""on_change: watch a repository's tree and emit debounced `change` triggers.

How the tree is watched (a choice, written down here):
- One inotify watch per folder that git does not ignore, found by walking the tree and
  asking `git check-ignore` one batch per level; `.git/`, ignored folders (node_modules,
  build output) and loopd's worktrees are never walked nor watched. New folders are checked
  and watched as they appear; files made in them before their watch are found by a scan.
- The watches live on one inotify instance per watcher, read by one thread: watchdog's
  `InotifyFD` with a callback, rather than an Observer schedule per folder, which would cost
  a thread per folder.
- Kernel queue overflow or a dead reading thread forces a rescan: the tree is walked again
  and compared with a snapshot (mtime and size of every non-ignored file the globs cover),
  the changed paths become a trigger, and a `watch_rescan` event is recorded: never silence.
- At the inotify limit (or where inotify is unavailable) the watcher says so, naming
  /proc/sys/fs/inotify/max_user_watches and the fix, records `watch_fallback`, and polls:
  the same snapshot comparison every `poll_interval`. (watchdog's PollingObserver would have
  to walk ignored folders, or take a thread per folder.)

Debounce: the daemon calls `poll(now)` each tick. Paths seen since the last poll are
stamped with that `now`; once no new path has come for `debounce`, one trigger carries
them all. Nothing is kept while a run of the loop is running (`is_running()`): the run's
own edits must not trigger it again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from daemon.git.safe import Git
from daemon.globs import any_path_matches
from daemon.scheduling.inbox_watch import inotify_limit_message, is_inotify_limit
from daemon.state.events import EventLog
from daemon.state.eventtypes import Event
from daemon.state.records import Trigger

MAX_TRIGGER_PATHS = 200
_BATCH = 2000


def _rel_parts_hidden(rel: str) -> bool:
    return ".git" in rel.split("/")


class _Callback:
    """watchdog's WatchCallback: queues (path, is_dir, kind) for the poll to handle."""

    def __init__(self, watcher: ChangeWatcher) -> None:
        self.watcher = watcher

    def on_event(self, event: Any) -> None:
        w = self.watcher
        with w._lock:
            folder = w._wd_dir.get(event.wd)
            if folder is None or not event.name:
                return
            path = os.path.join(folder, os.fsdecode(event.name))
            if event.is_create or event.is_moved_to:
                kind = "created"
            elif event.is_delete or event.is_moved_from:
                kind = "deleted"
            else:
                kind = "modified"
            w._raw.append((path, bool(event.is_directory), kind))

    def on_watch_deleted(self, wd: Any) -> None:
        w = self.watcher
        with w._lock:
            folder = w._wd_dir.pop(wd, None)
            if folder is not None and w._dir_wd.get(folder) == wd:
                del w._dir_wd[folder]

    def on_queue_overflow(self) -> None:
        with self.watcher._lock:
            self.watcher._overflow = True


class ChangeWatcher:
    """Watches one loop's repository for changes to its on_change globs."""

    def __init__(
        self,
        loop: str,
        repo: Path,
        globs: Sequence[str],
        debounce: float | timedelta,
        ignore_under: Iterable[Path],
        is_running: Callable[[], bool],
        events: EventLog | None = None,
        poll_interval: float = 2.0,
    ) -> None:
        self.loop = loop
        self.repo = Path(repo).resolve()
        self.globs = list(globs)
        self.debounce = debounce if isinstance(debounce, timedelta) else timedelta(seconds=debounce)
        self.ignore_under = [Path(p).expanduser().resolve() for p in ignore_under]
        self.is_running = is_running
        self.events = events
        self.poll_interval = timedelta(seconds=poll_interval)
        self.mode = "stopped"  # "inotify" | "polling" | "stopped"
        self.warning = ""
        self._git = Git(self.repo, user_config=True)  # what the person ignores
        self._lock = threading.Lock()
        self._raw: list[tuple[str, bool, str]] = []
        self._overflow = False
        self._fd: Any = None
        self._callback = _Callback(self)
        self._wd_dir: dict[Any, str] = {}
        self._dir_wd: dict[str, Any] = {}
        self._dirs: set[str] = set()
        self._snapshot: dict[str, tuple[int, int]] = {}
        self._ignored_cache: dict[str, bool] = {}
        self._pending: set[str] = set()
        self._last_activity: datetime | None = None
        self._last_scan: datetime | None = None
        self._notes: list[tuple[Event, dict[str, Any]]] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Walk the tree, take the snapshot and start watching (or polling)."""
        dirs, files = self._walk([""])
        self._dirs = set(dirs)
        self._snapshot = self._stat_files(files)
        try:
            self._start_inotify()
            self.mode = "inotify"
        except (ImportError, AttributeError) as exc:
            self._fall_back(f"inotify is not available here ({exc}); polling instead")
        except OSError as exc:
            if not is_inotify_limit(exc):
                raise
            self._fall_back(inotify_limit_message(exc, f"{self.repo} for loop {self.loop!r}"))

    def stop(self) -> None:
        self._stop_inotify()
        self.mode = "stopped"

    def alive(self) -> bool:
        """Whether the watching works: the reading thread runs, or polling is on."""
        if self.mode == "polling":
            return True
        return self.mode == "inotify" and self._fd is not None and self._fd.is_alive()

    def watched_folders(self) -> list[str]:
        """The folders watched (inotify) or walked (polling), relative; "" is the top."""
        return sorted(self._dirs)

    def pending(self) -> list[str]:
        """Paths waiting for the debounce to pass, and raw events not yet handled."""
        with self._lock:
            raw = [p for p, _, _ in self._raw]
        return sorted(self._pending) + raw

    def _fall_back(self, message: str) -> None:
        self._stop_inotify()
        self.mode = "polling"
        self.warning = message
        self._notes.append((Event.WATCH_FALLBACK, {"reason": message}))

    def _start_inotify(self) -> None:
        from watchdog.observers.inotify_c import InotifyConstants as C
        from watchdog.observers.inotify_c import InotifyFD

        self._mask = (
            C.IN_CREATE
            | C.IN_DELETE
            | C.IN_MODIFY
            | C.IN_CLOSE_WRITE
            | C.IN_ATTRIB
            | C.IN_MOVED_FROM
            | C.IN_MOVED_TO
            | C.IN_ONLYDIR
            | C.IN_DONT_FOLLOW
            | C.IN_EXCL_UNLINK
        )
        self._fd = InotifyFD()
        self._fd.start()
        try:
            for rel in sorted(self._dirs):
                self._add_watch(rel)
        except BaseException:
            self._stop_inotify()
            raise

    def _stop_inotify(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fd.stop()
                fd.join(timeout=5)
            except Exception:  # noqa: BLE001 - a dead thread may fail to stop; it is gone
                pass
        with self._lock:
            self._wd_dir.clear()
            self._dir_wd.clear()
            self._raw.clear()
            self._overflow = False

    def _add_watch(self, rel: str) -> None:
        path = os.fsencode(self.repo / rel if rel else self.repo)
        try:
            wd = self._fd.add_callback(path, self._mask, self._callback, id(self._callback))
        except FileNotFoundError:
            return  # gone again before it could be watched
        except NotADirectoryError:
            return
        with self._lock:
            self._wd_dir[wd] = os.fsdecode(path)
            self._dir_wd[os.fsdecode(path)] = wd

    def _remove_watches_under(self, rel: str) -> None:
        prefix = str(self.repo / rel)
        with self._lock:
            gone = [
                (d, wd)
                for d, wd in self._dir_wd.items()
                if d == prefix or d.startswith(prefix + "/")
            ]
            for d, wd in gone:
                del self._dir_wd[d]
                self._wd_dir.pop(wd, None)
        if self._fd is not None and gone:
            for _, wd in gone:
                try:
                    self._fd.remove_callbacks([(wd, id(self._callback))])
                except OSError:
                    continue

    # ------------------------------------------------------------------ the tree
    def _excluded(self, path: Path) -> bool:
        return any(path == root or root in path.parents for root in self.ignore_under)

    def _check_ignore(self, paths: Sequence[str], folders: bool) -> set[str]:
        """The paths git ignores (folders are asked with a trailing `/`)."""
        out: set[str] = set()
        for i in range(0, len(paths), _BATCH):
            batch = paths[i : i + _BATCH]
            data = b"\0".join(os.fsencode(p + "/" if folders else p) for p in batch) + b"\0"
            proc = self._git.run("check-ignore", "--stdin", "-z", input=data, check=False)
            if proc.returncode not in (0, 1):
                continue  # git could not say: watch it rather than miss it
            for item in proc.stdout.split(b"\0"):
                if item:
                    out.add(os.fsdecode(item).rstrip("/"))
        return out

    def _ignored_files(self, paths: Iterable[str]) -> set[str]:
        unknown = sorted(p for p in paths if p not in self._ignored_cache)
        if unknown:
            ignored = self._check_ignore(unknown, folders=False)
            for p in unknown:
                self._ignored_cache[p] = p in ignored
        return {p for p in paths if self._ignored_cache.get(p)}

    def _walk(self, roots: Sequence[str]) -> tuple[list[str], list[str]]:
        """Folders under `roots` that git does not ignore (roots included), and the files
        in them that the globs cover (not yet filtered for ignored files)."""
        folders: list[str] = []
        files: list[str] = []
        level = list(roots)
        while level:
            folders.extend(level)
            children: list[str] = []
            for rel in level:
                try:
                    entries = list(os.scandir(self.repo / rel if rel else self.repo))
                except OSError:
                    continue
                for entry in entries:
                    child = f"{rel}/{entry.name}" if rel else entry.name
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    if is_dir:
                        if entry.name != ".git" and not self._excluded(Path(entry.path)):
                            children.append(child)
                    elif any_path_matches(self.globs, child):
                        files.append(child)
            ignored = self._check_ignore(children, folders=True) if children else set()
            level = [c for c in children if c not in ignored]
        return folders, files

    def _stat_files(self, files: Iterable[str]) -> dict[str, tuple[int, int]]:
        files = list(files)
        ignored = self._ignored_files(files)
        out = {}
        for rel in files:
            if rel in ignored:
                continue
            try:
                st = os.stat(self.repo / rel, follow_symlinks=False)
            except OSError:
                continue
            out[rel] = (st.st_mtime_ns, st.st_size)
        return out

    def _refresh_snapshot(self, paths: Iterable[str]) -> None:
        paths = list(paths)
        fresh = self._stat_files(paths)
        for rel in paths:
            if rel in fresh:
                self._snapshot[rel] = fresh[rel]
            else:
                self._snapshot.pop(rel, None)

    def _rescan(self) -> set[str]:
        """Walk the tree again; the covered paths that differ from the snapshot."""
        dirs, files = self._walk([""])
        self._dirs = set(dirs)
        fresh = self._stat_files(files)
        old = self._snapshot
        changed = {p for p in set(old) | set(fresh) if old.get(p) != fresh.get(p)}
        self._snapshot = fresh
        return changed

    # ------------------------------------------------------------------ each tick
    def _drain(self) -> set[str]:
        with self._lock:
            raw, self._raw = self._raw, []
        candidates: set[str] = set()
        new_dirs: set[str] = set()
        for path, is_dir, kind in raw:
            rel = os.path.relpath(path, self.repo)
            if rel.startswith("..") or _rel_parts_hidden(rel) or self._excluded(Path(path)):
                continue
            if is_dir:
                if kind == "created":
                    new_dirs.add(rel)
                elif kind == "deleted":
                    self._remove_watches_under(rel)
                    self._dirs = {d for d in self._dirs if d != rel and not d.startswith(rel + "/")}
                    candidates |= {p for p in self._snapshot if p.startswith(rel + "/")}
                    new_dirs = {d for d in new_dirs if d != rel and not d.startswith(rel + "/")}
                continue
            if os.path.basename(rel) == ".gitignore":
                self._ignored_cache.clear()
            if any_path_matches(self.globs, rel):
                candidates.add(rel)
        fresh_dirs = sorted(d for d in new_dirs if os.path.isdir(self.repo / d))
        if fresh_dirs:
            ignored = self._check_ignore(fresh_dirs, folders=True)
            roots = [d for d in fresh_dirs if d not in ignored and d not in self._dirs]
            if roots:
                dirs, files = self._walk(roots)
                for d in dirs:
                    if d not in self._dirs:
                        self._dirs.add(d)
                        if self._fd is not None:
                            self._add_watch(d)
                candidates |= set(files)
        return candidates

    def poll(self, now: datetime) -> list[Trigger]:
        """Handle what happened since the last poll; return the trigger that is due, if any."""
        for kind, fields in self._notes:
            if self.events is not None:
                self.events.append(kind, now, loop=self.loop, **fields)
        self._notes.clear()

        candidates: set[str] = set()
        if self.mode == "inotify":
            with self._lock:
                overflow = self._overflow
            dead = self._fd is None or not self._fd.is_alive()
            if overflow or dead:
                reason = "event queue overflow" if overflow else "watcher thread stopped"
                candidates |= self._restart(now, reason)
            else:
                try:
                    candidates |= self._drain()
                except OSError as exc:
                    if not is_inotify_limit(exc):
                        raise
                    self._fall_back(
                        inotify_limit_message(exc, f"{self.repo} for loop {self.loop!r}")
                    )
        if self.mode == "polling":
            if self._last_scan is None or now - self._last_scan >= self.poll_interval:
                self._last_scan = now
                candidates |= self._rescan()

        if self.is_running():
            # The run's own edits: remember them as the known state, trigger nothing.
            self._refresh_snapshot(candidates | self._pending)
            self._pending.clear()
            self._last_activity = None
            return []

        candidates -= self._ignored_files(candidates)
        if candidates:
            self._pending |= candidates
            self._last_activity = now
        if not self._pending or self._last_activity is None:
            return []
        if now - self._last_activity < self.debounce:
            return []
        paths = sorted(self._pending)
        self._refresh_snapshot(paths)
        self._pending.clear()
        self._last_activity = None
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        trigger = Trigger(
            loop=self.loop,
            kind="change",
            reason=f"{len(paths)} changed: {shown}",
            paths=paths[:MAX_TRIGGER_PATHS],
            ts=now,
        )
        return [trigger]

    def _restart(self, now: datetime, reason: str) -> set[str]:
        """Start watching afresh after lost events; the paths that changed meanwhile."""
        self._stop_inotify()
        changed = self._rescan()
        try:
            self._start_inotify()
        except OSError as exc:
            if not is_inotify_limit(exc):
                raise
            self._fall_back(inotify_limit_message(exc, f"{self.repo} for loop {self.loop!r}"))
        if self.events is not None:
            self.events.append(
                Event.WATCH_RESCAN,
                now,
                loop=self.loop,
                reason=reason,
                changed=len(changed),
                mode=self.mode,
            )
        return changed

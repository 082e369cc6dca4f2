"""on_change watcher and inbox watcher: real files, real inotify, poll(now) with fixed times."""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from daemon.scheduling.changes import ChangeWatcher
from daemon.scheduling.inbox_watch import InboxWatcher
from daemon.state.events import EventLog
from daemon.state.records import Trigger
from daemon.state.store import StateStore
from tests.helpers import git, in_fresh_interpreter, make_repo, take_triggers

T0 = datetime(2026, 11, 29, 2, 0, 0, tzinfo=UTC)


def wait_for(condition, timeout: float = 5.0) -> None:
    """Wait (bounded) for watchdog to deliver; not a timing assertion."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("the watcher did not see the change in time")


class Rig:
    def __init__(self, tmp_path: Path, globs: list[str], debounce: float = 10.0) -> None:
        self.repo = make_repo(
            tmp_path / "repo",
            {
                ".gitignore": "node_modules/\n*.pyc\nbuild/\n",
                "src/app.py": "x = 1\n",
                "docs/readme.md": "docs\n",
            },
        )
        for rel in ("node_modules/pkg/index.js", "build/out.txt", "src/app.pyc"):
            (self.repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.repo / rel).write_text("ignored\n")
        (self.repo / ".loopd-wt").mkdir()
        self.running = False
        self.events = EventLog(tmp_path / "events.jsonl")
        self.watcher = ChangeWatcher(
            "app",
            self.repo,
            globs,
            debounce,
            [self.repo / ".loopd-wt"],
            lambda: self.running,
            events=self.events,
        )

    def write(self, rel: str, text: str = "changed\n") -> None:
        path = self.repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def settle(self, rel: str) -> None:
        """Wait until the watcher has seen `rel` and no more events are arriving."""
        wait_for(lambda: any(p.endswith(rel) for p in self.watcher.pending()))
        seen: list[int] = []

        def quiet() -> bool:
            seen.append(len(self.watcher.pending()))
            time.sleep(0.02)
            return len(seen) >= 3 and len(set(seen[-3:])) == 1

        wait_for(quiet)

    def event_types(self) -> list[str]:
        return [e["type"] for e in self.events.read()]


@pytest.fixture
def rig(tmp_path: Path):
    r = Rig(tmp_path, ["src/**", "*.toml"])
    r.watcher.start()
    yield r
    r.watcher.stop()


def test_debounced_trigger_after_quiet_period(rig: Rig) -> None:
    assert rig.watcher.mode == "inotify" and rig.watcher.alive()
    rig.write("src/app.py")
    rig.settle("src/app.py")
    assert rig.watcher.poll(T0) == []
    assert rig.watcher.poll(T0 + timedelta(seconds=9)) == []
    # A second change inside the window restarts it.
    rig.write("src/new.py")
    rig.settle("src/new.py")
    assert rig.watcher.poll(T0 + timedelta(seconds=9.5)) == []
    assert rig.watcher.poll(T0 + timedelta(seconds=19)) == []
    (trigger,) = rig.watcher.poll(T0 + timedelta(seconds=19.5))
    assert (trigger.loop, trigger.kind) == ("app", "change")
    assert trigger.paths == ["src/app.py", "src/new.py"]
    assert trigger.ts == T0 + timedelta(seconds=19.5)
    assert rig.watcher.poll(T0 + timedelta(seconds=60)) == []


def test_paths_outside_the_globs_ignored_files_and_git_do_not_trigger(rig: Rig) -> None:
    watched = rig.watcher.watched_folders()
    assert "src" in watched and "docs" in watched
    assert not any(f.startswith(("node_modules", "build", ".git", ".loopd-wt")) for f in watched)
    rig.write("docs/readme.md")
    rig.write("src/app.pyc", "still ignored\n")
    rig.write(".loopd-wt/src/x.py")
    git(rig.repo, "commit", "-q", "--allow-empty", "-m", "touches .git only")
    rig.write("settings.toml")  # a sentinel that does match, to know events arrived
    rig.settle("settings.toml")
    rig.watcher.poll(T0)
    (trigger,) = rig.watcher.poll(T0 + timedelta(seconds=10))
    assert trigger.paths == ["settings.toml"]


def test_new_folders_are_watched_unless_ignored(rig: Rig) -> None:
    rig.write("src/pkg/deep/mod.py")
    rig.settle("src/pkg")
    rig.watcher.poll(T0)  # the new folder is checked, watched, and scanned
    assert "src/pkg/deep" in rig.watcher.watched_folders()
    rig.write("src/pkg/deep/later.py")
    rig.settle("later.py")
    (rig.repo / "src" / "node_modules" / "x").mkdir(parents=True)
    rig.write("src/node_modules/x/ignored.py")
    time.sleep(0.1)
    rig.watcher.poll(T0 + timedelta(seconds=1))
    assert not any("node_modules" in f for f in rig.watcher.watched_folders())
    (trigger,) = rig.watcher.poll(T0 + timedelta(seconds=11))
    assert trigger.paths == ["src/pkg/deep/later.py", "src/pkg/deep/mod.py"]
    assert not any("node_modules" in f for f in rig.watcher.watched_folders())


def test_changes_during_a_run_of_the_loop_are_dropped(rig: Rig) -> None:
    rig.running = True
    rig.write("src/app.py", "the agent edits in place\n")
    rig.settle("src/app.py")
    assert rig.watcher.poll(T0) == []
    rig.running = False
    assert rig.watcher.poll(T0 + timedelta(seconds=30)) == []
    # A later rescan does not bring the run's edits back.
    rig.watcher._callback.on_queue_overflow()
    assert rig.watcher.poll(T0 + timedelta(seconds=31)) == []
    assert rig.watcher.poll(T0 + timedelta(seconds=60)) == []


def test_queue_overflow_forces_a_rescan_and_an_event(rig: Rig) -> None:
    rig.watcher._stop_inotify()  # events are lost from here on ...
    rig.write("src/lost.py")
    rig.watcher._start_inotify()
    rig.watcher._callback.on_queue_overflow()  # ... and the kernel says so
    assert rig.watcher.poll(T0) == []
    assert "watch_rescan" in rig.event_types()
    (trigger,) = rig.watcher.poll(T0 + timedelta(seconds=10))
    assert trigger.paths == ["src/lost.py"]


def test_a_dead_watcher_thread_is_restarted_with_a_rescan(rig: Rig) -> None:
    rig.watcher._fd.stop()
    rig.watcher._fd.join(timeout=5)
    assert not rig.watcher.alive()
    rig.write("src/while_dead.py")
    rig.watcher.poll(T0)
    assert rig.watcher.alive()
    rescans = [e for e in rig.events.read() if e["type"] == "watch_rescan"]
    assert rescans and rescans[0]["reason"] == "watcher thread stopped"
    (trigger,) = rig.watcher.poll(T0 + timedelta(seconds=10))
    assert trigger.paths == ["src/while_dead.py"]
    # Watching works again after the restart.
    rig.write("src/after.py")
    rig.settle("src/after.py")
    rig.watcher.poll(T0 + timedelta(seconds=11))
    (trigger,) = rig.watcher.poll(T0 + timedelta(seconds=21))
    assert trigger.paths == ["src/after.py"]


def test_inotify_limit_gives_a_clear_message_and_polls(tmp_path: Path, monkeypatch) -> None:
    from watchdog.observers.inotify_c import InotifyFD

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "inotify watch limit reached")

    monkeypatch.setattr(InotifyFD, "add_callback", full)
    rig = Rig(tmp_path, ["src/**"], debounce=5)
    rig.watcher.start()
    try:
        assert rig.watcher.mode == "polling" and rig.watcher.alive()
        assert "/proc/sys/fs/inotify/max_user_watches" in rig.watcher.warning
        assert "sysctl" in rig.watcher.warning
        assert rig.watcher.poll(T0) == []
        assert "watch_fallback" in rig.event_types()
        rig.write("src/app.py", "a longer body than before\n")
        rig.write("src/app.pyc", "ignored, changed\n")
        assert rig.watcher.poll(T0 + timedelta(seconds=1)) == []  # before the poll interval
        assert rig.watcher.poll(T0 + timedelta(seconds=2)) == []  # seen, debounce starts
        (trigger,) = rig.watcher.poll(T0 + timedelta(seconds=7))
        assert trigger.paths == ["src/app.py"]
    finally:
        rig.watcher.stop()


def test_inbox_watcher_wakes_on_a_trigger_file(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    wake = threading.Event()
    watcher = InboxWatcher(store.inbox_dir, wake)
    watcher.start()
    try:
        assert watcher.alive()
        assert not wake.is_set()
        store.put_trigger(Trigger(loop="app", kind="manual", ts=T0))
        assert wake.wait(5)
        wake.clear()
        assert [t.loop for t in take_triggers(store)] == ["app"]
    finally:
        watcher.stop()
    assert not watcher.alive()


def test_inbox_watcher_wakes_for_a_file_already_waiting(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    store.put_trigger(Trigger(loop="app", kind="push", ts=T0))
    wake = threading.Event()
    watcher = InboxWatcher(store.inbox_dir, wake)
    watcher.start()
    try:
        assert wake.is_set()
    finally:
        watcher.stop()


def inotify_instances() -> int:
    """inotify descriptors this process holds (/proc/self/fd links to anon_inode:inotify)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            continue
    return count


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_the_watchers_use_inotify_not_polling(tmp_path: Path) -> None:
    in_fresh_interpreter("tests.test_changes:watchers_use_inotify", tmp_path)


def watchers_use_inotify(tmp_path: Path) -> None:
    """The body of the test above, in a process of its own (it counts the process's
    inotify descriptors)."""
    before = inotify_instances()
    inbox = InboxWatcher(tmp_path / "inbox", threading.Event())
    inbox.start()
    rig = Rig(tmp_path, ["src/**"])
    rig.watcher.start()
    try:
        assert inbox.mode == "inotify" and rig.watcher.mode == "inotify"
        assert not inbox.warning and not rig.watcher.warning
        # Kernel instances, no polling thread: the change watcher's own, and the inbox's
        # through watchdog's process-wide reader (which watchdog may also be closing from an
        # earlier observer, so the count is a range).
        assert before + 1 <= inotify_instances() <= before + 2
    finally:
        rig.watcher.stop()
        inbox.stop()
    # The change watcher closes its own at stop; watchdog's shared reader ends by its own
    # lifecycle, so at most that one stays.
    wait_for(lambda: inotify_instances() <= before + 1, timeout=30)


def test_inbox_watcher_wakes_when_a_hook_record_is_closed(tmp_path: Path) -> None:
    """A git hook writes its record in place (no rename): the close says it is whole."""
    store = StateStore(tmp_path / "state")
    wake = threading.Event()
    watcher = InboxWatcher(store.inbox_dir, wake)
    watcher.start()
    try:
        with open(store.inbox_dir / "hook-1-0.hook", "w") as fh:
            assert wake.wait(5)  # created
            wake.clear()
            fh.write("loopd-hook-record 1\n")
        assert wake.wait(5)  # closed
    finally:
        watcher.stop()

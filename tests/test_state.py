"""The state store: atomic private files, the event log's repair and rotation, the home lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from daemon.state.events import EventLog
from daemon.state.lock import HomeLock, LockHeld
from daemon.state.records import (
    AttemptRecord,
    RunRecord,
    RunTrigger,
    StatusFile,
    Trigger,
    make_run_id,
)
from daemon.state.store import StateStore
from tests.helpers import take_triggers

NOW = datetime(2026, 11, 29, 2, 14, 0, 250000, tzinfo=UTC)


def test_run_records_round_trip_with_the_design_keys(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    run_id = store.new_run_id("review", NOW)
    assert run_id.startswith("20261129T021400Z-review-")
    run = RunRecord(
        id=run_id,
        loop="review",
        task="t",
        trigger=RunTrigger(kind="push", ref="refs/heads/main", ts=NOW),
        started=NOW,
        attempts=[AttemptRecord(n=1, started=NOW, score=8, verdict="ok")],
    )
    store.save_run(run)
    path = store.run_dir(run_id) / "run.toml"
    text = path.read_text()
    for key in ("id", "loop", "task", "started", "branch", "tokens", "rules_fired"):
        assert f"\n{key} = " in f"\n{text}"
    assert "[trigger]" in text and "[[attempts]]" in text
    assert store.load_run(run_id) == run
    assert path.stat().st_mode & 0o777 == 0o600
    assert store.run_dir(run_id).stat().st_mode & 0o777 == 0o700
    assert not [p for p in store.run_dir(run_id).iterdir() if p.name.endswith(".tmp")]


def test_run_ids_sort_by_time_within_a_second() -> None:
    early = make_run_id("a", NOW)
    later = make_run_id("a", NOW.replace(microsecond=900000))
    assert early < later
    assert make_run_id("a", NOW, bump=1) > early


def test_a_torn_last_event_line_is_repaired(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.append("trigger", NOW, loop="a", kind="manual", reason="x")
    with path.open("ab") as fh:
        fh.write(b'{"ts": "2026-11-29T02:14:00Z", "type": "run_sta')
    log = EventLog(path)
    log.repair()
    log.append("run_started", NOW, loop="a", trigger="manual", reason="x")
    lines = path.read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["trigger", "run_started"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_the_event_log_rotates_past_its_size(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path, rotate_bytes=2000)
    for i in range(100):
        log.append("tick_error", NOW, error=str(i))
    rotated = sorted(tmp_path.glob("events-*.jsonl"))
    assert rotated, "no rotation happened"
    numbers = []
    for file in [*rotated, path]:
        numbers += [int(json.loads(line)["error"]) for line in file.read_text().splitlines()]
    assert sorted(numbers) == list(range(100))
    assert all(f.stat().st_size <= 2000 + 200 for f in rotated)


def test_a_workers_event_log_rotates_under_its_own_name(tmp_path: Path) -> None:
    path = tmp_path / "worker-events.jsonl"
    log = EventLog(path, rotate_bytes=2000)
    for i in range(100):
        log.append("tick_error", NOW, error=str(i))
    assert sorted(tmp_path.glob("worker-events-*.jsonl"))
    assert not list(tmp_path.glob("events-*.jsonl"))  # the home's rotated logs are its own


def test_the_inbox_takes_valid_triggers_and_sets_bad_files_aside(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    store.put_trigger(Trigger(loop="a", kind="manual", reason="x", ts=NOW))
    (store.inbox_dir / "zz-bad.json").write_text("{not json")
    (taken,) = take_triggers(store)
    assert taken.loop == "a" and taken.reason == "x" and taken.id.endswith(".json")
    assert (store.inbox_dir / "bad" / "zz-bad.json").exists()
    assert take_triggers(store) == []
    assert any(e["type"] == "trigger_rejected" for e in store.events.read())


def test_status_file_round_trips(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    status = StatusFile()
    status.daemon.pid = 42
    status.daemon.started = NOW
    store.save_status(status)
    assert store.load_status().daemon.pid == 42
    assert store.status_path.stat().st_mode & 0o777 == 0o600


def test_the_lock_names_its_holder_and_is_not_inherited(tmp_path: Path) -> None:
    path = tmp_path / "state" / "loopd.lock"
    lock = HomeLock(path)
    lock.acquire()
    try:
        with pytest.raises(LockHeld) as info:
            HomeLock(path).acquire()
        assert info.value.pid == os.getpid()
        assert str(os.getpid()) in str(info.value)
        # A child process (an agent) does not hold the lock's descriptor.
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "import os; print(' '.join(os.readlink(f'/proc/self/fd/{f}')"
                " for f in os.listdir('/proc/self/fd') if os.path.exists(f'/proc/self/fd/{f}')))",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert str(path) not in child.stdout
    finally:
        lock.release()
    HomeLock(path).acquire()


# cross-process safety ------------------------------------------------------------------------
WRITER = """
import sys, time
from datetime import datetime, UTC
from pathlib import Path
sys.path.insert(0, {root!r})
from daemon.state.events import EventLog
log = EventLog(Path({path!r}), rotate_bytes={rotate})
go = Path({go!r})
while not go.exists():
    time.sleep(0.001)
for i in range({count}):
    log.append("tick_error", datetime.now(UTC), error=f"{writer} {{i}}")
"""


def test_two_processes_rotating_the_event_log_lose_and_repeat_nothing(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    go = tmp_path / "go"
    count, rotate = 1500, 3000
    root = str(Path(__file__).resolve().parent.parent)
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER.format(
                    root=root, path=str(path), rotate=rotate, go=str(go), count=count, writer=w
                ),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in ("a", "b")
    ]
    go.write_text("go")
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    rotated = sorted(tmp_path.glob("events-*.jsonl"))
    assert len(rotated) > 20
    seen = []
    for file in [*rotated, path]:
        seen += [e["error"].split() for e in map(json.loads, file.read_text().splitlines())]
    assert sorted(seen) == sorted([w, str(n)] for w in ("a", "b") for n in range(count))
    # One rotation per full file: a second rotation of a file just rotated would leave a
    # small (or empty) events-N.jsonl behind.
    assert all(f.stat().st_size >= rotate for f in rotated)


PROBER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from daemon.state.lock import HomeLock
lock = HomeLock(Path({path!r}))
stop = Path({stop!r})
Path({ready!r}).write_text("ready")
probes = 0
while not stop.exists():
    lock.is_held()
    probes += 1
print(probes)
"""


def test_probing_the_lock_never_makes_a_real_acquire_fail(tmp_path: Path) -> None:
    path, stop, ready = tmp_path / "loopd.lock", tmp_path / "stop", tmp_path / "ready"
    root = str(Path(__file__).resolve().parent.parent)
    first = HomeLock(path)
    first.acquire()  # creates the file
    first.release()
    prober = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PROBER.format(root=root, path=str(path), stop=str(stop), ready=str(ready)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        while not ready.exists():
            assert prober.poll() is None
        failures = 0
        for _ in range(3000):
            lock = HomeLock(path)
            try:
                lock.acquire()
            except LockHeld:
                failures += 1
                continue
            lock.release()
    finally:
        stop.write_text("stop")
        out, _ = prober.communicate(timeout=60)
    assert int(out) > 0
    assert failures == 0


def test_the_probe_sees_a_lock_another_process_holds(tmp_path: Path) -> None:
    path = tmp_path / "loopd.lock"
    root = str(Path(__file__).resolve().parent.parent)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {root!r})\n"
            "from pathlib import Path\nfrom daemon.state.lock import HomeLock\n"
            f"HomeLock(Path({str(path)!r})).acquire(); print('held', flush=True); input()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        probe = HomeLock(path)
        assert probe.is_held() and probe.holder() == holder.pid
        with pytest.raises(LockHeld):
            probe.acquire()
    finally:
        holder.communicate("\n", timeout=30)
    assert not HomeLock(path).is_held()


def _review_run(store: StateStore) -> RunRecord:
    run_id = store.new_run_id("review", NOW)
    trigger = RunTrigger(kind="manual")
    return RunRecord(id=run_id, loop="review", task="t", trigger=trigger, started=NOW)


def test_a_run_begun_behind_is_whole_and_live_once_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daemon.state import store as store_module

    store = StateStore(tmp_path / "state")
    run = _review_run(store)
    synced: list[list[Path]] = []
    real = store_module.fsync_dirs
    monkeypatch.setattr(store_module, "fsync_dirs", lambda p: (synced.append(list(p)), real(p)))
    store.begin_run(run, behind=True)
    store.settle_run(run.id)
    assert store.load_run(run.id) == run and store.live_runs() == [run.id]
    folder = store.run_dir(run.id)
    # One pass over the folders naming the record, the live marker and the run's folder.
    assert synced == [[folder, store.root / "live", folder.parent]]
    store.settle_run(run.id)  # nothing left: a second settle returns at once


def test_a_failed_write_behind_is_raised_by_the_runs_next_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daemon.state import store as store_module

    store = StateStore(tmp_path / "state")
    run = _review_run(store)
    store.begin_run(run)

    def full(path: Path, text: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_module, "write_atomic", full)
    run.phase = "running"
    store.save_run_behind(run)
    store.wait_behind()  # waits, raises nothing: the error is the run's own
    monkeypatch.undo()
    with pytest.raises(OSError, match="No space"):
        store.save_run(run)
    assert store.load_run(run.id).phase == "preparing"  # the older record, whole
    store.save_run(run)  # raised once: the next save writes
    assert store.load_run(run.id).phase == "running"

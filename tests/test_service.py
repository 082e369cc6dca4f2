"""The daemon's parts in-process, with real files and injected clocks: intake under a burst,
the queue file, recovery, reload, and the heartbeat's cadence."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import daemon.daemon as assembly
import daemon.runs.recovery as recovery
import daemon.service.recover as recover_module
from daemon.daemon import ConfigFatal, Daemon
from daemon.home import Home
from daemon.runparts.services import RunServices
from daemon.scheduling.queue import RunQueue
from daemon.scheduling.timer import CronTimer
from daemon.service import intake as intake_module
from daemon.service.context import Context, Flags
from daemon.service.intake import Intake
from daemon.service.status import HEARTBEAT_EVERY, StatusBoard
from daemon.service.workers import WorkerPool
from daemon.state.queuefile import QueueFile
from daemon.state.records import RunRecord, RunTrigger, Trigger
from daemon.state.store import StateStore
from tests.helpers import make_home, make_repo

NOW = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)


class Clocks:
    """A wall clock that moves a millisecond per reading, and a monotonic clock set by hand."""

    def __init__(self) -> None:
        self.ticks = itertools.count()
        self.offset = timedelta(0)  # a jump of the wall clock
        self.mono = 1000.0

    def wall(self) -> datetime:
        return NOW + self.offset + timedelta(milliseconds=next(self.ticks))

    def monotonic(self) -> float:
        return self.mono


def home_with(tmp_path: Path, paused: bool = True, **loop: str) -> Home:
    repo = make_repo(tmp_path / "repo")
    lines = [f'repo = "{repo}"', 'task = "t"', 'agent = "a"', 'on_push = ["main"]']
    lines += [f"{key} = {json.dumps(value)}" for key, value in loop.items()]
    root = make_home(
        tmp_path / "home",
        '[agents.a]\nadapter = "command"\ncommand = ["true"]\n',
        {"app": "\n".join(lines) + "\n"},
    )
    if paused:
        (root / "state" / "paused").mkdir(parents=True)
        (root / "state" / "paused" / "app").write_text("")
    return Home(root)


def context(home: Home, clocks: Clocks) -> Context:
    loaded = home.load()
    store = StateStore(home.state_dir)
    services = RunServices(home=home, config=loaded.daemon, store=store, clock=clocks.wall)
    return Context(
        home=home,
        store=store,
        flags=Flags(),
        config=loaded,
        services=services,
        clock=clocks.wall,
        monotonic=clocks.monotonic,
    )


def intake_of(ctx: Context) -> Intake:
    return Intake(ctx, RunQueue(), CronTimer(ctx.store.root / "schedule.toml"), lambda _: False)


def push(ctx: Context, count: int) -> list[str]:
    """`count` push triggers in the inbox, as the git hooks write them; their file names."""
    names = []
    for n in range(count):
        at = NOW + timedelta(milliseconds=n)  # inbox names sort by this time
        trigger = Trigger(loop="app", kind="push", ref="refs/heads/main", reason=f"p{n}", ts=at)
        names.append(ctx.store.put_trigger(trigger).name)
    return names


def recorded(ctx: Context) -> list[str]:
    """Inbox names the `trigger`, `trigger_merged` and `trigger_skipped` events record."""
    types = ("trigger", "trigger_merged", "trigger_skipped")
    events = ctx.store.events.read()
    return list(dict.fromkeys(e["inbox"] for e in events if e["type"] in types and e["inbox"]))


@pytest.fixture
def no_subreaper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Daemon.start in the test process must not make pytest the subreaper of everything."""
    # Patched where Daemon.start calls it: daemon.daemon imports it at its top.
    monkeypatch.setattr(assembly, "set_child_subreaper", lambda: False)


@pytest.fixture
def started(tmp_path: Path, no_subreaper: None) -> Iterator[tuple[Daemon, Clocks]]:
    clocks = Clocks()
    daemon = Daemon.start(home_with(tmp_path), NOW, clock=clocks.wall, monotonic=clocks.monotonic)
    yield daemon, clocks
    daemon.stop(NOW, grace=0)


# intake under a burst ------------------------------------------------------------------------
def test_inbox_files_are_deleted_only_after_the_queue_file_holds_them(tmp_path: Path) -> None:
    ctx = context(home_with(tmp_path), Clocks())
    intake = intake_of(ctx)
    names = push(ctx, 5)
    assert intake.take_inbox(NOW) is False
    assert ctx.store.inbox_names() == names  # offered and recorded, not yet deleted
    assert sorted(recorded(ctx)) == sorted(names)
    assert not ctx.store.queue_path.exists()
    intake.save()
    saved = ctx.store.load_queue()
    assert saved.taken == names
    [pending] = saved.pending
    assert pending.trigger.id == names[0] and pending.merged_count == 4
    assert ctx.store.inbox_names() == []
    # The next tick finds nothing; a save without changes writes nothing.
    assert intake.take_inbox(NOW) is False
    mtime = ctx.store.queue_path.stat().st_mtime_ns
    intake.save()
    assert ctx.store.queue_path.stat().st_mtime_ns == mtime


def test_a_crash_after_the_save_does_not_take_the_files_twice(tmp_path: Path) -> None:
    ctx = context(home_with(tmp_path), Clocks())
    names = push(ctx, 3)
    first = intake_of(ctx)
    first.take_inbox(NOW)
    # The save happened, the deletions did not (killed in between).
    ctx.store.save_queue(QueueFile(pending=first.queue.pending(), taken=names))
    before = len(ctx.store.events.read())
    outside = ctx.store.root / "outside.json"
    outside.write_text("{}")
    saved = ctx.store.load_queue()
    saved.taken.append("../outside.json")  # a queue file can only name inbox files
    ctx.store.save_queue(saved)
    again = intake_of(ctx)
    again.restore()
    assert ctx.store.inbox_names() == [] and outside.exists()
    assert again.take_inbox(NOW) is False
    assert len(ctx.store.events.read()) == before  # nothing offered twice
    [pending] = again.queue.pending()
    assert pending.merged_count == 2


def test_a_crash_before_the_save_leaves_every_trigger_to_be_taken_again(tmp_path: Path) -> None:
    ctx = context(home_with(tmp_path), Clocks())
    names = push(ctx, 3)
    intake_of(ctx).take_inbox(NOW)  # killed before its save
    again = intake_of(ctx)
    again.restore()
    again.take_inbox(NOW)
    again.save()
    [pending] = again.queue.pending()
    assert pending.merged_count == 2 and ctx.store.inbox_names() == []
    assert set(recorded(ctx)) == set(names)


def test_the_stop_flag_ends_a_burst_between_triggers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = context(home_with(tmp_path), Clocks())
    intake = intake_of(ctx)
    names = push(ctx, 30)
    offer = intake.offer

    def offer_then_signal(trigger: Trigger, now: datetime) -> None:
        offer(trigger, now)
        if len(recorded(ctx)) == 10:
            ctx.flags.stop.set()  # SIGTERM arrives while the tenth is taken

    monkeypatch.setattr(intake, "offer", offer_then_signal)
    assert intake.take_inbox(NOW) is True
    intake.save()
    assert recorded(ctx) == names[:10]
    assert ctx.store.inbox_names() == names[10:]  # left for the next start, not lost


def test_a_tick_takes_a_bounded_batch_and_asks_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(intake_module, "BATCH", 4)
    ctx = context(home_with(tmp_path), Clocks())
    intake = intake_of(ctx)
    names = push(ctx, 10)
    taken = []
    while True:
        more = intake.take_inbox(NOW)
        intake.save()
        taken.append(len(names) - len(ctx.store.inbox_names()))
        if not more:
            break
    assert taken == [4, 8, 10]
    assert intake.queue.pending()[0].merged_count == 9


def test_a_batch_also_ends_when_its_time_is_up(tmp_path: Path) -> None:
    clocks = Clocks()
    ctx = context(home_with(tmp_path), clocks)
    intake = intake_of(ctx)
    names = push(ctx, 5)
    offer = intake.offer

    def slow_offer(trigger: Trigger, now: datetime) -> None:
        offer(trigger, now)
        clocks.mono += 0.6  # each trigger takes 0.6 s of the batch's 1 s

    intake.offer = slow_offer  # type: ignore[method-assign]
    assert intake.take_inbox(NOW) is True
    assert recorded(ctx) == names[:2]


def test_events_are_stamped_when_written_not_when_the_tick_began(tmp_path: Path) -> None:
    ctx = context(home_with(tmp_path), Clocks())
    push(ctx, 3)
    intake_of(ctx).take_inbox(NOW)
    stamps = [e["ts"] for e in ctx.store.events.read() if e["type"].startswith("trigger")]
    assert len(stamps) == 5 and len(set(stamps)) == 5 and stamps == sorted(stamps)


def test_the_trigger_event_names_the_run_that_holds_it(tmp_path: Path) -> None:
    ctx = context(home_with(tmp_path), Clocks())
    intake = intake_of(ctx)
    first, second = push(ctx, 2)
    intake.take_inbox(NOW)
    [pending] = intake.queue.pending()
    by_inbox = {(e["type"], e["inbox"]): e for e in ctx.store.events.read() if e.get("inbox")}
    assert by_inbox[("trigger", first)]["run"] == pending.id
    assert by_inbox[("trigger", second)]["run"] == pending.id
    assert by_inbox[("trigger_merged", second)]["into"] == pending.id


def test_an_unreadable_queue_file_is_set_aside_and_named(tmp_path: Path) -> None:
    ctx = context(home_with(tmp_path), Clocks())
    warned = []
    ctx.store.warn = warned.append
    ctx.store.queue_path.write_bytes(b'[[pending]]\nid = "\xff"\n')
    intake = intake_of(ctx)
    intake.restore()
    assert intake.queue.pending() == []
    assert [w.path for w in warned] == [ctx.store.queue_path]
    aside = ctx.store.root / "queue.unreadable.toml"
    assert aside.read_bytes().endswith(b'"\xff"\n')
    assert any(e["type"] == "queue_unreadable" for e in ctx.store.events.read())


# start, recovery, reload ---------------------------------------------------------------------
def live_run(store: StateStore, run_id: str) -> None:
    run = RunRecord(
        id=run_id,
        loop="app",
        task="t",
        trigger=RunTrigger(kind="manual", ts=NOW),
        started=NOW,
        phase="running",
    )
    store.save_run(run)
    store.mark_live(run_id)


def test_one_broken_run_does_not_stop_the_recovery_of_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_subreaper: None
) -> None:
    home = home_with(tmp_path)
    store = StateStore(home.state_dir)
    broken, fine = "20261129T015000Z-app-0001", "20261129T015500Z-app-0002"
    live_run(store, broken)
    live_run(store, fine)
    real = recovery.recover_run

    def recover(services, loops, run_id, now):  # noqa: ANN001, ANN202
        if run_id == broken:
            raise RuntimeError("the record points somewhere odd")
        return real(services, loops, run_id, now)

    monkeypatch.setattr(recover_module, "recover_run", recover)  # where the daemon calls it
    daemon = Daemon.start(home, NOW)
    try:
        events = store.events.read()
        [failed] = [e for e in events if e["type"] == "run_recovery_failed"]
        assert failed["run"] == broken and "points somewhere odd" in failed["error"]
        assert store.load_run(fine).outcome == "interrupted"
        [retry] = daemon.intake.queue.pending("app")
        assert retry.trigger.kind == "retry" and retry.trigger.retry_of == fine
    finally:
        daemon.stop(NOW, grace=0)


def test_start_turns_any_exception_from_loading_into_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_subreaper: None
) -> None:
    home = home_with(tmp_path)

    def broken_load(self: Home):  # noqa: ANN202
        raise OverflowError("date value out of range")

    monkeypatch.setattr(Home, "load", broken_load)
    with pytest.raises(ConfigFatal, match="OverflowError: date value out of range"):
        Daemon.start(home, NOW)
    assert not StateStore(home.state_dir).lock.is_held()


def test_a_reload_survives_any_exception_and_keeps_the_running_configuration(
    started: tuple[Daemon, Clocks], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, _ = started
    config = daemon.ctx.config
    real_load = Home.load

    def broken_load(self: Home):  # noqa: ANN202
        raise OverflowError("date value out of range")

    monkeypatch.setattr(Home, "load", broken_load)
    message = daemon.reload(NOW)
    assert message.startswith("reload failed") and "OverflowError" in message
    assert daemon.ctx.config is config
    # A failure while applying the new configuration is undone too.
    monkeypatch.setattr(Home, "load", real_load)

    def broken_update(loops, now):  # noqa: ANN001, ANN202
        raise ValueError("no such timezone")

    monkeypatch.setattr(daemon.timer, "update", broken_update)
    message = daemon.reload(NOW)
    assert "ValueError: no such timezone" in message and daemon.ctx.config is config
    monkeypatch.undo()
    assert daemon.reload(NOW) == "reloaded: 1 loop(s)"
    types = [e["type"] for e in daemon.ctx.store.events.read()]
    assert types.count("reload_failed") >= 2 and types[-1] == "reloaded"


# the heartbeat -------------------------------------------------------------------------------
def test_the_heartbeat_follows_the_monotonic_clock_through_wall_clock_jumps(
    tmp_path: Path,
) -> None:
    clocks = Clocks()
    ctx = context(home_with(tmp_path), clocks)
    queue = RunQueue()
    board = StatusBoard(
        ctx, queue, CronTimer(ctx.store.root / "schedule.toml"), WorkerPool(ctx, queue), NOW
    )
    writes = []

    def save_status(status) -> None:  # noqa: ANN001
        writes.append(status.daemon.heartbeat)

    ctx.store.save_status = save_status  # type: ignore[method-assign]
    board.write(NOW)
    assert len(writes) == 1
    # The wall clock jumps back an hour: the heartbeat still comes every HEARTBEAT_EVERY.
    back = NOW - timedelta(hours=1)
    for step in range(1, 31):
        clocks.mono += 1
        board.write(back + timedelta(seconds=step))
    assert len(writes) == 1 + 30 // HEARTBEAT_EVERY
    # It jumps a day ahead: no flood of heartbeats either.
    ahead = NOW + timedelta(days=1)
    for step in range(1, 31):
        clocks.mono += 1
        board.write(ahead + timedelta(seconds=step))
    assert len(writes) == 1 + 60 // HEARTBEAT_EVERY
    assert writes[-1] == ahead + timedelta(seconds=30)  # the value is the wall clock

"""The run queue: overlap policies, merged triggers, concurrency, pause, cancel, threads."""

from __future__ import annotations

import re
import threading
import tomllib
from datetime import UTC, datetime, timedelta

from daemon.config import LoopConfig
from daemon.scheduling.queue import PendingRun, RunQueue
from daemon.state.queuefile import MERGED_KEPT, QueueFile
from daemon.state.records import RunRecord, Trigger
from daemon.state.store import dump_toml

NOW = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def config(overlap: str = "coalesce", max_queued: int = 10) -> LoopConfig:
    return LoopConfig(repo="/tmp", task="t", overlap=overlap, max_queued=max_queued)


def trig(loop: str = "app", n: int = 0, kind: str = "push") -> Trigger:
    return Trigger(
        loop=loop,
        kind=kind,
        reason=f"trigger {n}",
        ref=f"refs/heads/b{n}",
        ts=NOW + timedelta(seconds=n),
    )


# coalesce -----------------------------------------------------------------------------------
def test_coalesce_first_trigger_becomes_a_pending_run() -> None:
    queue = RunQueue()
    decision = queue.offer(trig(), config(), NOW)
    assert decision.action == "queued" and decision.event == "trigger"
    assert re.fullmatch(r"20260501T090000Z-app-[0-9a-f]{4}", decision.pending_id)
    assert queue.pending_count("app") == 1
    assert queue.pending("app")[0].id == decision.pending_id


def test_coalesce_merges_while_pending_even_when_nothing_runs() -> None:
    queue = RunQueue()
    first = queue.offer(trig(n=1), config(), NOW)
    second = queue.offer(trig(n=2), config(), NOW)
    assert second.action == "merged" and second.event == "trigger_merged"
    assert second.pending_id == first.pending_id
    [run] = queue.pending("app")
    assert [t.reason for t in run.merged] == ["trigger 2"]


def test_coalesce_ten_triggers_during_a_run_make_one_pending_run() -> None:
    queue = RunQueue()
    queue.offer(trig(n=0), config(), NOW)
    running = queue.next_ready(1)
    assert running is not None and queue.active("app") == running.id
    arrivals = [trig(n=n) for n in range(1, 11)]
    decisions = [queue.offer(t, config(), NOW) for t in arrivals]
    assert [d.action for d in decisions] == ["queued"] + ["merged"] * 9
    assert len({d.pending_id for d in decisions}) == 1
    [pending] = queue.pending("app")
    assert queue.pending_count("app") == 1
    assert [pending.trigger, *pending.merged] == arrivals  # all ten, in order
    assert queue.next_ready(1) is None  # the loop's run is still active
    queue.finished("app")
    started = queue.next_ready(1)
    assert started is pending and queue.pending_count("app") == 0


def test_merged_triggers_go_into_run_toml() -> None:
    queue = RunQueue()
    for n in range(3):
        queue.offer(trig(n=n), config(), NOW)
    [pending] = queue.pending()
    record = pending.run_trigger()
    assert (record.kind, record.reason, record.ref) == ("push", "trigger 0", "refs/heads/b0")
    assert [m["reason"] for m in record.merged] == ["trigger 1", "trigger 2"]
    run = RunRecord(id=pending.id, loop="app", task="t", trigger=record, started=NOW)
    data = tomllib.loads(dump_toml(run))
    assert [m["ref"] for m in data["trigger"]["merged"]] == ["refs/heads/b1", "refs/heads/b2"]
    assert data["trigger"]["merged_count"] == 2


def test_a_burst_keeps_a_count_and_the_last_few_merged_triggers() -> None:
    queue = RunQueue()
    for n in range(10_000):
        queue.offer(trig(n=n), config(), NOW)
    [pending] = queue.pending()
    assert pending.trigger.reason == "trigger 0" and pending.merged_count == 9_999
    kept = [t.reason for t in pending.merged]
    assert kept == [f"trigger {n}" for n in range(10_000 - MERGED_KEPT, 10_000)]
    record = pending.run_trigger()
    assert record.merged_count == 9_999 and len(record.merged) == MERGED_KEPT
    # The queue file stays small and reads back as it was.
    text = dump_toml(QueueFile(pending=queue.pending(), taken=["a.json"]))
    assert len(text) < 20_000
    again = QueueFile.model_validate(tomllib.loads(text))
    assert again.pending == queue.pending() and again.taken == ["a.json"]


def test_a_queue_file_from_before_merges_were_counted_is_bounded_on_reading() -> None:
    old = {
        "id": "20260501T080000Z-app-abcd",
        "loop": "app",
        "queued_at": NOW,
        "trigger": trig(n=0).model_dump(),
        "merged": [trig(n=n).model_dump() for n in range(1, 51)],
    }
    [pending] = QueueFile.model_validate({"pending": [old]}).pending
    assert pending.merged_count == 50 and len(pending.merged) == MERGED_KEPT
    assert pending.merged[-1].reason == "trigger 50"


def test_every_change_to_pending_runs_bumps_the_version() -> None:
    queue = RunQueue()
    seen = [queue.version]

    def changed() -> bool:
        seen.append(queue.version)
        return seen[-1] != seen[-2]

    queue.offer(trig(n=0), config(), NOW)
    assert changed()
    queue.offer(trig(n=1), config(), NOW)  # merged
    assert changed()
    queue.started("other")
    assert not changed()
    run = queue.next_ready(5)
    assert changed()
    queue.finished(run.loop)
    assert not changed()
    assert queue.offer(trig(n=2), config("skip"), NOW).action == "queued"
    assert changed()
    assert queue.offer(trig(n=3), config("skip"), NOW).action == "skipped"
    assert not changed()
    queue.cancel_pending("app")
    assert changed()


# skip ---------------------------------------------------------------------------------------
def test_skip_drops_while_pending_or_active() -> None:
    queue = RunQueue()
    skip = config("skip")
    assert queue.offer(trig(n=1), skip, NOW).action == "queued"
    pending_skip = queue.offer(trig(n=2), skip, NOW)
    assert pending_skip.action == "skipped" and pending_skip.event == "trigger_skipped"
    assert pending_skip.why and pending_skip.pending_id == ""
    assert queue.next_ready(1) is not None
    assert queue.offer(trig(n=3), skip, NOW).action == "skipped"
    assert queue.pending_count("app") == 0
    queue.finished("app")
    assert queue.offer(trig(n=4), skip, NOW).action == "queued"


# queue --------------------------------------------------------------------------------------
def test_queue_keeps_up_to_max_queued() -> None:
    queue = RunQueue()
    policy = config("queue", max_queued=3)
    assert queue.offer(trig(n=0), policy, NOW).action == "queued"
    queue.next_ready(1)  # one runs; three more may wait
    actions = [queue.offer(trig(n=n), policy, NOW).action for n in range(1, 6)]
    assert actions == ["queued", "queued", "queued", "dropped_queue_full", "dropped_queue_full"]
    full = queue.offer(trig(n=9), policy, NOW)
    assert full.event == "trigger_skipped" and "max_queued = 3" in full.why
    assert [p.trigger.reason for p in queue.pending("app")] == [
        "trigger 1",
        "trigger 2",
        "trigger 3",
    ]
    assert all(p.merged == [] for p in queue.pending("app"))
    assert len({p.id for p in queue.pending("app")}) == 3


def test_queue_runs_one_at_a_time_per_loop_in_order() -> None:
    queue = RunQueue()
    policy = config("queue")
    for n in range(3):
        queue.offer(trig(n=n), policy, NOW)
    order = []
    while (run := queue.next_ready(5)) is not None:
        order.append(run.trigger.reason)
        assert queue.next_ready(5) is None  # one active run per loop
        queue.finished("app")
    assert order == ["trigger 0", "trigger 1", "trigger 2"]


# limits, pause ------------------------------------------------------------------------------
def test_max_concurrent_runs_across_loops_oldest_first() -> None:
    queue = RunQueue()
    for n, name in enumerate(["c", "a", "b"]):
        queue.offer(trig(name, n), config(), NOW)
    first = queue.next_ready(2)
    second = queue.next_ready(2)
    assert (first.loop, second.loop) == ("c", "a")
    assert queue.next_ready(2) is None
    assert (queue.active("c"), queue.active("a")) == (first.id, second.id)
    queue.finished("a")
    third = queue.next_ready(2)
    assert third is not None and third.loop == "b"


def test_a_run_started_outside_the_queue_counts() -> None:
    queue = RunQueue()
    queue.started("app", "20260501T085000Z-app-beef")  # e.g. a run resumed in judging
    queue.offer(trig("app"), config(), NOW)
    queue.offer(trig("other"), config(), NOW)
    assert queue.next_ready(1) is None
    run = queue.next_ready(2)
    assert run is not None and run.loop == "other"
    queue.started("other")  # the daemon confirming the start keeps the RUN_ID
    assert queue.active("other") == run.id
    queue.finished("app")
    assert queue.next_ready(3).loop == "app"


def test_paused_loops_keep_their_pending_runs() -> None:
    queue = RunQueue()
    queue.offer(trig("app", 0), config(), NOW)
    queue.offer(trig("other", 1), config(), NOW)
    run = queue.next_ready(5, paused={"app"})
    assert run.loop == "other"
    assert queue.next_ready(5, paused={"app"}) is None
    assert queue.pending_count("app") == 1
    assert queue.next_ready(5).loop == "app"


# cancel, restore, ids ---------------------------------------------------------------------
def test_cancel_a_queued_run_by_its_run_id() -> None:
    queue = RunQueue()
    policy = config("queue")
    ids = [queue.offer(trig(n=n), policy, NOW).pending_id for n in range(3)]
    removed = queue.cancel_pending(run_id=ids[1])
    assert [r.id for r in removed] == [ids[1]]
    assert [p.id for p in queue.pending()] == [ids[0], ids[2]]
    assert queue.cancel_pending(run_id="20990101T000000Z-app-0000") == []
    assert queue.cancel_pending("app", ids[2])[0].id == ids[2]


def test_cancel_every_pending_run_of_a_loop_or_all() -> None:
    queue = RunQueue()
    for n in range(3):
        queue.offer(trig("app", n), config("queue"), NOW)
    queue.offer(trig("other", 9), config(), NOW)
    assert len(queue.cancel_pending("app")) == 3
    assert queue.pending_count("app") == 0 and queue.pending_count("other") == 1
    assert [r.loop for r in queue.cancel_pending()] == ["other"]
    assert queue.next_ready(5) is None


def test_restore_keeps_id_trigger_and_merged() -> None:
    saved = PendingRun(
        id="20260501T080000Z-app-abcd",
        loop="app",
        trigger=trig(n=1),
        queued_at=NOW,
        merged=[trig(n=2)],
    )
    queue = RunQueue()
    queue.restore(saved)
    queue.restore(saved)  # twice is once
    assert queue.pending_count("app") == 1
    decision = queue.offer(trig(n=3), config(), NOW)
    assert decision.action == "merged" and decision.pending_id == saved.id
    run = queue.next_ready(1)
    assert run.id == saved.id and [t.reason for t in run.merged] == ["trigger 2", "trigger 3"]


def test_ids_come_from_the_given_factory_and_stay_unique() -> None:
    names = iter(
        ["20260501T090000Z-app-0001", "20260501T090000Z-app-0001", "20260501T090000Z-app-0002"]
    )
    queue = RunQueue(new_id=lambda loop, now, bump: next(names))
    policy = config("queue")
    first = queue.offer(trig(n=1), policy, NOW).pending_id
    second = queue.offer(trig(n=2), policy, NOW).pending_id
    assert (first, second) == ("20260501T090000Z-app-0001", "20260501T090000Z-app-0002")


# threads ------------------------------------------------------------------------------------
def test_offers_from_many_threads_lose_nothing() -> None:
    queue = RunQueue()
    loops = [f"loop{i}" for i in range(4)]
    barrier = threading.Barrier(8)

    def offer_many(worker: int) -> None:
        barrier.wait()
        for n in range(200):
            name = loops[n % len(loops)]
            policy = config("coalesce") if name != "loop3" else config("queue", max_queued=10_000)
            queue.offer(trig(name, worker * 1000 + n), policy, NOW)

    threads = [threading.Thread(target=offer_many, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for name in loops[:3]:
        [run] = queue.pending(name)
        assert 1 + run.merged_count == 400 and len(run.merged) == MERGED_KEPT
    assert queue.pending_count("loop3") == 400
    assert len({p.id for p in queue.pending()}) == 403


def test_a_fire_handed_out_ahead_is_named_by_its_second_and_run_toml_keeps_it() -> None:
    fire = NOW + timedelta(minutes=1)
    early = Trigger(loop="app", kind="schedule", reason="scheduled", ts=NOW, not_before=fire)
    queue = RunQueue()
    queue.offer(early, config(), fire - timedelta(seconds=5))
    [pending] = queue.pending()
    assert pending.id.startswith("20260501T090100Z-app-")  # the fire's second, not the hand-out's
    assert pending.queued_at == fire - timedelta(seconds=5)
    # A restart within the lead keeps the moment: the queue file and run.toml hold it.
    [restored] = QueueFile.model_validate(
        tomllib.loads(dump_toml(QueueFile(pending=[pending])))
    ).pending
    assert restored.trigger.not_before == fire
    record = restored.run_trigger()
    run = RunRecord(id=pending.id, loop="app", task="t", trigger=record, started=NOW)
    assert tomllib.loads(dump_toml(run))["trigger"]["not_before"] == fire
    # Any other trigger keeps the time it was queued at, and has no moment.
    queue.offer(trig(loop="b"), config(), NOW)
    [other] = queue.pending("b")
    assert other.id.startswith("20260501T090000Z-b-") and other.run_trigger().not_before is None

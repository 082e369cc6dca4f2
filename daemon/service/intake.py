"""Triggers in: the inbox, the cron timer, file changes and recovery, through the overlap
policy into the run queue; the queue file, saved once per tick.

Under a burst (ten thousand pushes at once) a tick takes at most `BATCH` inbox files or
`BATCH_SECONDS`, and stops early when the stop flag is set, so the heartbeat and signals
keep going. An inbox file is deleted only after the queue file that holds it (or the event
that records it) is written; the names are saved with the queue as `taken`, and a restart
deletes those a crash left behind instead of taking them twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.config import Loop
from daemon.globs import wildmatch
from daemon.people.escalation import blocking_escalation
from daemon.scheduling.hook_script import take_records
from daemon.scheduling.queue import RunQueue
from daemon.scheduling.timer import CronTimer
from daemon.service.context import Context
from daemon.service.reload import not_loaded_why
from daemon.service.retries import retry_not_run
from daemon.service.skips import Skips
from daemon.state.eventtypes import Event
from daemon.state.queuefile import QueueFile
from daemon.state.records import Trigger
from daemon.state.store import UnreadableFile, read_model

BATCH = 500  # inbox files per tick
BATCH_SECONDS = 1.0  # and at most this long taking them
RELOAD_EVERY = 2.0  # seconds: a burst of triggers for a broken loop reloads once


class Intake:
    """Filters triggers, applies the overlap policy, and keeps `state/queue.toml`."""

    def __init__(
        self,
        ctx: Context,
        queue: RunQueue,
        timer: CronTimer,
        is_running: Callable[[str], bool],
        skips_file: Path | None = None,
    ) -> None:
        self.ctx = ctx
        self.queue = queue
        self.timer = timer
        self.is_running = is_running
        self._taken: list[str] = []  # inbox files offered since the queue was last saved
        self._taken_set: set[str] = set()
        self._saved_version = -1  # never saved: the first save always writes
        # The daemon's reload, for a trigger naming a loop whose file is newer than the
        # configuration (the watcher's reload may not have come yet).
        self.reload: Callable[[datetime], object] | None = None
        self._reloaded_for: dict[str, float] = {}  # loop -> monotonic time of that reload
        # Timer fires skipped in a row are recorded once a streak; the daemon keeps the
        # streaks in `skips_file` across a kill -9.
        self.skips = Skips(ctx, skips_file)

    # start -------------------------------------------------------------------------------
    def restore(self) -> None:
        """Queue again what a stopped daemon had queued, and finish its inbox deletions."""
        store = self.ctx.store
        try:
            saved = read_model(store.queue_path, QueueFile)
        except FileNotFoundError:
            saved = QueueFile()
        except UnreadableFile as exc:
            store.report_unreadable(exc)
            # Kept for a person: the next save would replace it.
            aside = store.queue_path.with_name("queue.unreadable.toml")
            os.replace(store.queue_path, aside)
            self.ctx.event(Event.QUEUE_UNREADABLE, file=str(aside), error=exc.reason)
            saved = QueueFile()
        # A crash between the save and the deletions left these: their triggers are held
        # by the saved queue or recorded as events already.
        store.remove_inbox(saved.taken)
        for pending in saved.pending:
            if pending.loop not in self.ctx.loops:
                self.ctx.event(
                    Event.QUEUE_ENTRY_DROPPED,
                    loop=pending.loop,
                    run=pending.id,
                    error="the loop is no longer valid",
                )
            elif (store.run_dir(pending.id) / "run.toml").exists():
                continue  # it started before the crash: recovery takes care of it
            else:
                self.queue.restore(pending)

    def start_schedule(self, now: datetime) -> None:
        """Misses while loopd was down are recorded; the latest is caught up when recent."""
        for trigger, misses in self.timer.start(self.ctx.scheduled_loops(), now):
            for miss in misses:
                self.ctx.event(Event.SCHEDULE_MISSED, **miss)
            if trigger is not None:
                self.offer(trigger, now)
        self._record_steps()

    # each tick -----------------------------------------------------------------------------
    def take_inbox(self, now: datetime) -> bool:
        """Offer waiting inbox files (a bounded batch); True when more wait."""
        store = self.ctx.store
        stop = self.ctx.flags.stop
        # The git hooks leave records of what moved; they become trigger files here.
        take_records(str(store.inbox_dir))
        deadline = self.ctx.monotonic() + BATCH_SECONDS
        offered = 0
        for name in store.inbox_names():
            if name in self._taken_set:
                continue  # offered already; deleted once the queue is saved
            if stop.is_set() or offered >= BATCH or self.ctx.monotonic() > deadline:
                return True
            trigger = store.read_trigger(name)
            if trigger is None:
                continue  # set aside as bad (an event says so), or gone
            self.offer(trigger, now)
            self._taken.append(name)
            self._taken_set.add(name)
            offered += 1
        return False

    def take_schedule(self, now: datetime) -> None:
        for trigger in self.timer.due(now):
            self.offer(trigger, now)
        for miss in self.timer.take_missed():
            self.ctx.event(Event.SCHEDULE_MISSED, **miss)
        self._record_steps()

    def _record_steps(self) -> None:
        for step in self.timer.take_stepped():
            self.ctx.event(Event.CLOCK_STEPPED_BACK, **step)

    def offer(self, trigger: Trigger, now: datetime) -> None:
        """A trigger arrives: filter it, apply the loop's overlap policy, record it."""
        ctx = self.ctx
        fields: dict[str, Any] = {
            "kind": trigger.kind,
            "reason": trigger.reason,
            "inbox": trigger.id or None,
        }
        if trigger.ref:
            fields.update(ref=trigger.ref, old=trigger.old, new=trigger.new)
        if trigger.kind == "push" and trigger.remote:
            fields["remote"] = trigger.remote

        def write(type: str, run: str | None = None, **more: Any) -> None:
            # Stamped as written: a long tick does not give its events one time.
            ctx.store.events.append(type, ctx.clock(), loop=trigger.loop, run=run, **fields, **more)

        def skip(type: str, why: str, escalation: str = "") -> None:
            if self._new_skip(trigger, type, why, escalation):
                write(type, why=why, **({"escalation": escalation} if escalation else {}))
            # else: a timer's fire skipped again for the same reason; its streak counts it
            if trigger.retry_of:
                self._retry_not_run(trigger, why)

        loop = ctx.loops.get(trigger.loop)
        if loop is None and self._reload_for(trigger.loop, now):
            loop = ctx.loops.get(trigger.loop)
        if loop is None:
            why = not_loaded_why(ctx.home, trigger.loop, ctx.config, not ctx.config_error)
            return skip(Event.TRIGGER_SKIPPED, why)
        if trigger.kind == "push" and trigger.ref.startswith("refs/heads/"):
            # The branch moved: the runs landed on it are looked at now, not in 5 minutes.
            moved = (str(loop.config.repo_path.resolve()), trigger.ref.removeprefix("refs/heads/"))
            ctx.targets_moved.add(moved)
        why = _filtered(trigger, loop, self.is_running)
        if why:
            return skip(Event.TRIGGER_SKIPPED, why)
        held = blocking_escalation(ctx.store, loop.name, loop.config.task, trigger.kind)
        if held is not None:
            why = "an escalation for this task is open; resolve it with `loopd escalations`"
            # A timer's fire is `held`, once a hold; an inbox file's is skipped, each its own.
            return skip(Event.TRIGGER_SKIPPED if trigger.id else "held", why, held.run)
        decision = self.queue.offer(trigger, loop.config, now)
        skipped = decision.event == "trigger_skipped"
        if skipped and not self._new_skip(trigger, "trigger_skipped", decision.why):
            return  # a timer's fire skipped again for the same reason: its streak counts it
        if not trigger.id and not skipped:
            self.skips.end(trigger.loop)
        # `joined`: the trigger went into a run queued before it (`loopd trigger` says so).
        joined = {"joined": True} if decision.action == "merged" else {}
        write(Event.TRIGGER, run=decision.pending_id or None, **joined)
        if decision.action == "merged":
            write(Event.TRIGGER_MERGED, run=decision.pending_id, into=decision.pending_id)
        elif skipped:
            write(Event.TRIGGER_SKIPPED, why=decision.why)

    def _new_skip(self, trigger: Trigger, type: str, why: str, escalation: str = "") -> bool:
        """Whether a skipped trigger gets its event: each from the inbox, a timer's only
        when its loop's streak of skips for this reason starts."""
        if trigger.id or trigger.retry_of:
            return True  # someone may wait on its own event; a retry is never folded
        return self.skips.first(trigger.loop, type, why, escalation, self.ctx.clock())

    def _retry_not_run(self, trigger: Trigger, why: str) -> None:
        """A retry that cannot run says so on the run it retries, and to the person."""

        retry_not_run(self.ctx, trigger, why)

    def _reload_for(self, name: str, now: datetime) -> bool:
        """Reload once (at most every RELOAD_EVERY s per name) for a loop file not loaded yet."""
        if self.reload is None or not name or "/" in name or name.startswith("."):
            return False
        if not (self.ctx.home.loops_dir / f"{name}.toml").is_file():
            return False
        mono = self.ctx.monotonic()
        if mono - self._reloaded_for.get(name, float("-inf")) < RELOAD_EVERY:
            return False
        self._reloaded_for[name] = mono
        self.reload(now)
        return True

    def cancel_queued(self) -> None:
        """`loopd cancel` of a run still in the queue: it ends `cancelled` without starting."""
        from daemon.runs.executor import end_without_agent, new_run

        store = self.ctx.store
        for pending in self.queue.pending():
            if not store.cancel_requested(pending.id):
                continue
            self.queue.cancel_pending(pending.loop, pending.id)
            store.clear_cancel(pending.id)
            loop = self.ctx.loops.get(pending.loop)
            if loop is not None:
                run = new_run(self.ctx.services, loop, pending)
                end_without_agent(self.ctx.services, run, "cancelled", "cancelled while queued")
            else:
                self.ctx.event(
                    Event.RUN_FINISHED,
                    loop=pending.loop,
                    run=pending.id,
                    outcome="cancelled",
                    reason="cancelled while queued",
                )

    def save(self) -> None:
        """Write the queue file when it changed, then delete the inbox files it accounts for."""
        taken = self._taken
        version = self.queue.version
        if version == self._saved_version and not taken:
            return
        # A run started since the last save leaves the queue here: its record durable first.
        self.ctx.store.wait_behind()
        self.ctx.store.save_queue(QueueFile(pending=self.queue.pending(), taken=taken))
        self._saved_version = version
        self.ctx.store.remove_inbox(taken)
        self._taken = []
        self._taken_set = set()


def _filtered(trigger: Trigger, loop: Loop, is_running: Callable[[str], bool]) -> str:
    """Why the loop's settings turn the trigger away ("": they do not)."""
    if not loop.config.enabled:
        return f"loop disabled: set enabled = true in {loop.path} to run it"
    if trigger.kind != "push":
        return ""
    branch = trigger.ref.removeprefix("refs/heads/")
    if trigger.remote:
        if trigger.remote != loop.config.hosted or not any(
            wildmatch(g, branch) for g in loop.config.on_remote_push
        ):
            return "branch not in on_remote_push"
        return ""
    if not any(wildmatch(g, branch) for g in loop.config.on_push):
        return "branch not in on_push"
    if loop.config.isolation == "in-place" and is_running(loop.name):
        # An in-place run commits on the watched branch itself: not a new push.
        return "the loop's own in-place run"
    return ""

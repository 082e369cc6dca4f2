"""The landing queue: a succeeded run lands through its target's queue, one at a time.

Finishing a run (runs/finish.py, on both engines: Temporal's `finish` activity runs at the
home) and `loopd land` call `land_queued`. The run enters `state/landing/KEY.toml`, waits
for the target's lock (`locks/landing-KEY.lock`: another run of any process landing on the
same target goes first), then lands by `land_run` as it always did: the run's branch
brought onto the target as it is now, setup and the checks on the very commit that lands,
the target moved by compare-and-swap (looked at again, and the checks run again, when a
person moved it meanwhile). Each step is written before it is done: a loopd killed while
moving the target finds `moving` and the commit on restart, and git says whether the
target holds it (then the landing is recorded, never redone); at any earlier step the
landing is simply done again, since nothing moved. Runs take their turn in the order they
entered (state/landingqueue.py `landing_turn`).

A textual conflict is given to the run's agent once (`resolve`, passed in from above: the
conflict attempt of runs/conflict.py), still holding the target's lock, unless a
conflicting file is protected or runs programs (landing/guard.py `never_resolved`): then it
goes to the person at once. A resolved merge, verified as any attempt, lands as the run's
branch; one not resolved leaves a single escalation naming both sides.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from daemon.config import LoopConfig
from daemon.git.userrepo import UserRepo
from daemon.landing.guard import never_resolved
from daemon.landing.land import land_run, lands
from daemon.landing.landed import finish_moved
from daemon.landing.merge import FINISH, Conflict
from daemon.landing.stoppoint import stop_point
from daemon.processes import process_mark
from daemon.redact import redact
from daemon.runparts.journal import RunJournal
from daemon.runparts.startpoint import is_ancestor
from daemon.state.eventtypes import Event
from daemon.state.landingqueue import (
    LandingQueue,
    QueuedLanding,
    landing_turn,
    load_landing_queue,
    update_landing_queue,
)

# The run's conflict attempt: the verified merge commit (the run's branch now), or None with
# why not (the agent did not resolve it, or the run had its one attempt already).
Resolver = Callable[[Conflict], "tuple[str | None, str]"]


def land_queued(
    journal: RunJournal, cfg: LoopConfig | None, resolve: Resolver | None = None
) -> None:
    """Land `journal`'s run through its target's queue (nothing when it does not land);
    `resolve`: the conflict attempt a textual conflict gets (None: it goes to the person)."""
    run = journal.run
    if not lands(run) or run.landed or not run.target:
        land_run(journal, cfg)  # records why not, as without a queue
        return
    store = journal.services.store
    repo, target = run.repo, run.target

    def enter(queue: LandingQueue) -> None:
        entry = queue.find(run.id)
        if entry is None:  # a restart finds it at its place
            entry = QueuedLanding(run_id=run.id, loop=run.loop, queued_at=journal.now())
            queue.runs.append(entry)
        entry.pid, entry.mark = os.getpid(), process_mark(os.getpid())

    queue = update_landing_queue(store, repo, target, enter)
    ahead = [q.run_id for q in queue.runs if q.run_id != run.id]
    journal.event(Event.LANDING_QUEUED, target=target, ahead=ahead)
    stop_point("queued", run.id)
    with landing_turn(store, repo, target, run.id):
        _landed_meanwhile(journal)
        entry = queue_entry(journal)
        if entry is not None and entry.step == "moving" and not run.landed:
            if entry.new and _holds(journal, entry.new):
                finish_moved(journal, cfg, entry.old, entry.new)  # killed after the move
        if not run.landed:
            _land_resolving(journal, cfg, resolve)
        update_landing_queue(store, repo, target, lambda q: _leave(q, run.id))


def _land_resolving(journal: RunJournal, cfg: LoopConfig | None, resolve: Resolver | None) -> None:
    """Land; a textual conflict goes to the conflict attempt when it may, and a merge it
    resolved lands (the target moving meanwhile is merged as any landing)."""

    def land() -> Conflict | None:
        _step(journal, "landing")
        stop_point("landing", journal.run.id)
        return land_run(journal, cfg, on_move=lambda old, new: _moving(journal, old, new))

    run = journal.run
    cause = run.cause  # the run's own, which a resolved conflict's landing gives back
    found = land()
    if found is None or resolve is None or cfg is None:
        return
    kept = never_resolved(UserRepo.locate(Path(run.repo)), cfg, found.files)
    if kept:
        why = f"the conflict is in {', '.join(kept[:5])}, which no agent resolves"
        journal.event(Event.CONFLICT_KEPT, paths=kept[:50], reason=why)
        _add_reason(journal, why)
        return
    merged, why = resolve(found)
    if merged is None:
        _add_reason(journal, why)
        return
    blocked = land()
    if run.landed:
        run.cause = cause
        journal.save()
    elif blocked is not None:  # the target moved again, into another conflict
        _add_reason(journal, "the agent resolved one conflict; the target moved into another")


def _add_reason(journal: RunJournal, why: str) -> None:
    """The escalation's reason: the conflict, both sides, why no agent resolved it, then how
    to finish it."""
    run = journal.run
    said, finish, how = run.landing.partition(FINISH)
    run.landing = redact(f"{said}; {why}{finish}{how}")[:2000]
    journal.save()


def _landed_meanwhile(journal: RunJournal) -> None:
    """Another finisher of the same run (a Temporal activity retried after its timeout while
    the first still ran) landed it while this one waited: take its record of the landing."""
    run = journal.run
    try:
        stored = journal.services.store.load_run(run.id)
    except Exception:  # noqa: BLE001 - unreadable: this finisher's own record goes on
        return
    if stored.landed and not run.landed:
        run.landed, run.landed_as, run.landed_how = True, stored.landed_as, stored.landed_how
        run.landing, run.cause = stored.landing, stored.cause


def queue_entry(journal: RunJournal) -> QueuedLanding | None:
    """The run's place in its target's queue, as written."""
    run = journal.run
    return load_landing_queue(journal.services.store, run.repo, run.target).find(run.id)


def _step(journal: RunJournal, step: str, old: str = "", new: str = "") -> None:
    """Write the step down before it is done."""
    run = journal.run

    def mark(queue: LandingQueue) -> None:
        entry = queue.find(run.id)
        if entry is None:
            entry = QueuedLanding(run_id=run.id, loop=run.loop, queued_at=journal.now())
            queue.runs.append(entry)
        if step == "landing":
            entry.tries += 1
            entry.step, entry.old, entry.new = "landing", "", ""
        else:
            entry.step, entry.old, entry.new = "moving", old, new

    update_landing_queue(journal.services.store, run.repo, run.target, mark)


def _moving(journal: RunJournal, old: str, new: str) -> None:
    _step(journal, "moving", old, new)
    stop_point("moving", journal.run.id)


def _leave(queue: LandingQueue, run_id: str) -> None:
    queue.runs = [q for q in queue.runs if q.run_id != run_id]


def _holds(journal: RunJournal, commit: str) -> bool:
    """Whether the target contains `commit` (a killed landing's move happened)."""
    run = journal.run
    user = UserRepo.locate(Path(run.repo))
    current = user.ref(f"refs/heads/{run.target}")
    return bool(current) and is_ancestor(user, commit, current)

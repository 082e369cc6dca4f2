"""What a landing sets off once the target moved: the record, the run's branch, the runs it
was built on, other loops whose `on_push` names the target."""

from __future__ import annotations

from pathlib import Path

from daemon.config import LoopConfig
from daemon.git.integrity import ledger_writer
from daemon.git.userrepo import UserRepo
from daemon.globs import any_branch_matches
from daemon.runparts.journal import RunJournal
from daemon.state.eventtypes import Event
from daemon.state.records import Trigger


def record_landed(journal: RunJournal, commit: str) -> None:
    """The run landed as `commit` by its `land`: its record and event, and the runs under it."""
    run = journal.run
    run.landed, run.landed_as, run.landing = True, commit, ""
    run.landed_how = run.land
    journal.event(Event.LANDED, land=run.land, target=run.target, commit=commit)
    mark_built_on(journal, commit)


def finish_moved(journal: RunJournal, cfg: LoopConfig | None, old: str, new: str) -> None:
    """A loopd killed after moving the target from `old` to `new` (git says it holds `new`):
    what the landing does after the move, then the record, as if it had not been killed."""
    after_move(journal, cfg, UserRepo.locate(Path(journal.run.repo)), old, new)
    record_landed(journal, new)
    journal.run.phase = "idle"
    journal.save()


def after_move(
    journal: RunJournal, cfg: LoopConfig | None, user: UserRepo, old: str, new: str
) -> None:
    """The target moved from `old` to `new`: a squashed run's branch to it, other loops told."""
    run = journal.run
    if cfg is not None and cfg.land_commits == "squash" and user.ref(f"refs/heads/{run.branch}"):
        # The run's branch is what landed (its old tip: the ref ledger).
        writer = ledger_writer(journal)
        user.set_ref(writer, f"refs/heads/{run.branch}", new, "landed as one commit")
    trigger_others(journal, old, new)


def trigger_others(journal: RunJournal, old: str, new: str) -> None:
    """Other loops of this home on the same repository whose `on_push` names the target."""
    services, run = journal.services, journal.run
    try:
        loops = services.home.load().loops
    except Exception:  # noqa: BLE001 - a broken home file must not undo a landing
        return
    repo = Path(run.repo).resolve()
    for loop in loops.values():
        cfg = loop.config
        if loop.name == run.loop or not cfg.enabled or cfg.repo_path != repo:
            continue
        if not any_branch_matches(cfg.on_push, run.target):
            continue
        services.store.put_trigger(
            Trigger(
                loop=loop.name,
                kind="push",
                reason=f"loopd landed run {run.id} on {run.target}",
                ref=f"refs/heads/{run.target}",
                old=old,
                new=new,
                ts=journal.now(),
            )
        )
        journal.event(Event.LANDING_TRIGGERED, triggered=loop.name, target=run.target)


def mark_built_on(journal: RunJournal, commit: str) -> None:
    """The runs this one was built on landed with it."""
    store = journal.services.store
    for other_id in journal.run.built_on:
        try:
            other = store.load_run(other_id)
        except Exception:  # noqa: BLE001 - a pruned or unreadable record stays as it is
            continue
        if not other.landed:
            other.landed, other.landed_as, other.landing = True, commit, ""
            other.landed_how = f"with run {journal.run.id}"
            store.save_run(other)
            journal.event(Event.LANDED_WITH, landed_run=other_id, commit=commit)

"""The report's "After landing": per loop and per agent, what people kept of the landed runs
after 7 days, the reverts first, each with the person's commit message (docs/aftermath.md)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from pydantic import BaseModel, computed_field

from daemon.people.since import run_ids_since
from daemon.state.aftermath import Aftermath, LaterCommit, load_aftermath
from daemon.state.store import StateStore, UnreadableFile

TALLY_WINDOW, TALLY_DAYS = "7d", 7
LOOKBACK_DAYS = 30  # landings whose 7-day window ended in the last 30 days
STATES = ("kept", "edited", "reverted", "gone")


class Change(BaseModel):
    """A person's commit that edited or reverted a landed run."""

    run: str
    commit: str
    author: str
    message: str
    revert: bool


class Tally(BaseModel):
    """A loop's or an agent's landed runs as their 7-day window found them."""

    name: str
    window: str = TALLY_WINDOW
    counts: dict[str, int] = {}
    changes: list[Change] = []  # the reverts first, then the edits

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @computed_field  # type: ignore[prop-decorator]
    @property
    def line(self) -> str:
        """`kept after 7 days: 23 of 25 (92%), edited 1, reverted 1`."""
        kept, total = self.counts.get("kept", 0), self.total
        text = f"kept after {TALLY_DAYS} days: {kept} of {total} ({kept / total:.0%})"
        for state in STATES[1:]:
            if self.counts.get(state):
                text += f", {state} {self.counts[state]}"
        return text


class AftermathReport(BaseModel):
    """Tallies by loop and by agent profile."""

    loops: list[Tally] = []
    agents: list[Tally] = []

    def lines(self) -> list[str]:
        """Markdown lines: a tally per loop and per agent, its reverts and edits under it."""
        out = []
        for kind, tallies in (("loop", self.loops), ("agent", self.agents)):
            for t in tallies:
                out.append(f"- {kind} {t.name}: {t.line}")
                for c in t.changes[:10]:
                    what = "reverted" if c.revert else "edited"
                    out.append(f"  - {what} {c.run} by {c.author}: {c.message} ({c.commit[:12]})")
        return out


def aftermath_report(store: StateStore, now: datetime) -> AftermathReport | None:
    """The tallies of the runs whose 7-day window ended in the last LOOKBACK_DAYS; None when
    there are none."""
    since = now - timedelta(days=LOOKBACK_DAYS + TALLY_DAYS)
    records = []
    for run_id in run_ids_since(store, since):
        try:
            record = load_aftermath(store.run_dir(run_id))
        except UnreadableFile:
            continue
        if record is not None and TALLY_WINDOW in record.windows:
            records.append(record)
    if not records:
        return None
    return AftermathReport(
        loops=_tallies((r.loop, r) for r in records),
        agents=_tallies((r.agent, r) for r in records if r.agent),
    )


def _tallies(pairs: Iterable[tuple[str, Aftermath]]) -> list[Tally]:
    found: dict[str, Tally] = {}
    for name, record in pairs:
        mark = record.windows[TALLY_WINDOW]
        if mark.state == "pending":
            continue
        tally = found.setdefault(name, Tally(name=name))
        tally.counts[mark.state] = tally.counts.get(mark.state, 0) + 1
        deadline = record.landed_at + timedelta(days=TALLY_DAYS)
        theirs = [c for c in record.commits if c.date <= deadline]
        if mark.state in ("reverted", "edited"):
            tally.changes += [_change(record.run, c) for c in theirs]
    for tally in found.values():
        tally.changes.sort(key=lambda c: not c.revert)
    return sorted(found.values(), key=lambda t: t.name)


def _change(run: str, commit: LaterCommit) -> Change:
    return Change(
        run=run,
        commit=commit.commit,
        author=commit.author,
        message=commit.message,
        revert=commit.revert,
    )

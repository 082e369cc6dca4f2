"""Reading `state/escalations/`: an escalation file's front matter, the open ones.

Below people/escalation.py (which writes, resolves and supersedes them) so that
people/progress.py can list open escalations without importing what updates progress.
Which files there are and how their front matter is read is daemon/plain/escalations.py's,
shared with the read commands' plain path, which checks the fields without this model.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from daemon.plain.escalations import escalation_paths, read_front_matter
from daemon.state.store import StateStore


class Escalation(BaseModel):
    """The front matter of an escalation file."""

    model_config = ConfigDict(extra="ignore")

    run: str
    loop: str
    task: str
    status: Literal["open", "resolved", "superseded"] = "open"
    escalated: datetime
    cause: str = "unknown"
    outcome: str = ""
    reason: str = ""
    branch: str = ""
    attempts: int = 0
    best_score: int | None = None
    resolved: datetime | None = None
    note: str = ""
    retry: bool = False
    retry_trigger: str = ""  # the inbox file of the retry, when one was queued
    superseded_by: str = ""  # the later run of the same task that succeeded (or was skipped)
    # A person's label of the run's last attempt (`resolve --verdict`): `loopd calibrate`'s
    # --home-record reads it.
    verdict: Literal["", "good", "bad"] = ""
    # Later runs of the same task that escalated while this was open count here instead of
    # filing escalations of their own (people/escalation_repeat.py).
    count: int = 1  # runs this escalation stands for, its own included
    latest_run: str = ""  # the newest of them ("": only its own)
    latest: datetime | None = None
    latest_cause: str = ""
    latest_reason: str = ""
    notified: datetime | None = None  # when a person was last told of it (or of its repeats)
    notified_count: int = 1  # the count they were told then
    # Cause agent-login: the agent profile whose login was refused. One escalation stands for
    # the profile: later refused runs of any loop using it count here.
    profile: str = ""
    # The id to resolve it by: its file's name (RUN_ID, or RUN_ID-qN for a question), filled
    # in as it is read (files written before it was kept have none).
    id: str = ""

    def newest_run(self) -> str:
        """The newest run it stands for: the one whose evidence is freshest."""
        return self.latest_run or self.run

    @property
    def is_open(self) -> bool:
        return self.status == "open"


def read_escalation(path: Path) -> Escalation | None:
    """The front matter of one escalation file; None when it is not one loopd wrote."""
    data = read_front_matter(path)
    if data is None:
        return None
    try:
        meta = Escalation.model_validate(data)
    except ValidationError:
        return None
    meta.id = meta.id or path.stem
    return meta


def list_escalations(store: StateStore) -> list[Escalation]:
    """Every escalation, oldest first."""
    out = []
    for path in escalation_paths(store.root):
        meta = read_escalation(path)
        if meta is not None:
            out.append(meta)
    return out


def open_escalations(store: StateStore, loop: str | None = None) -> list[Escalation]:
    """Escalations waiting for a person, oldest first."""
    return [e for e in list_escalations(store) if e.is_open and (loop is None or e.loop == loop)]

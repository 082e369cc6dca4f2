"""`state/runs/RUN_ID/aftermath.toml`: what became of a landed run's lines on its target."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from daemon.state.atomic import write_atomic
from daemon.state.store import UnreadableFile, dump_toml, read_model

AFTERMATH_FILE = "aftermath.toml"
# pending: pushed, not (yet) seen on the target; the others: docs/aftermath.md.
AftermathState = Literal["pending", "kept", "edited", "reverted", "gone"]
# The marks after landing at which the state is kept as that window's (name, days).
WINDOWS: tuple[tuple[str, int], ...] = (("1d", 1), ("7d", 7), ("30d", 30))


class LaterCommit(BaseModel):
    """A commit on the target, not loopd's, that touched the run's files after it landed."""

    model_config = ConfigDict(extra="ignore")

    commit: str
    author: str
    date: datetime
    message: str  # its subject line
    revert: bool = False  # it reverts the run's commits (its message or its patch-id)
    added: int = 0  # lines it added and removed in the run's files
    removed: int = 0


class WindowMark(BaseModel):
    """The state as it stood when a window (1, 7, 30 days after landing) was first reached."""

    model_config = ConfigDict(extra="ignore")

    state: AftermathState
    checked_at: datetime
    lines_kept: int
    commits: int  # how many of `commits` it counted


class Aftermath(BaseModel):
    """A landed run followed on its target: its identity there, its lines, their state."""

    model_config = ConfigDict(extra="ignore")

    run: str
    loop: str
    agent: str = ""  # the loop's agent profile when the run was first followed
    target: str
    target_ref: str  # the ref followed: refs/heads/T, or refs/remotes/R/T for a push
    landed_at: datetime
    # The run's own commits as they landed (one, when landing squashed them), oldest first,
    # with the patch-ids (`git patch-id --stable`) of each and of the whole change and its
    # inverse: the identity that survives a rebase or a squash, and what a revert looks like.
    landed_commits: list[str]
    landed_as: str = ""  # the commit the target was moved to (a merge of the run, say)
    patch_ids: list[str] = []
    net_patch_id: str = ""
    revert_patch_ids: list[str] = []
    # The non-blank lines the run added, per file, as short hashes (the text stays in git).
    lines: dict[str, list[str]] = {}
    lines_landed: int = 0
    lines_kept: int = 0
    kept_by_file: dict[str, int] = {}  # so a check reads only the files new commits touch
    state: AftermathState = "kept"
    on_target: bool = True  # its commits (or a copy by patch-id) were seen on the target
    commits: list[LaterCommit] = []
    last_seen: str = ""  # the target's commit when last checked
    checked_at: datetime | None = None
    windows: dict[str, WindowMark] = {}
    taught: bool = False  # its failure after landing went through a post-mortem
    recounted: bool = False  # the rules it followed lost the help it counted for them

    @property
    def window(self) -> str:
        """The last window reached ("" before the first day)."""
        reached = [name for name, _ in WINDOWS if name in self.windows]
        return reached[-1] if reached else ""

    def reverts(self) -> list[LaterCommit]:
        return [c for c in self.commits if c.revert]


def aftermath_path(run_dir: Path) -> Path:
    return run_dir / AFTERMATH_FILE


def save_aftermath(run_dir: Path, record: Aftermath, durable: bool = True) -> None:
    """Write the run's aftermath atomically (and durably unless `durable` is False: a record
    a machine's crash cuts is made again from git, docs/aftermath.md)."""
    write_atomic(aftermath_path(run_dir), dump_toml(record), durable=durable)


def load_aftermath(run_dir: Path) -> Aftermath | None:
    """The run's aftermath; None when it has none yet. UnreadableFile when broken."""
    try:
        return read_model(aftermath_path(run_dir), Aftermath)
    except FileNotFoundError:
        return None


__all__ = [
    "AFTERMATH_FILE",
    "WINDOWS",
    "Aftermath",
    "AftermathState",
    "LaterCommit",
    "UnreadableFile",
    "WindowMark",
    "aftermath_path",
    "load_aftermath",
    "save_aftermath",
]

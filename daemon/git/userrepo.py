"""The user's repository as loopd's git sees it: named by its git directories, never discovered.

The directories are found once, when a run's tree is made (before any agent of the run),
and recorded; later commands name them. Every ref loopd moves here is written to the ref
ledger first, so the ref guard can tell loopd's updates from anyone else's.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from daemon.git.safe import FSCK_CONFIG, Git, is_canonical_lfs
from daemon.state.ledger import LedgerEntry, RefLedger


@dataclass
class LedgerWriter:
    """Where and as whom loopd records its ref updates."""

    ledger: RefLedger
    clock: Callable[[], datetime]
    run: str = ""

    def record(self, repo: str, updates: list[tuple[str, str, str]], why: str) -> None:
        """Record (ref, old, new) updates about to be made in `repo`."""
        now = self.clock()
        self.ledger.record(
            LedgerEntry(ts=now, repo=repo, ref=ref, old=old, new=new, why=why, run=self.run)
            for ref, old, new in updates
        )


@dataclass
class UserRepo:
    """The user's repository: its work tree, the per-worktree and the common git directory."""

    top: Path
    git_dir: Path  # HEAD and the index of the user's own checkout
    common: Path  # refs, objects, config, hooks, info

    object_format: str = "sha1"

    @classmethod
    def locate(cls, top: Path) -> UserRepo:
        """Find the git directories of the repository at `top` (before any agent runs)."""
        top = Path(top)
        out = Git(top, plain=True).out(
            "rev-parse", "--absolute-git-dir", "--git-common-dir", "--show-object-format"
        )
        git_dir, common, object_format = (out.splitlines() + ["", "", ""])[:3]
        common_path = Path(common) if Path(common).is_absolute() else top / common
        return cls(
            top=top,
            git_dir=Path(git_dir).resolve(),
            common=common_path.resolve(),
            object_format=object_format or "sha1",
        )

    @property
    def git(self) -> Git:
        """Git on the common directory: refs and objects, no work tree."""
        return Git(self.common, git_dir=self.common)

    @property
    def key(self) -> str:
        """How the ledger names this repository."""
        return str(self.common)

    def resolve(self, rev: str) -> str:
        """The commit `rev` names, read as the user's own checkout sees it (HEAD included)."""
        return Git(self.common, git_dir=self.git_dir).out(
            "rev-parse", "--verify", "-q", f"{rev}^{{commit}}"
        )

    def lfs_storage(self) -> Path | None:
        """The lfs folder when the person's git-lfs setup is exactly the canonical one."""
        if shutil.which("git-lfs") is None:
            return None
        # The person's own config (global included): `git lfs install` writes it there.
        read = Git(self.common, git_dir=self.common, user_config=True)
        out = read.out("config", "--get-regexp", r"^filter\.lfs\.", check=False)
        values = {}
        for line in out.splitlines():
            key, _, value = line.partition(" ")
            values[key.rsplit(".", 1)[-1]] = value
        return self.common / "lfs" if is_canonical_lfs(values) else None

    def refs(self) -> dict[str, str]:
        return self.git.refs()

    def ref(self, ref: str) -> str:
        return self.git.out("rev-parse", "-q", "--verify", ref, check=False)

    # loopd's own updates, each recorded first ------------------------------------------------
    def create_ref(self, writer: LedgerWriter, ref: str, new: str, why: str) -> None:
        """Make `ref` at `new`; it must not exist yet."""
        writer.record(self.key, [(ref, "", new)], why)
        self.git.run("update-ref", ref, new, "")

    def set_ref(self, writer: LedgerWriter, ref: str, new: str, why: str) -> str:
        """Point `ref` at `new` (made or moved, compare and swap); returns its old value."""
        old = self.ref(ref)
        if old == new:
            return old
        writer.record(self.key, [(ref, old, new)], why)
        self.git.run("update-ref", ref, new, old)
        return old

    def delete_ref(self, writer: LedgerWriter, ref: str, why: str) -> bool:
        old = self.ref(ref)
        if not old:
            return False
        writer.record(self.key, [(ref, old, "")], why)
        self.git.run("update-ref", "-d", ref, old)
        return True

    def take_objects(self, source: Path, refs: list[str]) -> None:
        """Copy the objects that `refs` of loopd's directory `source` reach, each one checked."""
        self.git.run(
            *FSCK_CONFIG,
            "fetch",
            "-q",
            "--no-tags",
            "--no-write-fetch-head",
            str(source),
            *refs,
        )

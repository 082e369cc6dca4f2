"""The user's repository's `config`, `hooks/` and `info/`: snapshot, compare, put back.

With `isolation = "worktree"` or `"in-place"` (or without a sandbox) the agent can write the
user's git directory: a hook that runs at the person's next commit, `core.fsmonitor`, an
exclude file. loopd keeps a copy of these files (in the run's state folder) and, after each
attempt and after the checks, puts back whatever changed; each change is a violation.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from daemon.git.agent import real_dir, replace_file
from daemon.git.own import remove_path
from daemon.state.atomic import write_atomic
from daemon.state.records import Violation

WATCHED = ("config", "config.worktree", "hooks", "info")
MAX_FILE = 1 << 20  # bigger files are compared by digest and cannot be put back
MAX_TOTAL = 16 << 20
_KIND = {"config": "repo_config", "config.worktree": "repo_config", "hooks": "repo_hook"}


class RepoEntry(BaseModel):
    """One file, link or folder under the git directory."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["file", "link", "dir"]
    mode: int = 0
    digest: str = ""
    data: str = ""  # base64 of a file's bytes, when small enough to keep
    target: str = ""  # a link's target

    def same(self, other: RepoEntry) -> bool:
        return (self.type, self.mode, self.digest, self.target) == (
            other.type,
            other.mode,
            other.digest,
            other.target,
        )


class RepoSnapshot(BaseModel):
    """`state/runs/RUN_ID/repo-guard.json`: the watched files as they were."""

    model_config = ConfigDict(extra="ignore")

    entries: dict[str, RepoEntry] = {}


def _walk(common: Path, keep_data: bool) -> dict[str, RepoEntry]:
    out: dict[str, RepoEntry] = {}
    budget = MAX_TOTAL

    def visit(rel: str) -> None:
        nonlocal budget
        path = common / rel
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(info.st_mode):
            out[rel] = RepoEntry(type="link", target=os.readlink(path))
        elif stat.S_ISDIR(info.st_mode):
            out[rel] = RepoEntry(type="dir")
            for name in sorted(os.listdir(path)):
                visit(f"{rel}/{name}")
        elif stat.S_ISREG(info.st_mode):
            data = path.read_bytes() if info.st_size <= MAX_FILE else b""
            digest = hashlib.sha256(data).hexdigest() if data or not info.st_size else ""
            if not digest:  # a big file: hashed in pieces
                sha = hashlib.sha256()
                with open(path, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        sha.update(block)
                digest = sha.hexdigest()
            entry = RepoEntry(type="file", mode=stat.S_IMODE(info.st_mode) & 0o111, digest=digest)
            if keep_data and data and len(data) <= budget:
                entry.data = base64.b64encode(data).decode("ascii")
                budget -= len(data)
            out[rel] = entry

    for top in WATCHED:
        visit(top)
    return out


def take_snapshot(common: Path) -> RepoSnapshot:
    """The watched files of the common git directory `common`, with their contents."""
    return RepoSnapshot(entries=_walk(Path(common), keep_data=True))


def save_snapshot(path: Path, snapshot: RepoSnapshot) -> None:
    # Taken again before every attempt: not worth an fsync on the way to the agent's start.
    write_atomic(path, snapshot.model_dump_json(), durable=False)


def load_snapshot(path: Path) -> RepoSnapshot | None:
    try:
        return RepoSnapshot.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None


def _kind(rel: str) -> str:
    return _KIND.get(rel.split("/", 1)[0], "repo_info")


def restore_files(common: Path, snapshot: RepoSnapshot) -> list[Violation]:
    """Put back every watched file that differs from `snapshot`; one violation per change."""
    common = Path(common)
    now = _walk(common, keep_data=False)
    was = snapshot.entries
    changed = sorted(rel for rel in set(was) | set(now) if rel not in now or rel not in was
                     or not was[rel].same(now[rel]))  # fmt: skip
    if not changed:
        return []
    violations = []
    # Whatever is there and should not be, deepest first; then what was, shallowest first.
    for rel in sorted(changed, key=lambda r: -r.count("/")):
        if rel in now and (rel not in was or was[rel].type != now[rel].type or
                           was[rel].type == "link"):  # fmt: skip
            remove_path(common / rel)
    for rel in sorted(changed, key=lambda r: r.count("/")):
        entry = was.get(rel)
        detail = "put back" if entry is not None else "removed"
        path = common / rel
        if entry is None:
            if path.exists() or path.is_symlink():
                remove_path(path)
        elif entry.type == "dir":
            if not path.is_dir() or path.is_symlink():
                path.mkdir()
        elif entry.type == "link":
            real_dir(path.parent)
            os.symlink(entry.target, path)
        elif entry.data or entry.digest == hashlib.sha256(b"").hexdigest():
            mode = 0o755 if entry.mode else 0o644
            replace_file(path.parent, path.name, base64.b64decode(entry.data), mode)
            os.chmod(path, (os.stat(path).st_mode & ~0o111) | entry.mode)
        else:
            detail = "changed; too big for loopd to put back"
        if _is_reported(rel, changed):
            violations.append(Violation(kind=_kind(rel), target=rel, detail=detail))
    return violations


def _is_reported(rel: str, changed: list[str]) -> bool:
    """Report the outermost change only (a new folder, not each file in it)."""
    parts = rel.split("/")
    return not any("/".join(parts[:i]) in changed for i in range(1, len(parts)))

"""What a run may not land: protected paths, files that run programs, and symlinks to them.

A run's changes since the merge base with its target are compared with the loop's
`protect`, with `LAND_GUARDED` (daemon/config/land.py) and with the repository's own hooks
folder (`core.hooksPath`), each unless `land_allow` names the glob. A glob `x/**` covers
`x` itself (daemon/globs.py), so `.githooks` committed as a symlink is caught by its path.
A symlink in the change is looked at once more, by where it leads (followed through the
links of the run's tip, as a checkout would): one that leads out of the repository (an
absolute target, `..` past the top, a loop of links) or into a guarded path or the git
directory does not land either, nor one that stands where a guarded folder's parent is
(`.github` linked to a folder holding `workflows/`). Each blocking path is named.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from daemon.config import LoopConfig
from daemon.config.land import LAND_GUARDED
from daemon.git.safe import Git
from daemon.git.userrepo import UserRepo
from daemon.globs import any_path_matches, matching_paths

LINK_MODE = "120000"
MAX_HOPS = 40  # as the kernel's limit on links followed in one lookup
# The git directory of a checkout: a link into it reaches hooks and config.
GIT_DIR_GLOBS = (".git/**",)


@dataclass(frozen=True)
class Change:
    """One path of the change: its new mode and object ("" when deleted)."""

    path: str
    mode: str
    blob: str


def changes(git: Git, since: str, tip: str) -> list[Change]:
    """Every path that differs between `since` and `tip`, with its new mode and object."""
    out = git.run(
        "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--raw", "-z", "--no-abbrev",
        since, tip, "--",
    ).stdout.decode("utf-8", "surrogateescape")  # fmt: skip
    fields = out.split("\0")
    found = []
    for head, path in zip(fields[0::2], fields[1::2], strict=False):
        parts = head.lstrip(":").split()
        if len(parts) < 5 or not path:
            continue
        deleted = parts[4].startswith("D")
        found.append(Change(path, "" if deleted else parts[1], "" if deleted else parts[3]))
    return found


def hooks_globs(user: UserRepo) -> list[str]:
    """The repository's own hooks folder (`core.hooksPath`, the person's config included)
    when it lies inside the tree, as a glob."""
    read = Git(user.top, user_config=True, plain=True)
    # Safe git passes `-c core.hooksPath=/dev/null` itself: only the files' values count.
    out = read.out(
        "config", "--show-scope", "--type=path", "--get-all", "core.hooksPath", check=False
    )
    values = [
        v for s, _, v in (line.partition("\t") for line in out.splitlines()) if s != "command"
    ]
    path = values[-1].strip() if values else ""
    if not path:
        return []
    if os.path.isabs(path):
        top = str(user.top.resolve())
        path = os.path.relpath(os.path.normpath(path), top)
    path = os.path.normpath(path)
    if path in (".", "..") or path.startswith("../"):
        return []  # outside the tree: no commit of the run can change it
    return [path.strip("/") + "/**"]


def guarded_globs(user: UserRepo, cfg: LoopConfig) -> list[str]:
    """The globs of files that run programs, those `land_allow` names left out."""
    return [g for g in (*LAND_GUARDED, *hooks_globs(user)) if g not in cfg.land_allow]


def blocked_paths(user: UserRepo, since: str, tip: str, cfg: LoopConfig) -> list[str]:
    """The paths changed since `since` that may not land, each with why when it is a link."""
    changed = changes(user.git, since, tip)
    paths = [c.path for c in changed]
    guarded = guarded_globs(user, cfg)
    allowed = set(matching_paths(cfg.land_allow, paths))
    found = set(matching_paths(cfg.protect, paths))
    found |= {p for p in matching_paths(guarded, paths) if p not in allowed}
    watched = [*cfg.protect, *guarded, *GIT_DIR_GLOBS]
    for change in changed:
        if change.mode != LINK_MODE or change.path in found or change.path in allowed:
            continue
        why = link_problem(user.git, tip, change, watched)
        if why:
            found.add(f"{change.path} ({why})")
    return sorted(found)


def never_resolved(user: UserRepo, cfg: LoopConfig, paths: list[str]) -> list[str]:
    """The conflicting `paths` no agent may resolve: protected, or files that run programs
    (even those `land_allow` lets land: what lands there a person wrote or allowed)."""
    globs = [*cfg.protect, *LAND_GUARDED, *hooks_globs(user), *GIT_DIR_GLOBS]
    return sorted(matching_paths(globs, paths))


def link_problem(git: Git, tip: str, link: Change, globs: list[str]) -> str:
    """Why the symlink `link` may not land, or ""."""
    if _holds_guarded(link.path, globs):
        return "a symlink standing for a folder that holds guarded files"
    target = _blob(git, link.blob)
    where = resolve(git, tip, link.path, target)
    if where is None:
        return f"a symlink to {target}, outside the repository"
    if any_path_matches(globs, where):
        return f"a symlink to {target}, a guarded path"
    if _holds_guarded(where, globs):
        return f"a symlink to {target}, a folder holding guarded paths"
    return ""


def resolve(git: Git, tip: str, link: str, target: str) -> str | None:
    """The repository path the link at `link` leads to in `tip`, links followed; None when
    it leaves the repository (absolute, `..` past the top, too many links)."""
    resolved = link.split("/")[:-1]  # a tree holds nothing under a link: these are folders
    pending = target.split("/")
    hops = 0
    if target.startswith("/"):
        return None
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return None
            resolved.pop()
            continue
        entry = _entry(git, tip, "/".join([*resolved, part]))
        if entry is not None and entry[0] == LINK_MODE:
            hops += 1
            inner = _blob(git, entry[1])
            if hops > MAX_HOPS or inner.startswith("/"):
                return None
            pending = inner.split("/") + pending
            continue
        resolved.append(part)
    return "/".join(resolved) or "."


def _holds_guarded(path: str, globs: list[str]) -> bool:
    """Whether `path` is a folder above a guarded glob's fixed part (`.github` for
    `.github/workflows/**`), or the repository's top."""
    if path in ("", "."):
        return True
    return any(_fixed_part(g).startswith(path.rstrip("/") + "/") for g in globs)


def _fixed_part(glob: str) -> str:
    """The leading folders of a glob before its first wildcard."""
    head = re.split(r"[*?\[\\]", glob.lstrip("/"), maxsplit=1)[0]
    return head[: head.rfind("/") + 1]


def _entry(git: Git, tip: str, path: str) -> tuple[str, str] | None:
    """The mode and object of `path` in `tip`, None when it has none."""
    out = git.run(
        "--literal-pathspecs", "ls-tree", "-z", tip, "--", path, check=False
    ).stdout.decode("utf-8", "surrogateescape")
    for record in out.split("\0"):
        head, _, name = record.partition("\t")
        parts = head.split()
        if name == path and len(parts) == 3:
            return parts[0], parts[2]
    return None


def _blob(git: Git, sha: str) -> str:
    """A link's target as git stores it."""
    return git.run("cat-file", "blob", sha).stdout.decode("utf-8", "surrogateescape")

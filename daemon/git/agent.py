"""The agent's side of git: what its HEAD says after an attempt, and a clean view before the next.

loopd reads the agent's git only as data: a clone's commits by a checked fetch, a worktree's
or an in-place checkout's HEAD as a small file. After each commit loopd rebuilds the agent's
view at loopd's commit: a clone gets a fresh git directory (nothing the agent put in the
old one survives: config, hooks, links), a worktree or checkout gets its HEAD, index and
links written back. Nothing is written through a link the agent made: files are replaced by
rename inside folders checked to be real folders.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

from daemon.git.own import AgentHeads, OwnGit, remove_path
from daemon.git.userrepo import UserRepo

# The agent's commits in a clone carry this identity (its HOME may have none).
AGENT_IDENTITY = "[user]\n\tname = loopd agent\n\temail = agent@loopd.localhost\n"
_SMALL = 4096


class UnsafeTree(Exception):
    """A folder loopd must write in is a link or not where it should be; nothing was written."""


def is_real_dir(path: Path) -> bool:
    """A folder reached without following any link."""
    path = Path(path)
    return os.path.realpath(path) == str(path) and path.is_dir() and not path.is_symlink()


def real_dir(path: Path) -> Path:
    if not is_real_dir(path):
        raise UnsafeTree(f"{path} is not a folder loopd made (a link, a file, or missing)")
    return Path(path)


def replace_file(folder: Path, name: str, data: bytes, mode: int = 0o644) -> None:
    """Write `folder/name` by rename: a link or folder there is replaced, never followed."""
    folder = real_dir(folder)
    target = folder / name
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    tmp = folder / f".{name}.loopd-new"
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, target)


def read_small(path: Path) -> str | None:
    """A small regular file's text, None when it is missing, a link, big or not a file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size > _SMALL:
        return None
    return Path(path).read_text(encoding="utf-8", errors="replace")


# Files that send git to another repository or object store than the folder it was given.
_INDIRECTIONS = ("commondir", "gitdir", "objects/info/http-alternates")
_MAX_ENTRIES = 500_000
_INCLUDE = re.compile(rb"^\s*\[\s*include", re.IGNORECASE | re.MULTILINE)


def untrusted_git_dir(path: Path, alternates: str) -> str:
    """Why git outside the sandbox may not read the agent's git directory at `path` ("" when
    it may): a symbolic link or a special file anywhere in it, a file that points git at
    another repository or object store (`commondir`, `gitdir`, alternates other than the one
    loopd wrote), or a config that includes other files. An lstat walk: nothing is followed."""
    count = 0
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            count += 1
            entry = Path(root) / name
            rel = entry.relative_to(path).as_posix()
            try:
                mode = os.lstat(entry).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                return f"it holds a symbolic link, .git/{rel}, which loopd does not follow"
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                return f"it holds .git/{rel}, which is not a file"
        if count > _MAX_ENTRIES:
            return f"it holds more than {_MAX_ENTRIES} entries"
    for rel in _INDIRECTIONS:
        if os.path.lexists(path / rel):
            return f".git/{rel} would send git to another repository"
    alternates_file = path / "objects" / "info" / "alternates"
    if os.path.lexists(alternates_file) and read_small(alternates_file) != alternates:
        return ".git/objects/info/alternates names an object store loopd did not"
    try:
        with open(path / "config", "rb") as fh:
            config = fh.read(256 * 1024)
    except OSError:
        config = b""
    if _INCLUDE.search(config):
        return ".git/config includes other files"
    return ""


def worktree_link(admin: Path) -> str:
    return f"gitdir: {admin}\n"


# -- reading ------------------------------------------------------------------------------------


def read_heads(isolation: str, tree: Path, agent_dir: Path, branch: str, own: OwnGit,
               user: UserRepo) -> AgentHeads:  # fmt: skip
    """The agent's HEAD and its run branch after an attempt; `problem` says what was wrong."""
    ref = f"refs/heads/{branch}"
    if isolation == "clone":
        dot = tree / ".git"
        if dot.is_symlink() or not dot.is_dir():
            return AgentHeads(problem="the tree's .git is not the git directory loopd made")
        problem = untrusted_git_dir(dot, f"{user.common / 'objects'}\n")
        if problem:
            return AgentHeads(problem=problem)
        return own.fetch_agent(dot, ref)
    heads = AgentHeads()
    if isolation == "worktree":
        link = read_small(tree / ".git")
        if link != worktree_link(agent_dir):
            heads.problem = "the tree's .git file no longer points at the run's worktree"
    if not is_real_dir(agent_dir):
        heads.problem = heads.problem or f"{agent_dir} is not a folder any more"
        return heads
    text = (read_small(agent_dir / "HEAD") or "").strip()
    if text.startswith("ref: "):
        heads.head_ref = text[5:].strip()
        heads.head = user.ref(heads.head_ref) if heads.head_ref.startswith("refs/") else ""
    elif text and own.commit_exists(text):
        heads.head = text
    heads.branch = user.ref(ref)
    return heads


# -- the view before the next attempt -----------------------------------------------------------


def rebuild_view(isolation: str, tree: Path, agent_dir: Path, branch: str, own: OwnGit,
                 user: UserRepo, commit: str = "") -> list[str]:  # fmt: skip
    """Put the agent's git back on the run's branch at loopd's commit; the stale locks removed.

    The run's branch must already be in the user's repository at that commit.
    """
    index = own.index_path.read_bytes()
    if isolation == "clone":
        _fresh_clone(tree, branch, commit or own.tip(), own, user, index)
        return []
    removed = []
    if isolation == "worktree":
        worktrees = real_dir(user.common / "worktrees")
        if agent_dir.parent != worktrees:
            raise UnsafeTree(f"{agent_dir} is not under {worktrees}")
        if not agent_dir.exists() and not agent_dir.is_symlink():
            agent_dir.mkdir()
        replace_file(agent_dir, "commondir", b"../..\n")
        replace_file(agent_dir, "gitdir", f"{tree / '.git'}\n".encode())
        dot = tree / ".git"
        if read_small(dot) != worktree_link(agent_dir):
            if dot.exists() or dot.is_symlink():
                remove_path(dot)
            replace_file(tree, ".git", worktree_link(agent_dir).encode())
    folder = real_dir(agent_dir)
    lock = folder / "index.lock"
    if lock.exists() or lock.is_symlink():
        lock.unlink()
        removed.append(str(lock))
    if (read_small(folder / "HEAD") or "") != f"ref: refs/heads/{branch}\n":
        replace_file(folder, "HEAD", f"ref: refs/heads/{branch}\n".encode())
    replace_file(folder, "index", index)
    return removed


def _fresh_clone(
    tree: Path, branch: str, commit: str, own: OwnGit, user: UserRepo, index: bytes
) -> None:
    """Replace the tree's .git by a new clone's git directory, on the run's branch at loopd's
    commit (which the user's repository holds)."""
    tree = real_dir(tree)
    fresh = tree.parent / f"{tree.name}.gitnew"
    if fresh.exists() or fresh.is_symlink():
        remove_path(fresh)
    write_clone(fresh, branch, commit, own, user, index)
    dot = tree / ".git"
    if dot.exists() or dot.is_symlink():
        remove_path(dot)
    os.rename(fresh, dot)


def write_clone(
    path: Path, branch: str, commit: str, own: OwnGit, user: UserRepo, index: bytes
) -> None:
    """The git directory of a shared, single-branch clone of the user's repository, written
    directly (as `git clone --shared --no-checkout --single-branch --no-tags` would leave it,
    with loopd's index): no git process, so no repository of anyone's is read to make it."""
    for sub in ("objects/info", "objects/pack", "refs/tags", "info"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    ref = f"refs/heads/{branch}"
    remote = f"refs/remotes/origin/{branch}"
    for name in (ref, remote):
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(f"{commit}\n", encoding="ascii")
    (path / "HEAD").write_text(f"ref: {ref}\n", encoding="ascii")
    (path / "objects" / "info" / "alternates").write_text(f"{user.common / 'objects'}\n")
    config = own.probed_config().replace(
        "\tbare = true\n", "\tbare = false\n\tlogallrefupdates = true\n"
    )
    config += (
        '[remote "origin"]\n'
        f"\turl = {user.common}\n"
        f"\tfetch = +{ref}:{remote}\n"
        "\ttagOpt = --no-tags\n"
        f'[branch "{branch}"]\n'
        "\tremote = origin\n"
        f"\tmerge = {ref}\n" + AGENT_IDENTITY
    )
    (path / "config").write_text(config, encoding="utf-8")
    (path / "index").write_bytes(index)

"""The run's tree: a private clone (the default), a git worktree, or the repository in place.

Each run also gets loopd's own git directory beside its tree (`RUN_ID.git`, git/own.py),
through which loopd commits. The run's branch `loopd/LOOP/RUN_ID` is made in the user's
repository when the tree is made and is moved there only by loopd (recorded in the ledger).
- `clone`: `git clone --shared --no-checkout --single-branch --no-tags` of the user's
  repository (objects borrowed through alternates, no other refs), on the run's branch. The
  agent's refs, config, hooks and exclude file are the clone's own.
- `worktree`: `git worktree add` in the user's repository; the agent's git is the user's.
- `in-place`: the checked-out branch of the user's repository itself.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.git.agent import is_real_dir, read_small, replace_file, write_clone
from daemon.git.own import OwnGit, remove_path
from daemon.git.safe import Git, GitError
from daemon.git.setupmade import setup_excludes
from daemon.git.userrepo import LedgerWriter, UserRepo
from daemon.state.atomic import ensure_dir
from daemon.state.records import RunRecord


class TreeError(Exception):
    """The run's tree could not be made; the message says why and what to do."""


@dataclass
class RunTree:
    """Where the agent works, on which branch, from which commit, and the git directories."""

    path: Path
    repo: Path
    branch: str
    base_commit: str
    isolation: str
    own_dir: Path | None = None  # loopd's git directory for the run
    repo_git_dir: Path | None = None  # the user's common git directory
    agent_git_dir: Path | None = None  # worktree: its admin folder; in-place: the checkout's
    sandbox: str = ""  # "bwrap" when the agent runs sandboxed

    @property
    def own(self) -> OwnGit:
        assert self.own_dir is not None, "the run's tree has no git directory of loopd's"
        return OwnGit(self.own_dir, self.path)

    @property
    def git(self) -> Git:
        """loopd's git on the tree."""
        return self.own.git

    @property
    def user(self) -> UserRepo:
        common = self.repo_git_dir or UserRepo.locate(self.repo).common
        git_dir = self.agent_git_dir if self.isolation == "in-place" else None
        return UserRepo(top=self.repo, git_dir=git_dir or common, common=common)

    @property
    def agent_dir(self) -> Path:
        """The git directory the agent's own git uses."""
        if self.isolation == "clone" or self.agent_git_dir is None:
            return self.path / ".git"
        return self.agent_git_dir

    @property
    def guarded(self) -> bool:
        """Whether the agent can write the user's repository, so the guards watch it."""
        return not (self.isolation == "clone" and self.sandbox == "bwrap")


def branch_name(loop: str, run_id: str) -> str:
    return f"loopd/{loop}/{run_id}"


def scratch_dir(worktrees_root: Path, loop: str, run_id: str) -> Path:
    """The agent's scratch folder: beside the worktree, outside the tree and outside state/."""
    return worktrees_root / loop / f"{run_id}.agent"


def checks_scratch_dir(worktrees_root: Path, loop: str, run_id: str) -> Path:
    """The checks' HOME and TMPDIR: beside the agent's scratch folder, never inside it."""
    return worktrees_root / loop / f"{run_id}.checks"


def remove_scratch(worktrees_root: Path, loop: str, run_id: str) -> None:
    """Remove the run's scratch folders: the agent's and the checks'."""
    for path in (
        scratch_dir(worktrees_root, loop, run_id),
        checks_scratch_dir(worktrees_root, loop, run_id),
    ):
        shutil.rmtree(path, ignore_errors=True)


def own_dir_for(worktrees_root: Path, loop: str, run_id: str) -> Path:
    """loopd's git directory for a run: beside its tree."""
    return worktrees_root / loop / f"{run_id}.git"


def check_folders(own_dir: Path) -> tuple[Path, Path]:
    """The run's check tree and its git directory (runparts/checktree.py), beside loopd's git
    directory for the run (`RUN_ID.git`): `RUN_ID.check` and `RUN_ID.check.git`."""
    stem = own_dir.name.removesuffix(".git")
    return own_dir.with_name(f"{stem}.check"), own_dir.with_name(f"{stem}.check.git")


def _clear(*paths: Path) -> None:
    for path in paths:
        if path.exists() or path.is_symlink():
            remove_path(path)


def _locate(repo: Path) -> UserRepo:
    try:
        return UserRepo.locate(repo)
    except GitError as exc:
        raise TreeError(
            f"{repo} is not a git repository ({exc.stderr.strip()[:200]}). "
            "Fix: set `repo` in the loop file to a git repository"
        ) from None


def locate_user(repo: Path) -> UserRepo:
    """The user's repository at `repo`; TreeError saying what to fix when it is none."""
    return _locate(repo)


def prepare_tree(
    repo: Path,
    loop: str,
    run_id: str,
    isolation: str,
    base: str,
    worktrees_root: Path,
    writer: LedgerWriter,
    user: UserRepo | None = None,
    lfs: Callable[[], Path | None] | None = None,
) -> RunTree:
    """Make the run's tree, its branch in the user's repository, and loopd's git directory.

    `user`: the repository at `repo`, located already; `lfs`: its `lfs_storage()`, asked
    already (on a thread of its own, while the tree is made)."""
    user = user or _locate(repo)
    lfs = lfs or user.lfs_storage
    own_dir = own_dir_for(worktrees_root, loop, run_id)
    if isolation == "in-place":
        return _prepare_in_place(user, own_dir, lfs)
    try:
        base_commit = user.resolve(base)
    except GitError as exc:
        # rev-parse --verify -q says nothing of a name that resolves to no commit (an
        # unborn HEAD, a branch not fetched yet).
        said = exc.stderr.strip() or "no commit has that name"
        raise TreeError(
            f"base {base!r} is not a commit in {repo}: {said}. "
            "Fix: set `base` in the loop file to a branch, tag or commit that exists"
        ) from None
    branch = branch_name(loop, run_id)
    path = ensure_dir(worktrees_root / loop) / run_id
    _clear(path, own_dir, path.parent / f"{run_id}.gitnew")
    ref = f"refs/heads/{branch}"
    tree = RunTree(
        path=path,
        repo=Path(repo),
        branch=branch,
        base_commit=base_commit,
        isolation=isolation,
        own_dir=own_dir,
        repo_git_dir=user.common,
    )
    if isolation == "clone":
        user.create_ref(writer, ref, base_commit, "run branch made")
        path.mkdir()
    else:
        writer.record(user.key, [(ref, "", base_commit)], "run branch made")
        user.git.run("worktree", "add", "-q", "--no-checkout", "-b", branch, str(path), base_commit)
        tree.agent_git_dir = _admin_of(path)
    own = OwnGit.create(own_dir, path, user.common, branch, base_commit, user.object_format, lfs())
    own.checkout()
    index = own.index_path.read_bytes()
    if isolation == "clone":
        write_clone(path / ".git", branch, base_commit, own, user, index)
    else:
        replace_file(tree.agent_dir, "index", index)
    return tree


def _admin_of(path: Path) -> Path:
    """A new worktree's admin folder, as its .git file names it."""
    text = read_small(path / ".git") or ""
    if not text.startswith("gitdir: "):
        raise TreeError(f"{path}/.git does not name the worktree's git directory")
    return Path(text[len("gitdir: ") :].strip()).resolve()


def _prepare_in_place(user: UserRepo, own_dir: Path, lfs: Callable[[], Path | None]) -> RunTree:
    head = Path(user.git_dir) / "HEAD"
    text = (read_small(head) or "").strip()
    if not text.startswith("ref: refs/heads/"):
        raise TreeError(
            f"{user.top} has a detached HEAD; in-place runs commit to the checked-out branch. "
            'Fix: check out a branch, or use isolation = "clone"'
        )
    branch = text[len("ref: refs/heads/") :]
    base_commit = user.resolve("HEAD")
    own = OwnGit.create(
        own_dir, user.top, user.common, branch, base_commit, user.object_format, lfs()
    )  # fmt: skip
    index = Path(user.git_dir) / "index"
    if index.is_file() and not index.is_symlink():
        own.adopt_index(index)
    else:
        own.read_index()
    own.clear_hiding_flags()  # hidden local changes then show up as changes, and refuse
    if own.git.out("status", "--porcelain", "--untracked-files=all"):
        remove_path(own_dir)
        raise TreeError(
            f'{user.top} has uncommitted changes and the loop uses isolation = "in-place". '
            'Fix: commit or stash them, or use isolation = "clone"'
        )
    return RunTree(
        path=user.top,
        repo=user.top,
        branch=branch,
        base_commit=base_commit,
        isolation="in-place",
        own_dir=own_dir,
        repo_git_dir=user.common,
        agent_git_dir=Path(user.git_dir),
    )


def tree_of_record(run: RunRecord, worktrees_root: Path) -> RunTree:
    """The run's tree as its record names it (older records: the directories found again)."""
    tree = RunTree(
        path=Path(run.worktree),
        repo=Path(run.repo),
        branch=run.branch,
        base_commit=run.base_commit,
        isolation=run.isolation,
        own_dir=Path(run.own_git_dir) if run.own_git_dir else None,
        repo_git_dir=Path(run.repo_git_dir) if run.repo_git_dir else None,
        agent_git_dir=Path(run.agent_git_dir) if run.agent_git_dir else None,
        sandbox=run.sandbox,
    )
    if tree.own_dir is None:
        tree.own_dir = own_dir_for(worktrees_root, run.loop, run.id)
    if tree.repo_git_dir is None or (tree.isolation == "in-place" and not tree.agent_git_dir):
        user = UserRepo.locate(tree.repo)
        tree.repo_git_dir = user.common
        if tree.isolation == "in-place":
            tree.agent_git_dir = user.git_dir
    if tree.isolation == "worktree" and tree.agent_git_dir is None:
        tree.agent_git_dir = _find_admin(tree.repo_git_dir, tree.path)
    return tree


def _find_admin(common: Path, path: Path) -> Path:
    """The admin folder of the worktree at `path`: the one whose gitdir names it."""
    folder = common / "worktrees"
    if folder.is_dir():
        for admin in sorted(folder.iterdir()):
            if (read_small(admin / "gitdir") or "").strip() == str(path / ".git"):
                return admin.resolve()
    return folder / path.name


def reopen_tree(run: RunRecord, worktrees_root: Path) -> RunTree:
    """The tree of a run resumed after a restart: a lost tree or git directory made again."""
    tree = tree_of_record(run, worktrees_root)
    user = tree.user
    remade = False
    if tree.isolation != "in-place" and not is_real_dir(tree.path):
        _clear(tree.path)
        ensure_dir(tree.path.parent)
        if tree.isolation == "clone":
            tree.path.mkdir()
        else:
            user.git.run("worktree", "prune")
            user.git.run("worktree", "add", "-q", "--no-checkout", str(tree.path), tree.branch)
            tree.agent_git_dir = _admin_of(tree.path)
        remade = True
    own = tree.own
    if not own.exists():
        tip = user.ref(f"refs/heads/{tree.branch}") or tree.base_commit
        found = UserRepo.locate(tree.repo)  # its object format
        OwnGit.create(
            own.path, tree.path, user.common, tree.branch, tip, found.object_format,
            user.lfs_storage(),
        )  # fmt: skip
        own.exclude(setup_excludes(run, tree.path))  # what setup made stays out
        if not remade:
            own.read_index()  # the tree's files are hashed at the next commit
    if remade:
        own.checkout()
        index = own.index_path.read_bytes()
        if tree.isolation == "clone":
            # At the commit the user's repository holds: loopd's own may not be fetched yet.
            shown = user.ref(f"refs/heads/{tree.branch}") or tree.base_commit
            write_clone(tree.path / ".git", tree.branch, shown, own, user, index)
        else:
            replace_file(tree.agent_dir, "index", index)
    return tree


def record_tree(run: RunRecord, tree: RunTree) -> None:
    """Write where the tree and its git directories are into the run's record."""
    # The type: ignore below: the tree's isolation is one of the record's Literal values, set where
    # the tree is made.
    run.isolation = tree.isolation  # type: ignore[assignment]
    run.branch = tree.branch
    run.worktree = str(tree.path)
    run.base_commit = tree.base_commit
    run.own_git_dir = str(tree.own_dir or "")
    run.repo_git_dir = str(tree.repo_git_dir or "")
    run.agent_git_dir = str(tree.agent_git_dir or "")


def remove_tree(tree: RunTree) -> None:
    """Remove the tree and loopd's git directory; the branch stays. Removing again is harmless."""
    if tree.isolation != "in-place":
        _clear(tree.path, tree.path.parent / f"{tree.path.name}.gitnew")
    if tree.isolation == "worktree" and tree.repo_git_dir is not None:
        tree.user.git.run("worktree", "prune", check=False)
    if tree.own_dir is not None:
        _clear(*check_folders(tree.own_dir))
        if tree.own_dir.exists():
            shutil.rmtree(tree.own_dir, ignore_errors=True)


def show_merge(tree: RunTree, tip: str, other: str) -> str:
    """Put the merge of `other` into the run's branch at `tip` in the run's tree, conflict
    markers and all, over a clean tree (what else the tree held goes); the merge's tree
    (its objects in loopd's git directory). The branch stays at `tip` until loopd commits."""
    own = tree.own
    current = own.tip()
    if current != tip:
        own.set_tip(tip, current)  # the person's repository holds the run's branch at `tip`
    own.git.run("read-tree", "--reset", "HEAD")  # staged leftovers do not survive either
    merged = own.bare.run("merge-tree", "--write-tree", "-z", tip, other, check=False)
    if merged.returncode not in (0, 1):
        err = merged.stderr.decode("utf-8", "replace").strip()[:300]
        raise GitError(["merge-tree"], merged.returncode, err)
    tree_oid = merged.stdout.split(b"\0", 1)[0].decode().strip()
    own.git.run("read-tree", "-u", "--reset", tree_oid)
    own.git.run("clean", "-fdq")  # untracked files: ignored ones (setup's) stay
    # The agent's own git still has the branch at `tip` in its index: its `git status` and
    # `git diff` show the conflicting files as changed, markers and all.
    return tree_oid

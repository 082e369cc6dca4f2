"""loopd's own git directory for a run: outside the tree, its config written by loopd.

Every git command loopd runs on a run's tree goes through this directory
(`git --git-dir=OWN --work-tree=TREE`), so nothing the agent leaves in the tree (a `.git`
file, `core.worktree`, hooks, filter or merge drivers, an exclude file, flags that hide
changes in an index) reaches loopd's git. The directory borrows the user's objects through
alternates, keeps its own index and its own copy of the run's branch, and takes the agent's
commits only by a fetch that checks every object (`transfer.fsckObjects`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.git.safe import CANONICAL_LFS, FSCK_CONFIG, Git, GitError

AGENT_HEAD_REF = "refs/loopd/agent/head"
PROBED = "probed.config"  # what `git init` found out about this filesystem
_PROBED: dict[tuple[int, str], str] = {}  # (filesystem, object format): the probed config
AGENT_BRANCH_REF = "refs/loopd/agent/branch"
# git-upload-pack takes exactly the directory it is given: it does not try DIR/.git.
STRICT_UPLOAD_PACK = "git-upload-pack --strict"

_CONFIG = """\
[core]
\tbare = true
\tlogAllRefUpdates = false
\thooksPath = /dev/null
\tfsmonitor = false
\tuntrackedCache = false
\tsplitIndex = false
\tcommitGraph = false
\texcludesFile = /dev/null
\tattributesFile = /dev/null
\tautocrlf = false
\tquotePath = false
[gc]
\tauto = 0
[maintenance]
\tauto = false
[commit]
\tgpgSign = false
[user]
\tname = loopd
\temail = loopd@localhost
"""
# loopd's own exclude list: the tree's .gitignore files count, the agent's info/exclude not.
_EXCLUDE = "# loopd's own exclude list for this run's commits\n"


@dataclass
class AgentHeads:
    """What the agent's git says: the commit HEAD names, the branch it is on, the run's branch."""

    head: str = ""  # the commit HEAD names ("" when unborn or unreadable)
    head_ref: str = ""  # the branch HEAD is on; "" when detached
    branch: str = ""  # the run's branch as the agent's git has it
    problem: str = ""  # why the agent's git directory could not be read


class OwnGit:
    """loopd's git directory `path` for the run whose tree is `work_tree`."""

    def __init__(self, path: Path, work_tree: Path) -> None:
        self.path = Path(path)
        self.work_tree = Path(work_tree)

    @property
    def git(self) -> Git:
        """Git on the tree, through loopd's directory."""
        return Git(self.path, git_dir=self.path, work_tree=self.work_tree)

    @property
    def bare(self) -> Git:
        """Git on loopd's directory alone (commits, refs, objects)."""
        return Git(self.path, git_dir=self.path)

    @property
    def index_path(self) -> Path:
        return self.path / "index"

    def exists(self) -> bool:
        return (self.path / "HEAD").is_file() and (self.path / "objects").is_dir()

    # making it ---------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: Path,
        work_tree: Path,
        objects_from: Path,
        branch: str,
        commit: str,
        object_format: str = "sha1",
        lfs_storage: Path | None = None,
    ) -> OwnGit:
        """A fresh directory at `path` whose `branch` (and HEAD) is `commit`.

        `objects_from` is the user's common git directory, borrowed through alternates.
        `lfs_storage`: the canonical git-lfs filter is configured, storing there.
        """
        path = Path(path)
        if path.exists() or path.is_symlink():
            remove_path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        key = (os.stat(path.parent).st_dev, object_format)
        probed = _PROBED.get(key)
        if probed is None:
            # The first directory on this filesystem: git init finds out its file modes,
            # case and symlink support; later ones are written from what it found.
            Git(path.parent, git_dir=path).run(
                "init", "-q", "--bare", "--template=", f"--object-format={object_format}"
            )
            probed = _PROBED[key] = (path / "config").read_text(encoding="utf-8")
        for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "info"):
            (path / sub).mkdir(parents=True, exist_ok=True)
        own = cls(path, work_tree)
        (path / PROBED).write_text(probed, encoding="utf-8")  # the agent's clones start here
        config = probed + _CONFIG
        if lfs_storage is not None:
            config += '[filter "lfs"]\n' + "".join(
                f"\t{key} = {value}\n" for key, value in CANONICAL_LFS.items()
            )
            config += f"[lfs]\n\tstorage = {lfs_storage}\n"
        (path / "config").write_text(config, encoding="utf-8")
        alternates = path / "objects" / "info" / "alternates"
        alternates.write_text(f"{Path(objects_from) / 'objects'}\n", encoding="utf-8")
        (path / "info" / "exclude").write_text(_EXCLUDE, encoding="utf-8")
        ref = path / "refs" / "heads" / branch
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(f"{commit}\n", encoding="ascii")
        (path / "HEAD").write_text(f"ref: refs/heads/{branch}\n", encoding="ascii")
        return own

    def probed_config(self) -> str:
        """The config `git init` wrote here (file modes, case, object format), for clones."""
        return (self.path / PROBED).read_text(encoding="utf-8")

    def exclude(self, patterns: list[str], part: str = "setup") -> None:
        """Keep paths matching `patterns` (gitignore syntax) out of loopd's commits; `part`
        names whose they are ("setup", "agent"), each part kept when another is rewritten."""
        parts = self.path / "info" / "exclude.parts"
        parts.mkdir(exist_ok=True)
        (parts / part).write_text("".join(f"{p}\n" for p in patterns), encoding="utf-8")
        kept = "".join(f.read_text(encoding="utf-8") for f in sorted(parts.iterdir()))
        (self.path / "info" / "exclude").write_text(_EXCLUDE + kept, encoding="utf-8")

    def checkout(self) -> None:
        """Write the branch's files into the tree and the index (the tree holds nothing else)."""
        self.git.run("read-tree", "-u", "--reset", "HEAD")

    def adopt_index(self, source: Path) -> None:
        """Use a copy of `source` (an index that matches the tree) as loopd's index."""
        data = Path(source).read_bytes()
        tmp = self.path / "index.loopd-new"
        tmp.write_bytes(data)
        os.replace(tmp, self.index_path)

    def read_index(self) -> None:
        """Build loopd's index from HEAD (the tree's files are hashed at the next commit)."""
        self.git.run("read-tree", "HEAD")

    def remove_stale_lock(self) -> bool:
        """Remove an index lock a killed loopd left; True when there was one."""
        lock = self.path / "index.lock"
        if lock.exists():
            lock.unlink(missing_ok=True)
            return True
        return False

    # reading ------------------------------------------------------------------------------
    def branch(self) -> str:
        """The full name of the branch HEAD names."""
        return self.bare.out("symbolic-ref", "HEAD")

    def tip(self) -> str:
        """The run's branch's commit (read from its ref file: loopd never packs refs here)."""
        text = (self.path / "HEAD").read_text(encoding="ascii", errors="replace").strip()
        if text.startswith("ref: refs/heads/"):
            try:
                found = (self.path / text[5:]).read_text(encoding="ascii").strip()
            except OSError:
                found = ""
            if found and all(c in "0123456789abcdef" for c in found):
                return found
        return self.bare.out("rev-parse", "--verify", "HEAD^{commit}")

    def commit_exists(self, sha: str) -> bool:
        done = self.bare.run("cat-file", "-e", f"{sha}^{{commit}}", check=False)
        return done.returncode == 0

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        done = self.bare.run("merge-base", "--is-ancestor", ancestor, descendant, check=False)
        if done.returncode not in (0, 1):
            raise GitError(["merge-base", "--is-ancestor"], done.returncode, done.stderr.decode())
        return done.returncode == 0

    def tree_of(self, commit: str) -> str:
        return self.bare.out("rev-parse", "--verify", f"{commit}^{{tree}}")

    # committing ---------------------------------------------------------------------------
    def clear_hiding_flags(self) -> list[str]:
        """Clear skip-worktree and assume-unchanged in loopd's index; the paths that had them."""
        out = self.git.run("ls-files", "-v", "-z").stdout.decode("utf-8", "surrogateescape")
        skipped, assumed = [], []
        for entry in out.split("\0"):
            if len(entry) < 3:
                continue
            tag, path = entry[0], entry[2:]
            if tag in "Ss":
                skipped.append(path)
            if tag.islower():
                assumed.append(path)
        for flag, paths in (("--no-skip-worktree", skipped), ("--no-assume-unchanged", assumed)):
            if paths:
                data = "".join(p + "\0" for p in paths).encode("utf-8", "surrogateescape")
                self.git.run("update-index", "-z", flag, "--stdin", input=data)
        return sorted(set(skipped) | set(assumed))

    def stage_all(self, drop: list[str] | None = None) -> str:
        """Stage the whole tree in loopd's index; the tree object it makes.

        `drop`: paths (relative to the tree) kept out even when a commit taken from the
        agent holds them (what setup made).
        """
        self.git.run("add", "--all")
        if drop:
            specs = "".join(f":(literal){path}\0" for path in drop)
            self.git.run(
                "rm", "-r", "-q", "--cached", "--ignore-unmatch", "--pathspec-from-file=-",
                "--pathspec-file-nul", input=specs.encode("utf-8", "surrogateescape"),
            )  # fmt: skip
        return self.bare.out("write-tree")

    def commit_tree(self, tree: str, parents: list[str], message: str) -> str:
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        return self.bare.out(*args, "-m", message)

    def set_tip(self, new: str, old: str) -> None:
        """Move the run's branch from `old` to `new` (compare and swap)."""
        self.bare.run("update-ref", self.branch(), new, old)

    # the agent's commits ---------------------------------------------------------------------
    def fetch_agent(self, agent_git_dir: Path, branch_ref: str) -> AgentHeads:
        """The agent's HEAD and its copy of the run's branch, fetched with every object checked.

        `agent_git_dir` must be the directory itself (not a tree, not a `.git` file): git is
        told not to look anywhere else.
        """
        heads = AgentHeads()
        try:
            return self._fetch_agent(agent_git_dir, branch_ref, heads)
        except GitError as exc:  # a git that hangs on what the agent left
            heads.problem = f"its git directory could not be read in time: {exc}"[:400]
            return heads

    def _fetch_agent(self, agent_git_dir: Path, branch_ref: str, heads: AgentHeads) -> AgentHeads:
        listing = self.bare.run(
            "ls-remote",
            "--symref",
            f"--upload-pack={STRICT_UPLOAD_PACK}",
            str(agent_git_dir),
            "HEAD",
            branch_ref,
            check=False,
        )
        if listing.returncode != 0:
            heads.problem = "its git directory cannot be read: " + _tail(listing.stderr)
            return heads
        found: dict[str, str] = {}
        for line in listing.stdout.decode("utf-8", "replace").splitlines():
            left, _, name = line.partition("\t")
            if left.startswith("ref: ") and name == "HEAD":
                heads.head_ref = left[5:]
            elif name in ("HEAD", branch_ref):
                found[name] = left
        specs = []
        if "HEAD" in found:
            specs.append(f"+HEAD:{AGENT_HEAD_REF}")
        if branch_ref in found:
            specs.append(f"+{branch_ref}:{AGENT_BRANCH_REF}")
        if not specs:
            return heads
        fetched = self.bare.run(
            *FSCK_CONFIG,
            "fetch",
            "-q",
            "--no-tags",
            "--no-write-fetch-head",
            f"--upload-pack={STRICT_UPLOAD_PACK}",
            str(agent_git_dir),
            *specs,
            check=False,
        )
        if fetched.returncode != 0:
            heads.problem = "its commits failed loopd's checks: " + _tail(fetched.stderr)
            return heads
        if "HEAD" in found:
            heads.head = self.bare.out("rev-parse", "--verify", f"{AGENT_HEAD_REF}^{{commit}}")
        if branch_ref in found:
            heads.branch = self.bare.out("rev-parse", "--verify", f"{AGENT_BRANCH_REF}^{{commit}}")
        return heads


def _tail(stderr: bytes) -> str:
    """What git said of the agent's repository: agent text, its control characters escaped."""
    text = stderr.decode("utf-8", "replace").strip()[-300:]
    return "".join(c if c.isprintable() or c == "\n" else f"\\x{ord(c):02x}" for c in text)


def remove_path(path: Path) -> None:
    """Remove a file, a link (not what it points at) or a folder tree, even one whose folders
    the agent made unreadable (loopd's own user owns them)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return

    def opened_up(function: Callable[[str], object], failed: str, _exc: object) -> None:
        parent = os.path.dirname(failed)
        for folder in (parent, failed):
            if os.path.isdir(folder) and not os.path.islink(folder):
                os.chmod(folder, 0o700)
        function(failed)

    shutil.rmtree(path, onerror=opened_up)

"""Git as loopd runs it: argv only, a minimal environment, repository programs disabled.

A repository's config can name programs that git runs on ordinary commands (hooks,
core.fsmonitor, diff.external, textconv, filter drivers, gpg). An agent can write that
config, so every command here overrides them on the command line. Work on a run's tree goes
through loopd's own git directory (git/own.py), whose config loopd writes; the user's
repository is named by its git directory, never discovered from a tree an agent touched.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Generator, Sequence
from pathlib import Path

GIT_IDENTITY = ("loopd", "loopd@localhost")
TIMEOUT = 120.0  # seconds a git command may take before it counts as hung
CONFIG_TIMEOUT = 30.0
STREAM_TIMEOUT = 600.0  # a streamed diff of a huge tree takes longer than one command
STREAM_LINE = 1 << 20  # longer lines of a streamed command come in pieces of this size
_SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.commitGraph=false",  # a commit-graph file an agent wrote could lie about parents
    "diff.external=",
    "commit.gpgsign=false",
    "tag.gpgsign=false",
    "core.pager=cat",
    "core.editor=true",
    "core.sshCommand=false",
    "credential.helper=",
    "protocol.ext.allow=never",
    "gc.auto=0",
    "gc.autoDetach=false",
    "maintenance.auto=false",
    "fetch.recurseSubmodules=false",
    "submodule.recurse=false",
)
# The only filter.lfs configuration loopd keeps: what `git lfs install` writes, to the letter.
CANONICAL_LFS = {
    "clean": "git-lfs clean -- %f",
    "smudge": "git-lfs smudge -- %f",
    "process": "git-lfs filter-process",
    "required": "true",
}
# Fetches check every object they receive.
FSCK_CONFIG = ("-c", "transfer.fsckObjects=true", "-c", "fetch.fsckObjects=true")
# What git and loopd's other helpers get from loopd's environment; nothing else.
_KEPT_ENV = ("PATH", "HOME", "TZ", "TMPDIR")


class GitError(Exception):
    """A git command failed; carries its argv and stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"git {' '.join(argv)} failed ({returncode}): {stderr.strip()[:500]}")


class GitTimeout(GitError):
    """A git command did not end in time (a hung lock, a huge tree); it was killed."""

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        super().__init__(argv, -1, f"timed out after {timeout:.0f}s")


def git_environment(user_config: bool = False) -> dict[str, str]:
    """A minimal environment for git: no secrets, no system or global config, no replacements.

    `user_config` keeps the person's own system and global config (where their hooks go,
    what they ignore, their git-lfs setup) for commands that read it on their behalf.
    """
    env = {k: os.environ[k] for k in _KEPT_ENV if k in os.environ}
    env.setdefault("PATH", os.defpath)
    env["LC_ALL"] = "C"
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_AUTHOR_NAME"] = env["GIT_COMMITTER_NAME"] = GIT_IDENTITY[0]
    env["GIT_AUTHOR_EMAIL"] = env["GIT_COMMITTER_EMAIL"] = GIT_IDENTITY[1]
    env["GIT_OPTIONAL_LOCKS"] = "0"
    env["GIT_NO_REPLACE_OBJECTS"] = "1"  # refs/replace/ could swap any object under loopd
    if not user_config:
        env["GIT_CONFIG_NOSYSTEM"] = "1"
        env["GIT_ATTR_NOSYSTEM"] = "1"
        env["GIT_CONFIG_GLOBAL"] = "/dev/null"
    return env


def is_canonical_lfs(values: dict[str, str]) -> bool:
    """Whether a filter.lfs section is exactly what `git lfs install` writes."""
    return values == CANONICAL_LFS


class Git:
    """Runs git with repository-configured programs switched off.

    `Git(TREE)` runs in a folder and lets git find its repository there (for the user's own
    checkout, read on the person's behalf); `Git(DIR, git_dir=G, work_tree=W)` names the
    repository and work tree explicitly, so nothing in the folder can point git elsewhere.
    """

    def __init__(
        self,
        cwd: Path,
        *,
        git_dir: Path | None = None,
        work_tree: Path | None = None,
        user_config: bool = False,
        plain: bool = False,
    ) -> None:
        self.cwd = Path(cwd)
        # plain: the commands run no repository program (clone, rev-parse of paths), so
        # the repository's filter and diff config need not be read first.
        self.plain = plain
        self.git_dir = Path(git_dir) if git_dir is not None else None
        self.work_tree = Path(work_tree) if work_tree is not None else None
        self.user_config = user_config

    def env(self) -> dict[str, str]:
        return git_environment(self.user_config)

    def _location(self) -> list[str]:
        out = []
        if self.git_dir is not None:
            out.append(f"--git-dir={self.git_dir}")
        if self.work_tree is not None:
            out.append(f"--work-tree={self.work_tree}")
        return out

    def _program_overrides(self) -> list[str]:
        """`-c` options that switch off the filter drivers and diff programs the repo names."""
        if self.git_dir is not None or self.plain:
            # A named git directory is loopd's own (its config written by loopd) or the
            # user's, used without a work tree: no filter or diff program can run.
            return []
        # One `git config` read serves both: it runs before every command, so it is kept cheap.
        argv = [
            "git",
            "-c",
            "core.fsmonitor=false",
            "config",
            "--get-regexp",
            r"^(filter\..*\.(clean|smudge|process|required)|diff\..*\.(textconv|command))$",
        ]
        try:
            proc = subprocess.run(
                argv,
                cwd=self.cwd,
                capture_output=True,
                text=True,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                timeout=CONFIG_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise GitTimeout(argv[1:], CONFIG_TIMEOUT) from None
        filters: dict[str, dict[str, str]] = {}
        args: list[str] = []
        for line in proc.stdout.splitlines():
            key, _, value = line.partition(" ")
            section, _, rest = key.partition(".")
            if section == "diff":
                args += ["-c", f"{key}="]
                continue
            name, _, part = rest.rpartition(".")
            filters.setdefault(name, {})[part] = value
        for name, values in sorted(filters.items()):
            # git-lfs is kept only when it is exactly git-lfs: an agent can set filter.lfs.*.
            if name == "lfs" and is_canonical_lfs(values):
                continue
            for part in ("clean", "smudge", "process"):
                args += ["-c", f"filter.{name}.{part}="]
            args += ["-c", f"filter.{name}.required=false"]
        return args

    def argv(self, args: Sequence[str]) -> list[str]:
        out = ["git", *self._location()]
        for item in _SAFE_CONFIG:
            out += ["-c", item]
        out += self._program_overrides()
        return out + list(args)

    def run(
        self,
        *args: str,
        check: bool = True,
        input: bytes | None = None,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run `git ARGS` and return the completed process (bytes); GitTimeout when it hangs."""
        argv = self.argv(args)
        timeout = TIMEOUT if timeout is None else timeout
        try:
            proc = subprocess.run(
                argv,
                cwd=self.cwd,
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
                capture_output=True,
                env=self.env(),
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise GitTimeout(args, timeout) from None
        if check and proc.returncode != 0:
            raise GitError(args, proc.returncode, proc.stderr.decode("utf-8", "replace"))
        return proc

    def out(self, *args: str, check: bool = True) -> str:
        """Run `git ARGS` and return stdout as text, stripped."""
        return self.run(*args, check=check).stdout.decode("utf-8", "replace").strip()

    def refs(self) -> dict[str, str]:
        """Every ref (branches, tags, remotes, others) and the object it names."""
        text = self.out("for-each-ref", "--format=%(refname) %(objectname)")
        refs = {}
        for line in text.splitlines():
            name, _, sha = line.partition(" ")
            refs[name] = sha
        return refs

    def is_clean(self) -> bool:
        return self.out("status", "--porcelain", "--untracked-files=all") == ""

    def stream(self, *args: str, timeout: float | None = None) -> Generator[bytes, None, None]:
        """The lines of `git ARGS`'s output as they come, never the whole output at once.

        Closing the iterator early kills git. A failure raises GitError once the output has
        been read; a command still running after `timeout` seconds is killed (GitTimeout).
        """
        timeout = STREAM_TIMEOUT if timeout is None else timeout
        with tempfile.TemporaryFile() as errors:
            proc = subprocess.Popen(
                self.argv(args),
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                env=self.env(),
            )
            expired = threading.Event()

            def kill() -> None:
                expired.set()
                proc.kill()

            timer = threading.Timer(timeout, kill)
            timer.daemon = True
            timer.start()
            finished = False
            try:
                assert proc.stdout is not None
                while line := proc.stdout.readline(STREAM_LINE):
                    yield line
                finished = True
            finally:
                timer.cancel()
                if not finished:
                    proc.kill()
                if proc.stdout is not None:
                    proc.stdout.close()
                proc.wait()
            if expired.is_set():
                raise GitTimeout(args, timeout)
            if proc.returncode != 0:
                errors.seek(0)
                raise GitError(args, proc.returncode, errors.read(8000).decode("utf-8", "replace"))

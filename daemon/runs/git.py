"""Git as loopd runs it on trees an agent touched: argv only, repository programs disabled.

A repository's config can name programs that git runs on ordinary commands (hooks,
core.fsmonitor, diff.external, textconv, filter drivers, gpg). An agent can write that
config, so every command here overrides them on the command line.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
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
    "diff.external=",
    "commit.gpgsign=false",
    "tag.gpgsign=false",
    "core.pager=cat",
    "core.editor=true",
    "core.sshCommand=false",
    "credential.helper=",
    "protocol.ext.allow=never",
    "gc.autoDetach=false",
)
# Variables that would point git at another repository or config than the one we name.
_DROPPED_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
)


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


def git_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_AUTHOR_NAME"] = env["GIT_COMMITTER_NAME"] = GIT_IDENTITY[0]
    env["GIT_AUTHOR_EMAIL"] = env["GIT_COMMITTER_EMAIL"] = GIT_IDENTITY[1]
    env["GIT_OPTIONAL_LOCKS"] = "0"
    return env


class Git:
    """Runs git in one tree with repository-configured programs switched off."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = Path(cwd)

    def _program_overrides(self) -> list[str]:
        """`-c` options that switch off the filter drivers and diff programs the repo names."""
        # One `git config` read serves both: it runs before every command, so it is kept cheap.
        argv = [
            "git",
            "-c",
            "core.fsmonitor=false",
            "config",
            "--get-regexp",
            r"^(filter\..*\.(clean|smudge|process)|diff\..*\.(textconv|command))$",
        ]
        try:
            proc = subprocess.run(
                argv,
                cwd=self.cwd,
                capture_output=True,
                text=True,
                env=git_environment(),
                stdin=subprocess.DEVNULL,
                timeout=CONFIG_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise GitTimeout(argv[1:], CONFIG_TIMEOUT) from None
        filters: set[str] = set()
        args: list[str] = []
        for line in proc.stdout.splitlines():
            key, _, value = line.partition(" ")
            section, _, rest = key.partition(".")
            if section == "diff":
                args += ["-c", f"{key}="]
                continue
            name = rest.rsplit(".", 1)[0]
            # git-lfs is kept only when it really is git-lfs: an agent can set filter.lfs.*.
            if name == "lfs" and value.strip().startswith(("git-lfs ", "git lfs ")):
                continue
            filters.add(name)
        for name in sorted(filters):
            for part in ("clean", "smudge", "process"):
                args += ["-c", f"filter.{name}.{part}="]
            args += ["-c", f"filter.{name}.required=false"]
        return args

    def argv(self, args: Sequence[str]) -> list[str]:
        out = ["git"]
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
                env=git_environment(),
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

    def remove_stale_locks(self) -> list[str]:
        """Remove the index lock a killed agent left; call only when its processes are gone."""
        removed = []
        path = Path(self.out("rev-parse", "--git-path", "index.lock"))
        if not path.is_absolute():
            path = self.cwd / path
        if path.exists():
            path.unlink(missing_ok=True)
            removed.append(str(path))
        return removed

    def is_clean(self) -> bool:
        return self.out("status", "--porcelain", "--untracked-files=all") == ""

    def commit_all(self, message: str) -> str | None:
        """Commit everything in the tree as loopd; the new commit, or None when nothing changed."""
        self.run("add", "--all", "--", ".")
        if self.run("diff", "--cached", "--quiet", check=False).returncode == 0:
            return None
        self.run("commit", "--no-verify", "--no-gpg-sign", "-q", "-m", message)
        return self.out("rev-parse", "HEAD")

    def stream(self, *args: str, timeout: float | None = None) -> Iterator[bytes]:
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
                env=git_environment(),
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
                proc.stdout.close()  # type: ignore[union-attr]
                proc.wait()
            if expired.is_set():
                raise GitTimeout(args, timeout)
            if proc.returncode != 0:
                errors.seek(0)
                raise GitError(args, proc.returncode, errors.read(8000).decode("utf-8", "replace"))

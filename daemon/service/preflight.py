"""Warnings before the night: configuration that is valid but would leave a loop unprotected,
untriggered or unheard. `loopd check` prints them (exit 0 when they are all there is) and
`loopd run` records them as `config_warning` events and in status.toml.

Each names the file and the key: a `done_when` or `setup` program not on the daemon's PATH,
a `protect` or `on_change` glob that matches no file at the loop's base, an `on_push` glob
that matches no branch, a glob with an unclosed `[`, a `[notify] command` not on the PATH,
a followed `[remotes.NAME]` that no webhook can reach or whose secret is not set, a
`[listen] bind` beyond loopback,
a `[verifier]` that does not answer `/models` or does not list its `model`, an `on_push` loop
whose repository lacks loopd's hooks.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from daemon.config import LoadedConfig, Loop
from daemon.config.errors import did_you_mean
from daemon.git.safe import Git, GitError
from daemon.globs import glob_problem, path_matches, wildmatch
from daemon.model.probe import Probe, probe_verifier
from daemon.sandbox.commandline import programs
from daemon.scheduling.hooks import hooks_watch


def daemon_path(pid: int | None) -> tuple[str, str]:
    """The PATH the daemon looks programs up on, and where it came from.

    A running daemon's own PATH (from /proc) when it can be read, else this process's.
    """
    if pid:
        try:
            data = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            data = b""
        for item in data.split(b"\0"):
            if item.startswith(b"PATH="):
                return item[5:].decode("utf-8", "replace"), f"the running daemon's (pid {pid})"
    return os.environ.get(
        "PATH", os.defpath
    ), "this shell's; the daemon gets the PATH it starts with"


def _on_path(program: str, path: str) -> bool:
    if "/" in program:
        return os.access(os.path.expanduser(program), os.X_OK)
    return shutil.which(program, path=path) is not None


def _executables(path: str) -> list[str]:
    names: set[str] = set()
    for folder in path.split(os.pathsep):
        try:
            names.update(os.listdir(folder or "."))
        except OSError:
            continue
    return sorted(names)


class Preflight:
    """Collects the warnings of one home's configuration."""

    def __init__(self, loaded: LoadedConfig, config_path: Path, pid: int | None = None) -> None:
        self.loaded = loaded
        self.config_path = config_path
        self.path, self.path_source = daemon_path(pid)
        self._names: list[str] | None = None
        self.warnings: list[str] = []
        self.probe: Probe | None = None  # what trying the verifier found

    def _guess(self, program: str) -> str:
        if "/" in program:
            return ""
        if self._names is None:
            self._names = _executables(self.path)
        guess = did_you_mean(program, self._names)
        return f" (did you mean {guess!r}?)" if guess else ""

    def run(self) -> list[str]:
        self.verifier()
        notify = self.loaded.daemon.notify.command
        if self.loaded.daemon_ok and notify and not _on_path(notify[0], self.path):
            self.warnings.append(
                f"{self.config_path}: notify.command: {notify[0]!r} is not on the daemon's PATH "
                f"({self.path_source}), so escalations would reach nobody{self._guess(notify[0])}. "
                "Fix: install it or name it by its full path; `loopd notify --test` tries it"
            )
        if self.loaded.daemon_ok:
            self.remotes()
        for loop in self.loaded.loops.values():
            try:
                self.loop(loop)
            except Exception as exc:  # noqa: BLE001 - a warning pass never stops a check or a start
                self.warnings.append(f"{loop.path}: could not look it over: {exc}")
        return self.warnings

    def remotes(self) -> None:
        """Followed remotes that pushes cannot reach: no [listen] and no poll; no secret."""
        daemon = self.loaded.daemon
        listen = daemon.listen
        # A [listen] naming only worker_bind is for `loopd worker`s, which serve it.
        for_workers = listen is not None and listen.model_fields_set == {"worker_bind"}
        if listen is not None and not for_workers and not _loopback(listen.host):
            self.warnings.append(
                f"{self.config_path}: listen.bind: {listen.bind!r} listens beyond this machine, "
                "and the listener speaks plain HTTP with /metrics open to whoever reaches it. "
                'Fix: bind = "127.0.0.1:8787" behind a reverse proxy that holds TLS '
                "(docs/hosted.md), and name it in trusted_proxies"
            )
        if daemon.engine.kind != "local" and (
            (listen is not None and not for_workers) or daemon.remotes
        ):
            self.warnings.append(
                f"{self.config_path}: listen: [listen] and [remotes] are served by the local "
                f'engine\'s daemon; with [engine] kind = "{daemon.engine.kind}" no webhook is '
                "taken and no remote polled (a `loopd worker` serves /metrics at [listen] "
                "worker_bind). Fix: remove them, or run the local engine"
            )
            return
        for name, remote in sorted(daemon.remotes.items()):
            loops = [
                loop
                for loop in self.loaded.loops.values()
                if loop.config.enabled and loop.config.hosted == name and loop.config.on_remote_push
            ]
            by_webhook = [loop for loop in loops if not loop.config.poll.total_seconds()]
            if not by_webhook:
                continue
            where = f"{self.config_path}: remotes.{name}"
            names = ", ".join(sorted(loop.name for loop in by_webhook))
            if daemon.listen is None:
                self.warnings.append(
                    f"{where}: loop(s) {names} follow its pushes, but loopd.toml has no "
                    "[listen], so no webhook reaches loopd. Fix: add [listen], or set "
                    'poll = "60s" in the loop'
                )
            elif not remote.secret_env or not os.environ.get(remote.secret_env):
                what = (
                    f"the variable {remote.secret_env} is not set in this environment"
                    if remote.secret_env
                    else "it has no secret_env"
                )
                self.warnings.append(
                    f"{where}: secret_env: {what}, so every webhook for it is refused (403). "
                    'Fix: secret_env = "LOOPD_WEBHOOK_SECRET" and start loopd with that '
                    "variable set to the webhook's secret"
                )

    def verifier(self) -> None:
        """Try the verifier once, when loopd.toml names one."""
        verifier = self.loaded.daemon.verifier
        if not self.loaded.daemon_ok or not verifier.configured:
            return
        self.probe = probe_verifier(verifier, str(self.config_path))
        if not self.probe.ok:
            self.warnings.append(self.probe.text + "; `loopd verifier --test` tries it again")

    def loop(self, loop: Loop) -> None:
        cfg = loop.config
        tail = "" if cfg.enabled else " (the loop is disabled)"

        def warn(key: str, text: str) -> None:
            self.warnings.append(f"{loop.path}: {key}: {text}{tail}")

        for key in ("done_when", "setup"):
            for i, command in enumerate(getattr(cfg, key, None) or []):
                for program in programs(command):
                    if not _on_path(program, self.path):
                        warn(
                            f"{key}[{i}]",
                            f"{program!r} is not on the daemon's PATH ({self.path_source})"
                            f"{self._guess(program)}; the command would fail every time. Fix: "
                            "install it, correct the name, or give its full path",
                        )
        for key in ("protect", "on_change", "on_push"):
            for pattern in getattr(cfg, key, None) or []:
                problem = glob_problem(pattern)
                if problem:
                    warn(key, f"the glob {pattern!r} {problem}")
        files, branches = self._repository(cfg.repo_path, cfg.base)
        if files is not None:
            for key, why in (
                ("protect", "so nothing is protected by it"),
                ("on_change", "so no change there triggers the loop"),
            ):
                for pattern in getattr(cfg, key, None) or []:
                    if not any(path_matches(pattern, f) for f in files):
                        warn(
                            key,
                            f"{pattern!r} matches no file at the base ({cfg.base}), {why}"
                            f"{_folder_hint(pattern, files)}",
                        )
        if cfg.on_push and cfg.repo_path.is_dir():
            if not hooks_watch(self.config_path.parent, cfg.repo_path, loop.name):
                warn(
                    "on_push",
                    f"{cfg.repo_path} has no loopd hooks for this loop, so no push or commit "
                    f"triggers it. Fix: `loopd hooks install {loop.name}`",
                )
        if branches is not None:
            for pattern in cfg.on_push:
                if not any(wildmatch(pattern, b) for b in branches):
                    guess = did_you_mean(pattern, branches)
                    hint = f"; did you mean {guess!r}?" if guess else ""
                    warn(
                        "on_push",
                        f"{pattern!r} matches no branch of {cfg.repo_path} "
                        f"(branches: {', '.join(branches[:8]) or 'none'}), so no push "
                        f"triggers the loop{hint}",
                    )

    def _repository(self, repo: Path, base: str) -> tuple[list[str] | None, list[str] | None]:
        """The files at `base` and the branch names; None where they cannot be read."""
        if not repo.is_dir():
            return None, None
        git = Git(repo)
        try:
            listed = git.run("ls-tree", "-r", "-z", "--name-only", base, check=False, timeout=30)
            files = (
                [f for f in listed.stdout.decode("utf-8", "surrogateescape").split("\0") if f]
                if listed.returncode == 0
                else None
            )
            refs = git.run(
                "for-each-ref", "--format=%(refname:short)", "refs/heads", check=False, timeout=30
            )
            branches = (
                refs.stdout.decode("utf-8", "replace").split() if refs.returncode == 0 else None
            )
        except (GitError, OSError):
            return None, None
        return files, branches


def _folder_hint(pattern: str, files: Iterable[str]) -> str:
    """`; did you mean 'tests/**'?` when the pattern's first folder is a near miss."""
    head, sep, rest = pattern.lstrip("/").partition("/")
    if not sep or any(ch in head for ch in "*?["):
        return ""
    tops = sorted({f.split("/", 1)[0] for f in files if "/" in f})
    guess = did_you_mean(head, tops)
    return f"; did you mean '{guess}/{rest}'?" if guess and guess != head else ""


def _loopback(host: str) -> bool:
    """Whether a [listen] host is this machine alone."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: whatever it resolves to, it may be reached from elsewhere


def preflight_warnings(
    loaded: LoadedConfig, config_path: Path, pid: int | None = None
) -> list[str]:
    """Every warning of the home's configuration (see the module's docstring)."""
    return Preflight(loaded, config_path, pid).run()

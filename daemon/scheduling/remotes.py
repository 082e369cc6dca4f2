"""Pushes on hosted repositories (`[remotes.NAME]`) become push triggers.

Webhook deliveries and polls hand a `RemotePush` to the `RemoteFeed`; its one thread takes
whatever waits, fetches each remote's pushed branches once per repository that follows it
into `refs/remotes/NAME/B` (recorded in the ref ledger first), so a loop's `base = "NAME/B"`
starts from the pushed commit. A burst of deliveries costs one fetch per batch, not one per
delivery.

A poll's push gets its triggers (one per watching loop) once fetched. A delivery's, on the
local engine, gets them at once (`accept`), before it is answered 202, so the answer means
the trigger is in the inbox (a kill of loopd loses nothing); the fetch runs meanwhile, and
the run waits for it (`wait_fetched`) before making its tree: the fetch overlaps the
daemon taking the trigger and starting the run instead of coming before both.

The `RemotePoller` (loops with `poll`) runs `git ls-remote` once per remote, whatever the
number of loops, at the shortest `poll` of its loops, backing off on failures.
"""

from __future__ import annotations

import errno
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.config import Loop, RemoteConfig
from daemon.git.refname import branch_problem
from daemon.git.safe import Git, GitError
from daemon.globs import wildmatch
from daemon.state.eventtypes import Event
from daemon.state.ledger import LedgerEntry, ledger_of
from daemon.state.records import Trigger
from daemon.state.store import StateStore

FETCH_TIMEOUT = 300.0
KEEP_RESULTS = 10_000  # fetch outcomes remembered for runs still to wait on them
LS_REMOTE_TIMEOUT = 60.0
MAX_BACKOFF = 3600.0  # seconds between polls of a remote that keeps failing

EventSink = Callable[..., None]


@dataclass
class RemotePush:
    """A branch of a remote that moved, as a delivery or a poll saw it."""

    remote: str
    branch: str
    before: str
    after: str
    source: str  # "webhook" | "poll" | "run" (a run waiting on a fetch nothing had asked)
    received: datetime
    delivery: str = ""
    trigger: bool = True  # False: a poll's first look, fetched without a run
    loops: list[str] = field(default_factory=list)


def watching(loops: dict[str, Loop], remote: str, branch: str) -> list[Loop]:
    """The enabled loops whose on_remote_push covers `branch` of `remote`."""
    return [
        loop
        for _, loop in sorted(loops.items())
        if loop.config.enabled
        and loop.config.hosted == remote
        and any(wildmatch(g, branch) for g in loop.config.on_remote_push)
    ]


class RemoteFeed:
    """Fetches pushed commits into the loops' repositories, then writes their triggers."""

    def __init__(
        self,
        store: StateStore,
        loops: Callable[[], dict[str, Loop]],
        remotes: Callable[[], dict[str, RemoteConfig]],
        clock: Callable[[], datetime],
        event: EventSink,
    ) -> None:
        self.store = store
        self.loops = loops
        self.remotes = remotes
        self.clock = clock
        self.event = event
        self.ledger = ledger_of(store.root)
        self._queue: queue.Queue[RemotePush | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        # `accept` writes a delivery's triggers itself (the engine's runs wait for the fetch);
        # `wake` starts the daemon's tick at once instead of at the inbox watcher's word.
        self.early_triggers = False
        self.wake: Callable[[], None] = lambda: None
        # `fetched(repo, branches)`: those branches of `repo` were just moved to what the
        # remote holds (the daemon's aftermath looks at the runs landed on them at once).
        self.fetched: Callable[[Path, list[str]], None] = lambda repo, branches: None
        self._done = threading.Condition()
        self._pending: dict[tuple[str, str, str], int] = {}  # (remote, branch, commit)
        self._results: dict[tuple[str, str, str, str], str] = {}  # + repo: the fetch's error
        self._paths: dict[Path, tuple[Path, Path]] = {}  # repo -> (FETCH_HEAD, common dir)
        self._refs: dict[tuple[str, str], str] = {}  # (common dir, ref) -> where it was moved

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="loopd-remote-feed", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def submit(self, push: RemotePush) -> None:
        with self._done:
            key = (push.remote, push.branch, push.after)
            self._pending[key] = self._pending.get(key, 0) + 1
        self._queue.put(push)

    def accept(self, push: RemotePush, loops: list[Loop]) -> dict[str, str]:
        """A verified delivery's push: with `early_triggers`, its fetch starts and its
        triggers are in the inbox when this returns (each loop's inbox file name, the id its
        run lists under `[trigger] inbox`); else they follow the fetch (none named yet)."""
        if not self.early_triggers:
            # Its triggers are written after the fetch, past the delivery's answer: without
            # room for them now it is refused (503, sent again), as when writing them fails.
            if not self.store.space.probe():
                raise OSError(errno.ENOSPC, "state/ has no room for the delivery's triggers")
            self.submit(push)
            return {}
        push.trigger = False  # written here, not after the fetch
        self.submit(push)
        named = {}
        for loop in loops:
            # Not fsynced: it survives a kill of loopd, and the daemon's next tick (moments
            # away) holds it in the queue file, written durably, before deleting it.
            named[loop.name] = self._trigger(loop, push, durable=False).name
        self.wake()
        return named

    def wait_fetched(
        self, repo: Path, remote: str, branch: str, commit: str, stopped: Callable[[], bool]
    ) -> str:
        """Wait until the fetch of `commit` on `branch` of `remote` into `repo` is over: its
        error, or "". One that nothing fetches (a delivery taken before a restart) is
        fetched now."""
        key = (remote, branch, commit)
        result = (str(repo), *key)
        deadline = time.monotonic() + FETCH_TIMEOUT + 60
        with self._done:
            if result not in self._results and not self._pending.get(key):
                push = RemotePush(remote, branch, "", commit, "run", self.clock(), trigger=False)
                self._pending[key] = self._pending.get(key, 0) + 1
                self._queue.put(push)
            while result not in self._results:
                if not self._pending.get(key):
                    return ""  # fetched for no loop of `repo` (a reload moved it): as before
                if stopped() or time.monotonic() > deadline:
                    return "stopped or timed out waiting for the fetch"
                self._done.wait(0.2)
            return self._results[result]

    def idle(self) -> bool:
        """Nothing waits to be fetched (tests and the bench wait on it)."""
        return self._queue.unfinished_tasks == 0

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            batch = [first]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                pushes = [p for p in batch if p is not None]
                if pushes:
                    self._handle(pushes)
            except Exception as exc:  # noqa: BLE001 - the feed must outlive one bad batch
                self.event(Event.REMOTE_FEED_ERROR, error=f"{type(exc).__name__}: {exc}"[:1000])
            finally:
                self._finished([p for p in batch if p is not None])
                for _ in batch:
                    self._queue.task_done()
            if None in batch:
                return

    def _handle(self, pushes: list[RemotePush]) -> None:
        loops = self.loops()
        remotes = self.remotes()
        by_remote: dict[str, list[RemotePush]] = {}
        for push in pushes:
            by_remote.setdefault(push.remote, []).append(push)
        for name, group in by_remote.items():
            remote = remotes.get(name)
            if remote is None:
                continue  # removed by a reload since the delivery
            branches = sorted({p.branch for p in group})
            repos: dict[Path, list[Loop]] = {}
            for branch in branches:
                for loop in watching(loops, name, branch):
                    repos.setdefault(loop.config.repo_path, []).append(loop)
            fetched = {repo: self._fetch(name, remote, repo, branches) for repo in repos}
            self._record(group, fetched)
            for repo, error in fetched.items():
                if not error:
                    self.fetched(repo, branches)
            for push in group:
                for loop in watching(loops, name, push.branch):
                    error = fetched.get(loop.config.repo_path, "no fetch")
                    if error:
                        self.event(
                            Event.REMOTE_FETCH_FAILED,
                            loop=loop.name,
                            remote=name,
                            ref=f"refs/heads/{push.branch}",
                            new=push.after,
                            error=error[:1000],
                        )
                    elif push.trigger:
                        self._trigger(loop, push)

    def _record(self, group: list[RemotePush], fetched: dict[Path, str]) -> None:
        """The fetch outcomes, for the runs waiting on them."""
        with self._done:
            for push in group:
                for repo, error in fetched.items():
                    self._results[(str(repo), push.remote, push.branch, push.after)] = error
            while len(self._results) > KEEP_RESULTS:
                del self._results[next(iter(self._results))]
            self._done.notify_all()

    def _finished(self, pushes: list[RemotePush]) -> None:
        with self._done:
            for push in pushes:
                key = (push.remote, push.branch, push.after)
                left = self._pending.get(key, 0) - 1
                if left > 0:
                    self._pending[key] = left
                else:
                    self._pending.pop(key, None)
            self._done.notify_all()

    def _fetch(self, name: str, remote: RemoteConfig, repo: Path, branches: list[str]) -> str:
        """Fetch the branches, then move `refs/remotes/NAME/B` to them, each move written to
        the ref ledger first (the ref guard of a run working in `repo` must not blame its
        agent); the error, or "" when it worked."""
        # plain: fetch, rev-parse and update-ref check nothing out and diff nothing, so no
        # filter or diff program can run; it spares a `git config` read before each command,
        # on the way from a delivery to its run.
        bad = [b for b in branches if branch_problem(b)]
        if bad:  # the desk and the poller let none through: never a refspec of another's
            return f"branch {bad[0][:120]!r} is not a valid branch name: {branch_problem(bad[0])}"
        git = Git(repo, user_config=True, plain=True)
        try:
            fetch_head, common = self._paths_of(git)
            # Objects and FETCH_HEAD only: no ref of the repository moves unrecorded. loopd
            # builds each refspec from a checked branch name (no ':', '*' or leading '-'),
            # then moves refs/remotes/NAME/B itself, in the ledger first.
            git.run(
                "fetch", "--no-tags", "--quiet", "--", remote.clone_url,
                *[f"refs/heads/{b}" for b in branches],
                timeout=FETCH_TIMEOUT,
            )  # fmt: skip
            fetched = _fetch_head(fetch_head, len(branches))
            for branch, sha in zip(branches, fetched, strict=True):
                self._move(git, common, name, f"refs/remotes/{name}/{branch}", sha)
        except GitError as exc:
            self._paths.pop(git.cwd, None)
            return f"git fetch {remote.clone_url} in {repo}: {exc}"
        return ""

    def _paths_of(self, git: Git) -> tuple[Path, Path]:
        """The repository's FETCH_HEAD and common git directory, asked of git once."""
        known = self._paths.get(git.cwd)
        if known is None:
            known = self._paths[git.cwd] = _git_paths(git)
        return known

    def _move(self, git: Git, common: Path, remote: str, ref: str, new: str) -> None:
        """Move `ref` to `new` (in the ledger first) from where this feed last left it: one
        git command fewer on the way to a run; read again when someone else moved it since."""
        key = (str(common), ref)
        last = self._refs.get(key)
        try:
            old = last if last is not None else _ref(git, ref)
            self._move_from(git, common, remote, ref, old, new)
        except GitError:
            if last is None:
                raise
            self._refs.pop(key, None)
            self._move_from(git, common, remote, ref, _ref(git, ref), new)
        self._refs[key] = new

    def _move_from(self, git: Git, common: Path, remote: str, ref: str, old: str, new: str) -> None:
        if old == new:
            return
        entry = LedgerEntry(
            ts=self.clock(), repo=str(common), ref=ref, old=old, new=new, why="remote push"
        )
        self.ledger.record([entry])
        # update-ref checks `old` (empty: the ref must not exist): a move by someone else
        # since fails here instead of being overwritten.
        git.run("update-ref", "-m", f"loopd: push on remote {remote}", ref, new, old or "")

    def _trigger(self, loop: Loop, push: RemotePush, durable: bool = True) -> Path:
        what = f"delivery {push.delivery}" if push.delivery else "a poll"
        return self.store.put_trigger(
            Trigger(
                loop=loop.name,
                kind="push",
                reason=f"push to {push.branch} on remote {push.remote} ({what})",
                ref=f"refs/heads/{push.branch}",
                old=push.before,
                new=push.after,
                remote=push.remote,
                ts=push.received,
            ),
            durable=durable,
        )


class RemotePoller:
    """`git ls-remote` per remote whose loops set `poll`; moved branches go to the feed."""

    def __init__(
        self,
        feed: RemoteFeed,
        cwd: Path,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.feed = feed
        self.cwd = cwd
        self.monotonic = monotonic
        self.seen: dict[str, dict[str, str]] = {}  # remote -> branch -> commit
        self.failures: dict[str, int] = {}
        self.next_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="loopd-remote-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=LS_REMOTE_TIMEOUT + 5)
            self._thread = None

    def intervals(self) -> dict[str, float]:
        """Each polled remote's interval: the shortest `poll` among its enabled loops."""
        out: dict[str, float] = {}
        remotes = self.feed.remotes()
        for loop in self.feed.loops().values():
            seconds = loop.config.poll.total_seconds()
            if loop.config.enabled and seconds > 0 and loop.config.hosted in remotes:
                name = loop.config.hosted
                out[name] = min(out.get(name, seconds), seconds)
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_due()
            except Exception as exc:  # noqa: BLE001 - polling goes on
                self.feed.event(
                    Event.REMOTE_POLL_FAILED, error=f"{type(exc).__name__}: {exc}"[:500]
                )
            self._stop.wait(0.5)

    def poll_due(self) -> None:
        """Poll each remote whose time has come."""
        now = self.monotonic()
        for name, interval in self.intervals().items():
            if now < self.next_at.get(name, 0.0):
                continue
            ok = self.poll(name)
            failures = 0 if ok else self.failures.get(name, 0) + 1
            self.failures[name] = failures
            wait = interval if ok else min(interval * 2**failures, max(MAX_BACKOFF, interval))
            self.next_at[name] = self.monotonic() + wait
            if not ok:
                self.feed.event(Event.REMOTE_POLL_BACKOFF, remote=name, retry_in=round(wait, 1))

    def poll(self, name: str) -> bool:
        """One ls-remote of `name`: moved watched branches are submitted; False on failure."""
        remote = self.feed.remotes()[name]
        try:
            out = Git(self.cwd, user_config=True, plain=True).run(
                "ls-remote", "--heads", "--", remote.clone_url, timeout=LS_REMOTE_TIMEOUT
            )
        except GitError as exc:
            self.feed.event(Event.REMOTE_POLL_FAILED, remote=name, error=str(exc)[:1000])
            return False
        if self.failures.get(name):
            self.feed.event(Event.REMOTE_POLL_RECOVERED, remote=name)
        heads: dict[str, str] = {}
        for line in out.stdout.decode("utf-8", "replace").splitlines():
            sha, _, ref = line.partition("\t")
            branch = ref.removeprefix("refs/heads/")
            # A remote may advertise any name: only one git accepts becomes a refspec.
            if ref.startswith("refs/heads/") and not branch_problem(branch):
                heads[branch] = sha
        loops = self.feed.loops()
        seen = self.seen.setdefault(name, {})
        for branch, sha in sorted(heads.items()):
            polled = watching(loops, name, branch)
            watchers = [loop for loop in polled if loop.config.poll.total_seconds() > 0]
            if not watchers:
                continue
            before = seen.get(branch)
            if before == sha:
                continue
            # What is fetched already: at the first poll, and after a webhook took the push.
            fetched = _fetched(watchers[0].config.repo_path, name, branch)
            before = before if before is not None else fetched
            seen[branch] = sha
            if fetched == sha:
                continue
            self.feed.submit(
                RemotePush(
                    remote=name,
                    branch=branch,
                    before=before or "",
                    after=sha,
                    source="poll",
                    received=self.feed.clock(),
                    trigger=bool(before),  # first sight of a branch: fetched, not run
                )
            )
        return True


def _fetched(repo: Path, remote: str, branch: str) -> str:
    """What an earlier fetch left at `refs/remotes/REMOTE/BRANCH`, or ""."""
    try:
        return _ref(Git(repo, plain=True), f"refs/remotes/{remote}/{branch}")
    except GitError:
        return ""


def _ref(git: Git, ref: str) -> str:
    """The commit `ref` points at, or "" when there is no such ref."""
    proc = git.run("rev-parse", "--verify", "--quiet", ref, check=False)
    return proc.stdout.decode().strip() if proc.returncode == 0 else ""


def _git_paths(git: Git) -> tuple[Path, Path]:
    """The repository's FETCH_HEAD file and its common git directory (one rev-parse)."""
    text, _, common = git.out(
        "rev-parse", "--git-path", "FETCH_HEAD", "--git-common-dir"
    ).partition("\n")
    path = Path(text) if Path(text).is_absolute() else git.cwd / text
    where = Path(common.strip())
    return path, (where if where.is_absolute() else git.cwd / where).resolve()


def _fetch_head(path: Path, count: int) -> list[str]:
    """The commits the last fetch wrote to FETCH_HEAD, in the order of its refspecs."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise GitError(["fetch"], 1, f"cannot read {path}: {exc}") from None
    shas = [line.split("\t", 1)[0] for line in text.splitlines() if line.strip()]
    if len(shas) != count:
        raise GitError(["fetch"], 1, f"FETCH_HEAD holds {len(shas)} entries for {count} branches")
    return shas


def describe(push: RemotePush) -> dict[str, Any]:
    """A push's fields for an event."""
    return {
        "remote": push.remote,
        "ref": f"refs/heads/{push.branch}",
        "old": push.before,
        "new": push.after,
        "source": push.source,
    }

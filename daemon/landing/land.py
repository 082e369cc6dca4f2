"""Landing a succeeded run: `land = "merge"` moves the target, `land = "push"` pushes its branch.

A step of finishing (runs/finish.py), so both engines land alike. The run stays `succeeded`
whatever happens here; a landing that cannot happen leaves `landed = false`, the reason in
`landing`, cause `landing-blocked` and a `landing_blocked` event, and the report lists the
run under "Ready to land".

- Never: an experiment's run; a run whose changes (since the merge base with the target)
  touch `protect`, CI or editor files that run programs (`.github/workflows/**`,
  `.gitlab-ci.yml`, `.envrc`, `.vscode/**`, `.pre-commit-config.yaml`, `.gitmodules`, git
  hooks) unless `land_allow` names the glob, or add a symlink into them or out of the
  repository (landing/guard.py).
- merge: a fast-forward when the target has not moved past the run's branch; otherwise the
  target is merged into the branch in a fresh tree of loopd's own and the checks run again
  there (landing/merge.py). The target moves by compare-and-swap, recorded in the ledger;
  a target checked out in a working tree with changes is left alone; a clean checkout of it
  is fast-forwarded there (`merge --ff-only`) only when the repository has no filter but
  the canonical git-lfs. Other loops whose `on_push` names the target are triggered.
- push: from the person's repository with their own config and credentials (hooks off),
  then `pr_command`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import assert_never, cast, get_args

from daemon.config import LoopConfig
from daemon.config.land import PR_FIELDS, LandMode
from daemon.git.integrity import ledger_writer
from daemon.git.messages import pr_title, squash_message
from daemon.git.safe import Git, GitError, is_canonical_lfs
from daemon.git.userrepo import UserRepo
from daemon.landing.guard import blocked_paths
from daemon.landing.held import holds
from daemon.landing.landed import after_move, mark_built_on, record_landed
from daemon.landing.merge import (
    Conflict,
    MergeConflict,
    MergeRefused,
    merge_target,
    verify_tip,
)
from daemon.landing.squash import AlreadyLanded, squash_commit
from daemon.landing.stoppoint import stop_point
from daemon.plain.landing import ALREADY
from daemon.processes import process_mark, run_in_own_group, same_process
from daemon.redact import redact
from daemon.runparts.journal import RunJournal
from daemon.runparts.startpoint import is_ancestor
from daemon.state.atomic import write_atomic
from daemon.state.eventtypes import Event
from daemon.state.records import Cause, RunRecord, is_experiment

LAND_LOG = "land.log"
PUSH_TIMEOUT = 300.0
TRIES = 3  # landings of a run whose target moved under each: then it is escalated
REAP_GRACE = 10.0  # seconds a leftover push gets between SIGTERM and SIGKILL


class LandingBlocked(Exception):
    """The run's work cannot land now; the message says why and what to do."""

    checks = False  # True: setup or the checks fail on what would land (a person looks)
    conflict = False  # True: the run's branch conflicts with the target (a person looks)
    moving = False  # True: the target moved under each try (a person looks)
    found: Conflict | None = None  # the conflict, both sides, for a conflict attempt


def _refused(exc: MergeRefused) -> LandingBlocked:
    blocked = LandingBlocked(str(exc))
    blocked.checks = exc.checks
    blocked.conflict = isinstance(exc, MergeConflict)
    if isinstance(exc, MergeConflict):
        blocked.found = exc.conflict
    return blocked


def _mode(recorded: str) -> LandMode:
    """The run record's `land` as a mode this loopd knows (a record written by another
    version may name one it does not)."""
    for mode in get_args(LandMode):
        if recorded == mode:
            return cast(LandMode, mode)
    raise LandingBlocked(
        f"the run's record names a land mode this loopd does not know: {recorded!r}"
    )


OnMove = Callable[[str, str], None]


def _land(journal: RunJournal, cfg: LoopConfig, mode: LandMode, on_move: OnMove | None) -> str:
    """Land by `mode`; the landed commit. Exhaustive: a new mode fails the type check here."""
    match mode:
        case "merge":
            return _merge(journal, cfg, on_move)
        case "push":
            return _push(journal, cfg)
        case "branch":
            raise LandingBlocked('land = "branch" keeps the work on its branch')
        case _:
            assert_never(mode)


def lands(run: RunRecord) -> bool:
    """Whether finishing `run` lands it (it goes through its target's landing queue)."""
    return not (run.outcome != "succeeded" or is_experiment(run) or run.land in ("", "branch"))


def land_run(
    journal: RunJournal, cfg: LoopConfig | None, on_move: OnMove | None = None
) -> Conflict | None:
    """Land a succeeded run as its record says (`land`, `target`); records how it went.
    The textual conflict that kept it from landing, if one did.

    `on_move(old, new)`: called before the target moves from `old` to `new` (the landing
    queue writes the step down first)."""
    run = journal.run
    found: Conflict | None = None
    if not lands(run):
        return None
    if run.landed:
        return None  # finishing again after a crash
    run.phase = "landing"
    journal.save()
    try:
        if cfg is None:
            raise LandingBlocked("the loop's file no longer loads, so its landing keys are gone")
        commit = _land(journal, cfg, _mode(run.land), on_move)
    except AlreadyLanded as held:
        # Another run (or a person) landed the same change: recorded, never merged empty.
        run.landed, run.landed_as, run.landing = True, held.commit, ""
        run.landed_how = ALREADY
        journal.event(Event.LANDED, land=ALREADY, target=run.target, commit=held.commit)
        mark_built_on(journal, held.commit)
    except (LandingBlocked, GitError, OSError) as exc:
        why = str(exc) if isinstance(exc, LandingBlocked) else f"git failed: {exc}"
        run.landing = redact(why)[:1000]
        checks = isinstance(exc, LandingBlocked) and exc.checks
        cause = Cause.LANDING_CHECKS_FAILED if checks else Cause.LANDING_BLOCKED
        run.cause = Cause.LANDING_MOVING if getattr(exc, "moving", False) else cause
        run.cause = Cause.LANDING_CONFLICT if getattr(exc, "conflict", False) else run.cause
        found = getattr(exc, "found", None)
        journal.event(Event.LANDING_BLOCKED, land=run.land, target=run.target, reason=run.landing)
    else:
        record_landed(journal, commit)
    finally:
        run.phase = "idle"
        journal.save()
    return found


def _user(journal: RunJournal) -> UserRepo:
    return UserRepo.locate(Path(journal.run.repo))


def _tip(user: UserRepo, branch: str) -> str:
    tip = user.ref(f"refs/heads/{branch}")
    if not tip:
        raise LandingBlocked(f"the run's branch {branch} is gone")
    return tip


def _check_changes(user: UserRepo, since: str, tip: str, cfg: LoopConfig) -> None:
    found = blocked_paths(user, since, tip, cfg)
    if found:
        raise LandingBlocked(
            "the run changed " + ", ".join(found[:5]) + (" and more" if len(found) > 5 else "")
            + ", which may not land unasked; review the branch and merge it yourself, or add "
            "the glob to land_allow in the loop file"
        )  # fmt: skip


def _merge(journal: RunJournal, cfg: LoopConfig, on_move: OnMove | None) -> str:
    run = journal.run
    user = _user(journal)
    tip = _tip(user, run.branch)
    target_ref = f"refs/heads/{run.target}"
    squash = cfg.land_commits == "squash"
    for _ in range(TRIES):  # the target may move while the checks run: look again
        current = user.ref(target_ref)
        if not current:
            raise LandingBlocked(f"the target branch {run.target} does not exist")
        if holds(user.git, tip, current):
            raise AlreadyLanded(current)  # its work is there already: nothing to merge
        since = user.git.out("merge-base", current, tip)
        _check_changes(user, since, tip, cfg)
        try:
            new = _landing_commit(journal, cfg, user, tip, current, squash)
        except MergeRefused as exc:
            raise _refused(exc) from None
        if new != tip and not squash:
            tip = new  # the run's branch is the merge now
        if on_move is not None:
            on_move(current, new)
        if _move_target(journal, user, current, new):
            stop_point("moved", run.id)
            after_move(journal, cfg, user, current, new)
            return new
    moving = LandingBlocked(
        f"{run.target} moved under each of {TRIES} landings (setup and the checks ran again on "
        f"each); merge {run.branch} yourself, or `loopd land {run.id}` once it holds still"
    )
    moving.moving = True
    raise moving


def _landing_commit(
    journal: RunJournal, cfg: LoopConfig, user: UserRepo, tip: str, current: str, squash: bool
) -> str:
    """The commit the target moves to, its setup and checks passed on it: the run's branch
    itself, its merge with a moved target, or (squash) one commit on the target's."""
    run = journal.run
    if is_ancestor(user, current, tip):
        new = squash_commit(user, run, cfg, current, tip) if squash else tip
        verify_tip(journal, cfg, user, new)  # the very commit that lands
        return new
    writer = ledger_writer(journal)
    message = squash_message(run, cfg.done_when) if squash else ""
    return merge_target(journal, cfg, user, writer, tip, run.target, current, message)


def _checkouts(user: UserRepo, branch: str) -> list[Path]:
    """The working trees that have `branch` checked out."""
    out = user.git.out("worktree", "list", "--porcelain")
    found, path = [], ""
    for line in out.splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree ") :]
        elif line == f"branch refs/heads/{branch}" and path:
            found.append(Path(path))
    return found


def _filters_other_than_lfs(tree: Path) -> list[str]:
    """Filter drivers the repository's config (the person's included) names, git-lfs's
    canonical setup aside."""
    read = Git(tree, user_config=True, plain=True)
    out = read.out("config", "--get-regexp", r"^filter\.", check=False)
    filters: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        name, _, part = key[len("filter.") :].rpartition(".")
        filters.setdefault(name, {})[part] = value
    return sorted(n for n, v in filters.items() if not (n == "lfs" and is_canonical_lfs(v)))


def _move_target(journal: RunJournal, user: UserRepo, old: str, new: str) -> bool:
    """Move the target from `old` to `new`; False when it moved meanwhile."""
    run = journal.run
    ref = f"refs/heads/{run.target}"
    writer = ledger_writer(journal)
    checkouts = _checkouts(user, run.target)
    for tree in checkouts:
        status = Git(tree).out("status", "--porcelain", "--untracked-files=no")
        if status:
            raise LandingBlocked(
                f"{run.target} is checked out in {tree} with uncommitted changes; loopd leaves "
                f"it alone: commit or stash them and `git merge --ff-only {run.branch}` there"
            )
    if checkouts:
        tree = checkouts[0]
        filters = _filters_other_than_lfs(tree)
        if filters:
            raise LandingBlocked(
                f"{run.target} is checked out in {tree}, whose git config names the filter "
                f"{', '.join(filters)}, which loopd does not run; `git merge --ff-only "
                f"{run.branch}` there yourself"
            )
        writer.record(user.key, [(ref, old, new)], "landed")
        done = Git(tree).run("merge", "--ff-only", "-q", "--no-verify", new, check=False)
        if done.returncode != 0:
            if user.ref(ref) != old:
                return False
            err = done.stderr.decode("utf-8", "replace").strip()[:300]
            raise LandingBlocked(f"`git merge --ff-only` in {tree} failed: {err}")
        return user.ref(ref) == new
    writer.record(user.key, [(ref, old, new)], "landed")
    done = user.git.run("update-ref", ref, new, old, check=False)
    return done.returncode == 0


# push ------------------------------------------------------------------------------------------


def user_environment(journal: RunJournal) -> dict[str, str]:
    """The person's environment for their own git and `pr_command`: loopd's secrets left out."""
    withheld = {journal.services.config.verifier.api_key_env, "NOTIFY_SOCKET"}
    env = {k: v for k, v in os.environ.items() if k not in withheld and not k.startswith("LOOPD_")}
    env["GIT_TERMINAL_PROMPT"] = "0"  # a credential prompt nobody answers would hang
    return env


def _push(journal: RunJournal, cfg: LoopConfig) -> str:
    run = journal.run
    user = _user(journal)
    tip = _tip(user, run.branch)
    target = user.ref(f"refs/heads/{run.target}") if run.target else ""
    if target and holds(user.git, tip, target):
        raise AlreadyLanded(target)  # nothing to push or propose
    since = user.git.out("merge-base", target, tip) if target else run.base_commit
    since = since or run.base_commit
    _check_changes(user, since, tip, cfg)
    if cfg.land_commits == "squash" and since:
        tip = _squashed_branch(journal, cfg, user, since, tip)
    try:
        verify_tip(journal, cfg, user, tip)
    except MergeRefused as exc:
        raise _refused(exc) from None
    env = user_environment(journal)
    log = journal.services.store.run_dir(run.id) / LAND_LOG
    branch_ref = f"refs/heads/{run.branch}"
    _reap_push(journal)  # a push of this run that a killed loopd left running
    if _remote_tip(cfg.remote, branch_ref, Path(run.repo), env) == tip:
        journal.event(Event.PUSHED, remote=cfg.remote, branch=run.branch, commit=tip, found=True)
    else:
        # The person's repository, config and credentials; no hook of theirs runs.
        argv = ["git", "-c", "core.hooksPath=/dev/null", "push", "--no-verify", "--porcelain",
                cfg.remote, f"{branch_ref}:{branch_ref}"]  # fmt: skip
        text = _run(argv, Path(run.repo), env, log, "", on_start=_journaled(journal))
        run.pid_marks.pop(str(run.push_pid), None)
        run.push_pid = 0
        journal.save()
        if text is not None:
            raise LandingBlocked(f"git push to {cfg.remote} failed: {text}")
        journal.event(Event.PUSHED, remote=cfg.remote, branch=run.branch, commit=tip)
    if cfg.pr_command:
        body = journal.services.store.run_dir(run.id) / "pr-body.md"
        write_atomic(body, redact(_pr_body(journal)))
        fields = dict(
            zip(PR_FIELDS, (run.branch, run.target, pr_title(run), str(body)), strict=True)
        )
        argv = [_fill(part, fields) for part in cfg.pr_command]
        text = _run(argv, Path(run.repo), env, log, "pr_command")
        if text is not None:
            raise LandingBlocked(
                f"the branch was pushed to {cfg.remote}, but pr_command failed: {text}"
            )
        journal.event(Event.PR_COMMAND_RAN, command=cfg.pr_command[0])
    return tip


def _squashed_branch(
    journal: RunJournal, cfg: LoopConfig, user: UserRepo, since: str, tip: str
) -> str:
    """The run's branch as one commit on its merge base with the target, for the push: the
    pull request shows one commit (made again, it is the same commit: a retried push sends
    nothing new)."""
    new = squash_commit(user, journal.run, cfg, since, tip)
    if new != tip:
        writer = ledger_writer(journal)
        ref = f"refs/heads/{journal.run.branch}"
        user.set_ref(writer, ref, new, "squashed to one commit for the push")
    return new


def _fill(part: str, fields: dict[str, str]) -> str:
    for key, value in fields.items():
        part = part.replace(key, value)
    return part


def _journaled(journal: RunJournal) -> Callable[[int], None]:
    """Record a push's process group in the run's record as it starts."""

    def record(pid: int) -> None:
        journal.run.push_pid = pid
        journal.run.pid_marks[str(pid)] = process_mark(pid)
        journal.save()
        journal.event(Event.PUSH_STARTED, pid=pid)

    return record


def _reap_push(journal: RunJournal) -> None:
    """End the process group of a push this run started before loopd was killed, if it still
    runs: one push of a run at a time."""
    run = journal.run
    pgid = run.push_pid
    if not pgid:
        return
    mark = run.pid_marks.pop(str(pgid), "")
    if not same_process(pgid, mark):
        # Gone, or the pid names another process now (reused after a reboot or a wrap):
        # never signal a group loopd did not start.
        journal.event(Event.PUSH_REAPED, pid=pgid, left="not the push loopd started")
        run.push_pid = 0
        journal.save()
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + REAP_GRACE
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.05)
        if not _group_alive(pgid):
            break
    journal.event(Event.PUSH_REAPED, pid=pgid)
    run.push_pid = 0
    journal.save()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _remote_tip(remote: str, ref: str, cwd: Path, env: dict[str, str]) -> str:
    """The commit `remote` holds at `ref` ("" when none or it cannot be asked)."""
    argv = ["git", "-c", "core.hooksPath=/dev/null", "ls-remote", remote, ref]
    try:
        done = run_in_own_group(argv, cwd=cwd, env=env, timeout=PUSH_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        sha, _, name = line.partition("\t")
        if name.strip() == ref:
            return sha.strip()
    return ""


def _run(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    log: Path,
    what: str,
    on_start: Callable[[int], None] | None = None,
) -> str | None:
    """Run a command of the person's; None when it succeeded, else why it failed."""
    try:
        done = run_in_own_group(argv, cwd=cwd, env=env, timeout=PUSH_TIMEOUT, on_start=on_start)
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = f"{exc}"[:300]
        _log(log, argv, why)
        return why
    output = (done.stdout + done.stderr).decode("utf-8", "replace")
    _log(log, argv, output + f"[exit {done.returncode}]\n")
    if done.returncode == 0:
        return None
    tail = redact(output.strip())[-300:]
    return f"{what or argv[0]} exited {done.returncode}: {tail}"


def _log(log: Path, argv: list[str], text: str) -> None:
    previous = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    write_atomic(log, previous + redact(f"$ {' '.join(argv)}\n{text}\n"))


def _pr_body(journal: RunJournal) -> str:
    run = journal.run
    lines = [f"{run.task.strip()}", "", f"loopd run `{run.id}` of loop `{run.loop}`: {run.reason}."]
    for attempt in run.attempts:
        score = "" if attempt.score is None else f", score {attempt.score}"
        checks = "pass" if attempt.checks_passed else "fail"
        lines.append(f"- attempt {attempt.n}: checks {checks}{score}")
    return "\n".join(lines) + "\n"

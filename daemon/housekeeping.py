"""`[limits] retain_days`: pruning old runs, their attempt folders and `loopd/*` branches.

A pruned run folds into one line of `state/pruned-runs.jsonl` (what it was: loop, trigger,
outcome, reason, times, branch) and its folder goes whole, so a week of runs leaves lines,
not folders. The newest run of each loop keeps its `run.toml` (`loopd status` shows its
outcome) with a `pruned.toml`, its other files gone; it folds once a newer run exists. Its
branch goes either way. Runs cited by an open escalation (its run and its newest repeat),
by a live rule's evidence, by a lesson waiting for the model (`state/deferred/`), asked to
be kept (`keep`), or still without an outcome are never pruned.
`retain_days = 0` keeps everything.
"""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import tomli_w

from daemon.git.safe import GitError
from daemon.git.userrepo import LedgerWriter, UserRepo
from daemon.people.escalation import open_escalations
from daemon.state.atomic import write_atomic
from daemon.state.events import iso
from daemon.state.eventtypes import Event
from daemon.state.ledger import ledger_of
from daemon.state.pruned import PrunedRun, append_pruned, trim_pruned
from daemon.state.records import RunRecord
from daemon.state.store import StateStore

PRUNED_MARKER = "pruned.toml"
RUN_ID_PATTERN = re.compile(r"\b\d{8}T\d{6}Z-[A-Za-z0-9][A-Za-z0-9_.-]*-[0-9a-f]{4}\b")
LIVE_RULE_FOLDERS = ("trial", "active")


def cited_by_rules(rules_dir: Path) -> set[str]:
    """Run ids that trial and active rules cite (source_run, evidence paths)."""
    out: set[str] = set()
    for status in LIVE_RULE_FOLDERS:
        folder = rules_dir / status
        if not folder.is_dir():
            continue
        for path in folder.glob("*.md"):
            try:
                out.update(RUN_ID_PATTERN.findall(path.read_text(encoding="utf-8")))
            except OSError:
                continue
    return out


def cited_by_open_escalations(store: StateStore) -> set[str]:

    # The newest repeat's run is kept too: its evidence is what the file points a person at.
    return {run for e in open_escalations(store) for run in (e.run, e.newest_run())}


def cited_by_deferred_lessons(store: StateStore) -> set[str]:
    """Runs whose post-mortem waits in `state/deferred/` for the model to answer again."""
    try:
        names = os.listdir(store.root / "deferred")
    except FileNotFoundError:
        return set()
    return {run for name in names for run in RUN_ID_PATTERN.findall(name)}


def _run_started(run_id: str) -> datetime | None:
    try:
        return datetime.strptime(run_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _delete_branch(
    store: StateStore, repo: Path, branch: str, run_id: str, now: datetime
) -> tuple[bool, str]:
    """Delete `branch` in `repo` when it exists, with the run's kept commits; (deleted, error).

    Each deletion is written to the ref ledger first: a run whose agent works in this
    repository meanwhile must not take it for its agent's doing.
    """
    writer = LedgerWriter(ledger_of(store.root), lambda: now, run_id)
    try:
        user = UserRepo.locate(repo)
        user.git.run("worktree", "prune", check=False)  # a removed worktree may still claim it
        kept = user.git.out("for-each-ref", "--format=%(refname)", f"refs/loopd/kept/{run_id}/")
        for ref in kept.splitlines():
            user.delete_ref(writer, ref, "pruned with its run")
        deleted = user.delete_ref(writer, f"refs/heads/{branch}", "pruned with its run")
        return deleted, ""
    except (GitError, OSError) as exc:
        return False, str(exc)[:300]


def _remove_run_files(run_dir: Path) -> list[str]:
    removed = []
    for entry in sorted(os.listdir(run_dir)):
        if entry in ("run.toml", PRUNED_MARKER):
            continue
        path = run_dir / entry
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def _protected(store: StateStore, keep: set[str], rules_dir: Path | None) -> set[str]:
    """The runs kept whatever their age: asked for, or cited by an escalation, a deferred
    lesson or a rule."""
    protected = set(keep) | cited_by_open_escalations(store) | cited_by_deferred_lessons(store)
    if rules_dir is not None:
        protected |= cited_by_rules(rules_dir)
    return protected


def _old_finished_run(
    store: StateStore, run_id: str, cutoff: datetime, live: set[str]
) -> RunRecord | None:
    """The run's record when it finished before `cutoff` and is not running."""
    if run_id in live:
        return None
    try:
        run = store.load_run(run_id)
    except Exception:  # noqa: BLE001 - an unreadable record is left for a person
        return None
    if run.outcome is None or (run.finished is not None and run.finished >= cutoff):
        return None
    return run


def _pruned_before(run_dir: Path) -> datetime | None:
    """When `pruned.toml` says the run was pruned; None when it was not."""
    try:
        when = tomllib.loads((run_dir / PRUNED_MARKER).read_text(encoding="utf-8"))["pruned"]
    except (OSError, ValueError, KeyError):
        return None
    return when if isinstance(when, datetime) else None


def _prune_files(
    store: StateStore,
    run: RunRecord,
    repos: dict[str, Path],
    now: datetime,
    result: dict[str, Any],
) -> tuple[list[str], str]:
    """Remove the run's files (run.toml stays) and its loopd branch; what was removed, and
    the branch deleted ("" none)."""
    removed = _remove_run_files(store.run_dir(run.id))
    branch = run.branch or f"loopd/{run.loop}/{run.id}"
    deleted = False
    if branch.startswith("loopd/"):
        repo = repos.get(run.loop) or (Path(run.repo) if run.repo else None)
        if repo is not None and repo.is_dir():
            deleted, error = _delete_branch(store, repo, branch, run.id, now)
            if error:
                result["errors"].append(f"{run.id}: branch {branch}: {error}")
    if deleted:
        result["branches_deleted"].append(branch)
        if run.branch == branch:
            run.branch_gone(branch)
            store.save_run(run)
    return removed, branch if deleted else ""


def _prune_run(
    store: StateStore,
    run: RunRecord,
    repos: dict[str, Path],
    retain_days: int,
    now: datetime,
    result: dict[str, Any],
    fold: bool,
) -> None:
    """Prune the run (files, branch, resolved escalation); `fold`: its folder goes whole,
    its record kept as a line of the pruned index, else `pruned.toml` beside run.toml."""
    run_dir = store.run_dir(run.id)
    pruned_at = _pruned_before(run_dir)
    removed, branch = ([], "") if pruned_at else _prune_files(store, run, repos, now, result)
    escalation = store.escalation_path(run.id)
    if escalation.exists():  # resolved (an open one would have kept the run)
        escalation.unlink()
        removed.append(f"escalations/{escalation.name}")
    if fold:
        shown = run.branch or run.branch_deleted
        deleted = bool(shown) and not run.branch
        entry = PrunedRun.of(run, pruned_at or now, retain_days, shown, deleted)
        append_pruned(store.root, entry)  # synced first: a crash leaves the folder, not a gap
        shutil.rmtree(run_dir, ignore_errors=True)
        removed.append("run.toml")
        result["folded"].append(run.id)
    else:
        marker = {"pruned": now, "removed": removed, "branch_deleted": bool(branch)}
        write_atomic(run_dir / PRUNED_MARKER, tomli_w.dumps(marker))
    if pruned_at is None:
        result["pruned"].append(run.id)
    store.events.append(
        Event.RUN_PRUNED,
        now,
        loop=run.loop,
        run=run.id,
        removed=removed,
        branch=branch,
        retain_days=retain_days,
        folded=fold,
    )


def _remove_old_reports(store: StateStore, cutoff: datetime) -> int:
    """Remove the reports written before `cutoff`; how many."""
    reports = store.root / "reports"
    removed = 0
    if reports.is_dir():
        stamp = "report-" + cutoff.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        for path in reports.glob("report-*.md"):
            if path.name < stamp:
                path.unlink(missing_ok=True)
                removed += 1
    return removed


def prune(
    store: StateStore,
    repos: dict[str, Path],
    retain_days: int,
    now: datetime,
    keep: set[str],
    rules_dir: Path | None = None,
) -> dict[str, Any]:
    """Prune runs finished more than `retain_days` ago; one event `run_pruned` per run."""
    result: dict[str, Any] = {
        "pruned": [],
        "folded": [],
        "kept": [],
        "branches_deleted": [],
        "errors": [],
        "reports_removed": 0,
    }
    if retain_days <= 0:
        return result
    cutoff = now - timedelta(days=retain_days)
    protected = _protected(store, keep, rules_dir)
    live = set(store.live_runs())
    newest = set(store.last_run_ids().values())  # keep a record: `loopd status`'s last outcome
    for run_id in store.run_ids():
        started = _run_started(run_id)
        if started is None:
            continue
        if started >= cutoff:
            break  # ids sort by start time: every later run is younger
        fold = run_id not in newest
        marked = (store.run_dir(run_id) / PRUNED_MARKER).exists()
        if marked and not fold:
            continue  # pruned already, and still its loop's newest
        run = _old_finished_run(store, run_id, cutoff, live)
        if run is None:
            continue
        if run_id in protected:
            result["kept"].append(run_id)
            continue
        _prune_run(store, run, repos, retain_days, now, result, fold)

    ledger_of(store.root).trim(now)
    result["index_lines_removed"] = trim_pruned(store.root, retain_days, now)
    result["reports_removed"] += _remove_old_reports(store, cutoff)
    result["cutoff"] = iso(cutoff)
    return result

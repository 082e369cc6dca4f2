"""The remote feed on the local engine: a delivery's trigger is in the inbox when `accept`
returns, the fetch runs meanwhile, and a run waits for it (`wait_fetched`) before its tree.

Real git: a bare "hosted" repository reached through a file URL, the loop's own clone.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from daemon.config import DaemonConfig, Loop, LoopConfig
from daemon.scheduling.remotes import RemoteFeed, RemotePush
from daemon.state.store import StateStore
from tests.helpers import git
from tests.listening import hosted, push_commit

T = datetime(2026, 12, 2, tzinfo=UTC)


def _feed(tmp_path: Path, clone_url: str, loop_repo: Path) -> tuple[RemoteFeed, list, list]:
    daemon = DaemonConfig.model_validate(
        {"remotes": {"up": {"kind": "github", "repository": "a/b", "clone_url": clone_url}}}
    )
    config = LoopConfig(repo=str(loop_repo), task="t", hosted="up", on_remote_push=["main"])
    loops = {"one": Loop("one", tmp_path / "one.toml", config)}
    recorded: list = []
    woken: list = []
    feed = RemoteFeed(
        StateStore(tmp_path / "state"),
        loops=lambda: loops,
        remotes=lambda: daemon.remotes,
        clock=lambda: T,
        event=lambda type_, **fields: recorded.append((type_, fields)),
    )
    feed.early_triggers = True
    feed.wake = lambda: woken.append(True)
    return feed, recorded, woken


def _inbox(feed: RemoteFeed) -> list[dict]:
    folder = feed.store.inbox_dir
    return [json.loads((folder / name).read_text()) for name in feed.store.inbox_names()]


def test_a_delivery_is_in_the_inbox_before_its_fetch_and_the_run_waits_for_it(
    tmp_path: Path,
) -> None:
    origin, work, loop_repo = hosted(tmp_path)
    feed, recorded, woken = _feed(tmp_path, f"file://{origin}", loop_repo)
    before, after = push_commit(work, "pushed")
    loops = list(feed.loops().values())
    # Not started: nothing fetches yet, so what `accept` leaves is the trigger alone.
    feed.accept(RemotePush("up", "main", before, after, "webhook", T, delivery="d-1"), loops)
    (trigger,) = _inbox(feed)
    assert (trigger["loop"], trigger["kind"], trigger["new"]) == ("one", "push", after)
    assert trigger["remote"] == "up" and "delivery d-1" in trigger["reason"]
    assert woken == [True]
    assert git(loop_repo, "for-each-ref", "refs/remotes/up/") == ""
    feed.start()
    try:
        assert feed.wait_fetched(loop_repo, "up", "main", after, lambda: False) == ""
        assert git(loop_repo, "rev-parse", "refs/remotes/up/main") == after
        assert len(_inbox(feed)) == 1  # the fetch wrote no second trigger
        # A fetch nothing asked for (the delivery came before a restart): the run's wait
        # fetches it itself, and the ref moves on from where the feed left it.
        _, newer = push_commit(work, "pushed before a restart")
        assert feed.wait_fetched(loop_repo, "up", "main", newer, lambda: False) == ""
        assert git(loop_repo, "rev-parse", "refs/remotes/up/main") == newer
        # Someone else moved the ref since: read again, not overwritten blindly.
        git(loop_repo, "update-ref", "refs/remotes/up/main", before)
        _, third = push_commit(work, "third")
        assert feed.wait_fetched(loop_repo, "up", "main", third, lambda: False) == ""
        assert git(loop_repo, "rev-parse", "refs/remotes/up/main") == third
    finally:
        feed.stop()
    ledger = [
        json.loads(line)
        for line in (tmp_path / "state" / "ref-ledger.jsonl").read_text().splitlines()
    ]
    moves = [(e["old"], e["new"]) for e in ledger]
    assert moves[:2] == [("", after), (after, newer)]
    # The move from where the feed had left it was refused by update-ref's check (its entry
    # stays, a move that did not happen); then the move from where the ref was.
    assert moves[2:] == [(newer, third), (before, third)]
    assert not [t for t, _ in recorded if t in ("remote_fetch_failed", "remote_feed_error")]


def test_a_fetch_that_fails_is_the_waiting_runs_error(tmp_path: Path) -> None:
    _, work, loop_repo = hosted(tmp_path)
    missing = tmp_path / "missing.git"
    feed, recorded, _ = _feed(tmp_path, f"file://{missing}", loop_repo)
    before, after = push_commit(work, "pushed")
    feed.start()
    try:
        push = RemotePush("up", "main", before, after, "webhook", T, delivery="d-2")
        feed.accept(push, list(feed.loops().values()))
        error = feed.wait_fetched(loop_repo, "up", "main", after, lambda: False)
    finally:
        feed.stop()
    assert "missing.git" in error
    failed = [f for t, f in recorded if t == "remote_fetch_failed"]
    assert failed and failed[0]["loop"] == "one" and failed[0]["new"] == after
    assert len(_inbox(feed)) == 1  # the trigger stays: its run ends in that error


def test_a_stopped_run_stops_waiting(tmp_path: Path) -> None:
    _, _, loop_repo = hosted(tmp_path)
    feed, _, _ = _feed(tmp_path, "file:///nowhere", loop_repo)
    # Never started: the fetch it asks for never comes; the stop ends the wait.
    error = feed.wait_fetched(loop_repo, "up", "main", "0" * 40, lambda: True)
    assert error.startswith("stopped")

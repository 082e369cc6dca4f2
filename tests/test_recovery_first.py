"""After a crash, recovery runs before catch-up: the retry of an interrupted run is queued
first and never merged into, skipped or dropped for a catch-up fire; a retry that cannot run
says so on the interrupted run and to the person."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

import daemon.processes as processes
from daemon.daemon import Daemon
from daemon.state.store import StateStore
from tests.helpers import wait_for
from tests.test_service import NOW, home_with, live_run

INTERRUPTED = "20261129T015500Z-app-0002"


@pytest.fixture
def no_subreaper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Daemon.start in the test process must not make pytest the subreaper of everything."""
    monkeypatch.setattr(processes, "set_child_subreaper", lambda: False)


def crashed_home(tmp_path: Path, **loop: object):  # noqa: ANN201 - Home
    """A home whose loopd died mid-run an hour after its schedule's last handled fire."""
    home = home_with(tmp_path, schedule=["*/10 * * * *"], catch_up="2h", **loop)
    store = StateStore(home.state_dir)
    live_run(store, INTERRUPTED)
    (store.root / "schedule.toml").write_text(
        f"[loops.app]\nhandled_until = {(NOW - timedelta(hours=1)).isoformat()}\n"
    )
    return home, store


@pytest.mark.parametrize(
    ("overlap", "extra"),
    [("skip", {}), ("coalesce", {}), ("queue", {"max_queued": 1})],
)
def test_the_retry_is_queued_before_catch_up_whatever_the_overlap_policy(
    tmp_path: Path, no_subreaper: None, overlap: str, extra: dict
) -> None:
    home, store = crashed_home(tmp_path, overlap=overlap, **extra)
    daemon = Daemon.start(home, NOW)
    try:
        assert store.load_run(INTERRUPTED).outcome == "interrupted"
        pending = daemon.intake.queue.pending("app")
        first = pending[0].trigger
        assert (first.kind, first.retry_of) == ("retry", INTERRUPTED)
        kinds = [p.trigger.kind for p in pending]
        merged = [t.kind for t in pending[0].merged]
        # The catch-up comes after: merged into the retry, skipped, or dropped; never the
        # other way round.
        assert {"skip": kinds == ["retry"] and merged == [],
                "coalesce": kinds == ["retry"] and merged == ["catch-up"],
                "queue": kinds == ["retry"]}[overlap], (kinds, merged)  # fmt: skip
        events = store.events.read()
        retry_event = next(e for e in events if e["type"] == "trigger" and e["kind"] == "retry")
        catch_up = [e for e in events if e.get("kind") == "catch-up"]
        assert catch_up and events.index(retry_event) < events.index(catch_up[0])
        assert not store.load_run(INTERRUPTED).retry_not_run
    finally:
        daemon.stop(NOW, grace=0)


def test_a_retry_that_cannot_run_says_so_on_the_run_and_to_the_person(
    tmp_path: Path, no_subreaper: None
) -> None:
    told = tmp_path / "told.txt"
    home, store = crashed_home(tmp_path, enabled=False)
    notify = ["/bin/sh", "-c", f'printf "%s\\n" "$1" >> {told}', "notify"]
    config = home.root / "loopd.toml"
    config.write_text(f"[notify]\ncommand = {json.dumps(notify)}\n" + config.read_text())
    daemon = Daemon.start(home, NOW)
    try:
        run = store.load_run(INTERRUPTED)
        assert run.outcome == "interrupted"
        assert run.retry_not_run.startswith("loop disabled")
        [event] = [e for e in store.events.read() if e["type"] == "retry_not_run"]
        assert event["run"] == INTERRUPTED and event["why"] == run.retry_not_run
        text = wait_for(lambda: told.exists() and told.read_text(), what="the notification")
        assert f"the retry of interrupted run {INTERRUPTED} could not run: loop disabled" in text
        assert daemon.intake.queue.pending("app") == []
    finally:
        daemon.stop(NOW, grace=0)

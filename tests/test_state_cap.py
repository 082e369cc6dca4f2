"""`[limits] state_max`: the oldest finished runs' transcripts go first, then their attempt
folders; never a live run's nor an open escalation's evidence; `loopd status` shows the size."""

from __future__ import annotations

import json
import os
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.home import Home
from daemon.people.escalation import write_escalation
from daemon.service.statecap import enforce, read_usage
from daemon.state.records import AttemptRecord, RunRecord, RunTrigger
from daemon.state.store import StateStore
from tests.helpers import loopd, make_home, make_repo

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TRANSCRIPT = 200_000
LOG = 10_000


def finished_run(store: StateStore, loop: str, hours_ago: int, outcome: str | None) -> str:
    started = NOW - timedelta(hours=hours_ago)
    run_id = store.new_run_id(loop, started)
    attempt = AttemptRecord(n=1, started=started, finished=started, checks_passed=False)
    run = RunRecord(id=run_id, loop=loop, task="t", trigger=RunTrigger(kind="push"),
                    started=started, finished=started if outcome else None, outcome=outcome,
                    reason="checks fail", attempts=[attempt])  # type: ignore[arg-type]  # fmt: skip
    store.save_run(run)
    folder = store.attempt_dir(run_id, 1)
    line = json.dumps({"ts": "x", "stream": "stdout", "type": "text", "text": "y" * 80}) + "\n"
    (folder / "transcript.jsonl").write_text(line * (TRANSCRIPT // len(line)))
    (folder / "checks.log").write_text("F" * LOG)
    return run_id


def test_the_oldest_transcripts_go_first_and_protected_runs_keep_theirs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    config = '[agents.a]\nadapter = "command"\ncommand = ["true"]\n'
    loop = f'repo = "{repo}"\ntask = "t"\nagent = "a"\ndone_when = ["true"]\n'
    root = make_home(tmp_path / "home", config, {"big": loop, "small": loop})
    store = Home(root).state()
    escalated = finished_run(store, "big", 50, "escalated")  # the oldest: an open escalation's
    write_escalation(store, store.load_run(escalated), NOW)
    old = finished_run(store, "big", 40, "escalated")
    older_still = finished_run(store, "big", 45, "succeeded")
    newer = finished_run(store, "small", 10, "succeeded")
    unfinished = finished_run(store, "big", 48, None)  # no outcome: recovery may need it
    live = finished_run(store, "big", 30, "succeeded")
    store.mark_live(live)

    runs = store.runs_dir
    total = sum(f.stat().st_size for f in runs.parent.rglob("*") if f.is_file())
    # Room for all but two transcripts: the two oldest the cap may take go.
    limit = total - 2 * TRANSCRIPT + 1000
    usage, evicted = enforce(store, limit, NOW, protected={escalated})
    assert evicted == [older_still, old]
    assert usage.total <= limit and usage.limit == limit
    for run_id in (older_still, old):
        attempt = runs / run_id / "attempt-1"
        assert not (attempt / "transcript.jsonl").exists() and (attempt / "checks.log").exists()
        marker = tomllib.loads((runs / run_id / "evicted.toml").read_text())
        assert marker["removed"] == ["attempt-1/transcript.jsonl"]
    for run_id in (escalated, unfinished, live, newer):
        assert (runs / run_id / "attempt-1" / "transcript.jsonl").exists()
    assert list(usage.loops) == ["big", "small"]  # the largest first

    # `loopd logs` of an evicted run still reads; `loopd status` shows the size.
    logs = loopd(root, "logs", old)
    assert logs.returncode == 0 and "deleted to keep state/ under" in logs.stdout, logs.stderr
    status = json.loads(loopd(root, "status", "--json").stdout)
    assert status["state"]["total"] == usage.total and status["state"]["limit"] == limit
    shown = " ".join(loopd(root, "status", env={"COLUMNS": "200"}).stdout.split())
    assert "state: " in shown and "(state_max, measured " in shown  # its age: hourly
    assert " ago); largest loops: big " in shown

    # Far over the cap even without transcripts: whole attempt folders go, oldest first,
    # still never the protected ones.
    usage, evicted = enforce(store, 1, NOW, protected={escalated})
    assert set(evicted) == {older_still, old, newer}
    assert not (runs / old / "attempt-1").exists() and (runs / old / "run.toml").exists()
    assert (runs / escalated / "attempt-1" / "transcript.jsonl").exists()
    assert (runs / live / "attempt-1").exists() and (runs / unfinished / "attempt-1").exists()
    assert read_usage(store) == usage


def test_state_max_defaults_to_the_smaller_of_20gb_and_a_quarter_of_the_disk(
    tmp_path: Path,
) -> None:
    root = make_home(tmp_path / "home")
    limits = Home(root).load().daemon.limits
    disk = os.statvfs(tmp_path)
    assert limits.state_limit(tmp_path) == min(20 * 10**9, disk.f_frsize * disk.f_blocks // 4)
    (root / "loopd.toml").write_text((root / "loopd.toml").read_text() + 'state_max = "5GB"\n')
    assert Home(root).load().daemon.limits.state_limit(tmp_path) == 5 * 10**9


def test_rotated_event_files_count_and_go_last_oldest_first(tmp_path: Path) -> None:
    """Events are under state_max too: once no finished run has more to give, the oldest
    rotated event files go (never the current log)."""
    store = StateStore(tmp_path / "state", events_rotate=50_000)
    line = "e" * 999
    for _ in range(260):  # about five rotations of 50 KB
        store.events.append("config_warning", NOW, message=line)
    rotated = sorted(store.root.glob("events-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    assert len(rotated) >= 4
    total = sum(f.stat().st_size for f in store.root.rglob("*") if f.is_file())
    events: list[str] = []
    usage, evicted = enforce(store, total - 60_000, NOW, protected=set(), events_removed=events)
    assert evicted == []
    assert events == [rotated[0].name, rotated[1].name]  # 100 KB freed: the two oldest
    assert not rotated[0].exists() and rotated[2].exists() and store.events.path.exists()
    on_disk = sum(
        f.stat().st_size for f in store.root.rglob("*") if f.is_file() and f.name != "usage.toml"
    )
    assert usage.total == on_disk <= usage.limit


def test_the_pruned_index_follows_retention(tmp_path: Path) -> None:
    from daemon.state.pruned import PrunedRun, append_pruned, newest_pruned, trim_pruned

    store = StateStore(tmp_path / "state")
    ids = []
    for days in (100, 40, 5):
        started = NOW - timedelta(days=days + 30)
        run = RunRecord(id=store.new_run_id("l", started), loop="l", task="t",
                        trigger=RunTrigger(kind="push"), started=started, outcome="succeeded",
                        finished=started)  # fmt: skip
        append_pruned(store.root, PrunedRun.of(run, NOW - timedelta(days=days), 30, "", False))
        ids.append(run.id)
    with (store.root / "pruned-runs.jsonl").open("ab") as fh:
        fh.write(b'{"cut by a crash\n')
    assert trim_pruned(store.root, 30, NOW) == 3  # two older than 30 days, one unreadable
    assert [p.run for p in newest_pruned(store.root)] == [ids[2]]
    assert trim_pruned(store.root, 30, NOW) == 0
    assert trim_pruned(store.root, 0, NOW + timedelta(days=999)) == 0  # 0 keeps them all

"""A byte that is not UTF-8 in run.toml or status.toml: every reader names the file and goes on."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from daemon.state.records import RunRecord, RunTrigger
from daemon.state.store import StateStore
from tests.helpers import events, loopd, make_home, make_repo, start_daemon, stop_daemon

OLDER = "20261129T010000Z-calc-0001"
NEWER = "20261129T020000Z-calc-0002"
T0 = datetime(2026, 11, 29, 1, 0, tzinfo=UTC)


def home_with_a_bad_run(tmp_path: Path) -> Path:
    """Two finished runs of `calc`; the newer run.toml and status.toml hold a byte 0xff."""
    repo = make_repo(tmp_path / "repo")
    home = make_home(
        tmp_path / "home",
        '[agents.a]\nadapter = "command"\ncommand = ["true"]\n',
        {"calc": f'repo = "{repo}"\ntask = "t"\nagent = "a"\n'},
    )
    store = StateStore(home / "state")
    for run_id in (OLDER, NEWER):
        run = RunRecord(
            id=run_id,
            loop="calc",
            task="t",
            trigger=RunTrigger(kind="manual", ts=T0),
            started=T0,
            finished=T0,
            outcome="succeeded",
            reason="checks passed",
        )
        store.save_run(run)
    bad = store.run_dir(NEWER) / "run.toml"
    bad.write_bytes(bad.read_bytes().replace(b'reason = "checks passed"', b'reason = "\xff"'))
    (home / "state" / "status.toml").write_bytes(b'[daemon]\nversion = "\xff"\n')
    return home


def no_traceback(proc) -> None:  # noqa: ANN001
    assert "Traceback" not in proc.stderr, proc.stderr


def test_runs_lists_the_readable_runs_and_names_the_unreadable_one(tmp_path: Path) -> None:
    home = home_with_a_bad_run(tmp_path)
    for args in (["runs"], ["runs", "--json"], ["runs", "calc"]):
        proc = loopd(home, *args, env={"COLUMNS": "200"})
        assert proc.returncode == 0, proc.stderr
        no_traceback(proc)
        assert f"{NEWER}/run.toml" in proc.stderr and "not UTF-8" in proc.stderr
        assert OLDER in proc.stdout
    listed = json.loads(loopd(home, "runs", "--json").stdout)
    assert [r["id"] for r in listed] == [OLDER]


def test_show_names_the_unreadable_file(tmp_path: Path) -> None:
    home = home_with_a_bad_run(tmp_path)
    proc = loopd(home, "show", NEWER)
    assert proc.returncode == 1
    no_traceback(proc)
    assert f"{NEWER}/run.toml" in proc.stderr and "not UTF-8" in proc.stderr
    assert loopd(home, "show", OLDER).returncode == 0


def test_status_keeps_the_loop_and_shows_its_newest_readable_run(tmp_path: Path) -> None:
    home = home_with_a_bad_run(tmp_path)
    proc = loopd(home, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    no_traceback(proc)
    data = json.loads(proc.stdout)
    assert data["loops"]["calc"]["last_run"] == OLDER
    assert data["loops"]["calc"]["last_outcome"] == "succeeded"
    assert "status.toml" in proc.stderr and f"{NEWER}/run.toml" in proc.stderr
    proc = loopd(home, "status", env={"COLUMNS": "200"})
    assert proc.returncode == 0 and "calc" in proc.stdout
    no_traceback(proc)


def test_cancel_of_a_run_whose_record_is_unreadable_still_asks(tmp_path: Path) -> None:
    home = home_with_a_bad_run(tmp_path)
    proc = loopd(home, "cancel", NEWER)
    assert proc.returncode == 0 and "cancel requested" in proc.stdout
    no_traceback(proc)
    assert f"{NEWER}/run.toml" in proc.stderr
    assert (home / "state" / "control" / f"cancel-{NEWER}").exists()


def test_the_daemon_starts_and_records_the_unreadable_files(tmp_path: Path, daemons: list) -> None:
    home = home_with_a_bad_run(tmp_path)
    store = StateStore(home / "state")
    store.mark_live(NEWER)  # as if a dead daemon had left it running
    (home / "state" / "status.toml").unlink()  # the daemon writes it, never reads it
    daemon = start_daemon(home)
    daemons.append(daemon)
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert status["daemon"]["running"] and "calc" in status["loops"]
    assert stop_daemon(daemon) == 0
    named = [e["file"] for e in events(home) if e["type"] == "state_unreadable"]
    assert str(store.run_dir(NEWER) / "run.toml") in named

"""`loopd status` and `loopd runs` as a person reads them: the last outcome is a finished
run's, a parked run's reason has no dangling separator, a broken loop file says why it is
not loaded."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from daemon.state.records import RunRecord, RunTrigger
from daemon.state.store import StateStore
from tests.helpers import (
    daemon_log,
    loopd,
    make_home,
    make_repo,
    start_daemon,
    stop_daemon,
    wait_for,
)

NOW = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
AGENT = f'[agents.a]\nadapter = "command"\ncommand = {json.dumps([sys.executable, "-c", "pass"])}\n'


def home_with_loop(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo", {"check.py": "pass\n"})
    loop = f'repo = "{repo}"\nagent = "a"\ntask = "t"\ndone_when = ["python3 check.py"]\n'
    return make_home(tmp_path / "home", AGENT, {"app": loop})


def save(store: StateStore, run_id: str, **fields: object) -> RunRecord:
    run = RunRecord(
        id=run_id,
        loop="app",
        task="t",
        trigger=RunTrigger(kind="manual", ts=NOW),
        started=NOW,
        **fields,
    )
    store.save_run(run)
    return run


def test_last_outcome_is_the_newest_finished_runs_and_a_parked_reason_ends_cleanly(
    tmp_path: Path,
) -> None:
    home = home_with_loop(tmp_path)
    store = StateStore(home / "state")
    done = save(store, "20261129T010000Z-app-0001", outcome="succeeded", phase="idle")
    parked = save(
        store,
        "20261129T020000Z-app-0002",
        phase="waiting",
        resume_at=datetime(2026, 11, 29, 9, 0, tzinfo=UTC),
    )
    store.mark_live(parked.id)
    info = json.loads(loopd(home, "status", "--json").stdout)["loops"]["app"]
    assert info["phase"] == "waiting" and info["run"] == parked.id
    assert (info["last_run"], info["last_outcome"]) == (done.id, "succeeded")
    text = loopd(home, "status", env={"COLUMNS": "200"}).stdout
    (row,) = [line for line in text.splitlines() if line.startswith("│ app ")]
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    assert cells[:4] == ["app", "waiting", parked.id, "succeeded"]
    runs = loopd(home, "runs", env={"COLUMNS": "200"}).stdout
    (line,) = [line for line in runs.splitlines() if parked.id in line]
    assert "parked until 2026-11-29 09:00Z" in line and not line.rstrip().endswith(";")


def test_a_broken_loop_file_shows_not_loaded_and_why_not_disabled(
    tmp_path: Path, daemons: list
) -> None:
    home = home_with_loop(tmp_path)
    daemon = start_daemon(home)
    daemons.append(daemon)
    (home / "loops" / "fresh.toml").write_text('repo = "/nowhere"\ntask = "t"\noverlap = "x"\n')
    wait_for(
        lambda: "fresh" in json.loads(loopd(home, "status", "--json").stdout)["loops"],
        timeout=20,
        what="the broken file seen",
    )
    info = json.loads(loopd(home, "status", "--json").stdout)["loops"]["fresh"]
    assert info["note"].startswith("not loaded: ") and "overlap" in info["note"]
    assert info["phase"] == "not-loaded"
    text = loopd(home, "status", env={"COLUMNS": "300"}).stdout
    (row,) = [line for line in text.splitlines() if line.startswith("│ fresh ")]
    phase = row.strip("│").split("│")[1].strip()
    assert phase == "not loaded", text + daemon_log(home)
    # Why, on a line of its own under the table (so the table fits 80 columns).
    (why,) = [line for line in text.splitlines() if line.startswith("error:")]
    assert "fresh.toml" in why and "overlap" in why
    assert "disabled" not in text
    assert stop_daemon(daemon) == 0

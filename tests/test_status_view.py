"""`loopd status` for a person at an 80-column terminal: RUN_IDs whole, next fires in each
loop's zone, schedules held by an escalation said so; and `state/README.md` explains what
loopd wrote."""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from daemon.state.readme import README, stamped
from tests.helpers import loopd, make_home, make_repo, start_daemon, stop_daemon, wait_for

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}
LONG = "a-loop-name-of-thirty-two-chars-"  # 32 characters, the most a loop name may have


def _setup(tmp_path: Path, fixer: bool = True) -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "repo", BUGGY)
    fix = "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))"
    script = "import pathlib\n" + (fix if fixer else "pass")
    config = (
        f'[agents.a]\nadapter = "command"\ncommand = {json.dumps([sys.executable, "-c", script])}\n'
    )
    base = (
        f'repo = "{repo}"\nagent = "a"\ncritic = "off"\ndone_when = ["python3 check.py"]\n'
        "max_attempts = 1\nmax_nudges = 0\n"
    )
    loops = {
        LONG: base + 'task = "Fix add."\nschedule = ["0 2 * * *"]\ntimezone = "Europe/Berlin"\n',
        "tokyo": base + 'task = "Fix it."\nschedule = ["30 6 * * 1"]\ntimezone = "Asia/Tokyo"\n',
    }
    return make_home(tmp_path / "home", config, loops), repo


def test_status_at_80_columns_keeps_run_ids_whole_and_fires_in_each_loops_zone(
    tmp_path: Path, daemons: list
) -> None:
    assert len(LONG) == 32
    home, _ = _setup(tmp_path)
    ran = loopd(home, "once", LONG)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run_id = ran.stdout.splitlines()[0]
    assert len(run_id) == 54
    tokyo = loopd(home, "once", "tokyo").stdout.splitlines()[0]
    daemon = start_daemon(home)
    daemons.append(daemon)
    try:
        data = json.loads(loopd(home, "status", "--json").stdout)
        proc = loopd(home, "status", env={"COLUMNS": "80"})
    finally:
        assert stop_daemon(daemon) == 0
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, proc.stdout
    assert any(run_id in line for line in lines), proc.stdout
    assert any(tokyo in line for line in lines), proc.stdout
    for name, zone, clock in ((LONG, "Europe/Berlin", "02:00"), ("tokyo", "Asia/Tokyo", "06:30")):
        fire = datetime.fromisoformat(data["loops"][name]["next_fire"])
        local = fire.astimezone(ZoneInfo(zone))
        assert f"{local:%H:%M}" == clock
        expected = f"{local:%a %d %b %H:%M} {local.tzname()}"
        assert data["loops"][name]["next_fire_local"] == expected
        # The table may wrap the time inside its cell, never cut it.
        cells = " ".join(
            re.findall(r"[A-Z][a-z]{2} \d\d [A-Z][a-z]{2}|\d\d:\d\d [A-Z+\-0-9]+", proc.stdout)
        )
        assert f"{local:%a %d %b}" in cells and f"{clock} {local.tzname()}" in cells


def test_status_says_when_a_schedule_is_held_by_an_escalation(tmp_path: Path) -> None:
    home, _ = _setup(tmp_path, fixer=False)
    failed = loopd(home, "once", "tokyo")
    assert failed.returncode == 1
    run_id = failed.stdout.splitlines()[0]
    data = json.loads(loopd(home, "status", "--json").stdout)
    assert data["loops"]["tokyo"]["held_by"] == run_id
    assert "held_by" not in data["loops"][LONG]
    proc = loopd(home, "status", env={"COLUMNS": "80"})
    out = proc.stdout
    assert "held by an" in out and "escalation" in out
    note = " ".join(out.split())
    assert f"tokyo: its schedule is held back by open escalation {run_id}" in note
    assert any(run_id in line for line in out.splitlines())  # whole on one line


def test_state_readme_names_what_loopd_wrote(tmp_path: Path, daemons: list) -> None:
    home, _ = _setup(tmp_path, fixer=False)
    loopd(home, "once", "tokyo")  # escalated: escalations/, progress/, runs/, live/, locks/
    loopd(home, "pause", LONG)
    loopd(home, "report")
    daemon = start_daemon(home)
    daemons.append(daemon)
    loopd(home, "trigger", "tokyo")
    wait_for(lambda: (home / "state" / "queue.toml").exists(), what="the queue file")
    assert stop_daemon(daemon) == 0
    readme = (home / "state" / "README.md").read_text()
    state = home / "state"
    for entry in state.iterdir():
        name = entry.name
        if name.startswith(".") or name == "README.md":
            continue
        assert f"`{name}" in readme or f"`{name.split('.')[0]}" in readme, name
    run_dir = sorted((state / "runs").iterdir())[0]  # the escalated run of `once`
    for entry in run_dir.iterdir():
        key = "attempt-N/" if entry.name.startswith("attempt-") else entry.name
        assert key in readme, entry.name
    for entry in (run_dir / "attempt-1").iterdir():
        assert f"`attempt-N/{entry.name}`" in readme, entry.name
    # `loopd run` writes it when it is missing or an older page of loopd's own, and never
    # over a page a person wrote or edited.
    older = stamped("# state/: an older loopd's page\n")
    edited = readme.replace("## Runs", "## Runs (mine: see also my notes)")
    for page, kept in (("mine\n", True), (edited, True), (older, False), (None, False)):
        if page is None:
            (state / "README.md").unlink()
        else:
            (state / "README.md").write_text(page)
        daemon = start_daemon(home)
        daemons.append(daemon)
        assert stop_daemon(daemon) == 0
        assert (state / "README.md").read_text() == (page if kept else readme), page


def test_state_readme_names_every_file_loopd_writes() -> None:
    from daemon.engine.temporal import homeside, inboxtaker, workerstore
    from daemon.git import integrity
    from daemon.rules import kinds
    from daemon.runs import parking
    from daemon.state import aftermath, deliveries, ledger, pruned
    from daemon.web import security

    names = [
        ledger.LEDGER_NAME,
        homeside.KEY_FILE,
        f"runs/RUN_ID/{workerstore.RECORD}",
        f"{workerstore.LIVE}/",
        workerstore.EVENTS,
        f"attempt-N/{parking.ASKED_FILE}",
        f"runs/RUN_ID/{integrity.GUARD_FILE}",
        "quota.toml",
        "budget.toml",
        "locks/quota.lock",
        "worker.lock",
        inboxtaker.INBOX_LOCK,
        "experiments/",
        "control/reload-",
        "runs/RUN_ID/setup.log",
        "hooks.log",
        deliveries.DELIVERIES_NAME,
        f"runs/RUN_ID/{kinds.NOTES_FILE}",
        pruned.PRUNED_INDEX,
        f"runs/RUN_ID/{aftermath.AFTERMATH_FILE}",
        security.TOKEN_FILE,
    ]
    for name in names:
        assert f"`{name}" in README, name
    assert "agent-homes" not in README  # agents' HOMEs are per run, beside the run's tree

"""An escalation of a task is closed, `superseded by RUN_ID`, when a later run of it succeeds;
closed, it holds back the loop's schedule no longer."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

from tests.helpers import events, loopd, make_home, make_repo

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}


def _home(tmp_path: Path) -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "repo", BUGGY)
    mode = tmp_path / "mode"
    mode.write_text("fail")
    script = (
        "import pathlib\n"
        f"if pathlib.Path({str(mode)!r}).read_text() == 'fix':\n"
        "    p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    )
    # The agent reads the test's switch, outside its tree: the sandbox shows it read-only.
    config = (
        f'[agents.a]\nadapter = "command"\ncommand = {json.dumps([sys.executable, "-c", script])}\n'
        f'\n[sandbox]\nreadable = ["{mode}"]\n'
    )
    loop = (
        f'repo = "{repo}"\ntask = "Make check.py pass."\nagent = "a"\ncritic = "off"\n'
        'done_when = ["python3 check.py"]\nmax_attempts = 1\nmax_nudges = 0\n'
        'schedule = ["0 2 * * *"]\ntimezone = "Europe/Berlin"\n'
    )
    return make_home(tmp_path / "home", config, {"calc": loop}), mode


def _front(path: Path) -> dict:
    text = path.read_text()
    return tomllib.loads(text.split("+++\n")[1])


def test_a_later_success_supersedes_and_closes_the_escalation(tmp_path: Path) -> None:
    home, mode = _home(tmp_path)
    failed = loopd(home, "once", "calc")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    first = failed.stdout.splitlines()[0]
    escalation = home / "state" / "escalations" / f"{first}.md"
    assert _front(escalation)["status"] == "open"
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert status["loops"]["calc"]["held_by"] == first  # the schedule waits for a person
    progress = (home / "state" / "progress" / "calc.md").read_text()
    assert f"- run {first}:" in progress.split("## Open escalations", 1)[1]

    mode.write_text("fix")
    fixed = loopd(home, "once", "calc")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    second = fixed.stdout.splitlines()[0]
    front = _front(escalation)
    assert front["status"] == "superseded" and front["superseded_by"] == second
    assert f"## Superseded by {second}" in escalation.read_text()
    (event,) = [e for e in events(home) if e["type"] == "escalation_superseded"]
    assert event["run"] == first and event["by"] == second
    # Closed: nothing waits, the schedule is free again, and resolving it says why it cannot.
    assert json.loads(loopd(home, "escalations", "--json").stdout) == []
    listed = loopd(home, "escalations", "list", "--all").stdout
    assert first in listed and "superseded" in listed
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert "held_by" not in status["loops"]["calc"]
    again = loopd(home, "escalations", "resolve", first)
    assert again.returncode == 1 and f"superseded by run {second}" in again.stderr
    # The progress notes, rebuilt after the run, list it no longer as open.
    progress = (home / "state" / "progress" / "calc.md").read_text()
    assert f"- run {first}:" not in progress.split("## Open escalations", 1)[1]


def test_a_later_failure_or_another_task_does_not_supersede(tmp_path: Path) -> None:
    home, mode = _home(tmp_path)
    first = loopd(home, "once", "calc").stdout.splitlines()[0]
    second = loopd(home, "once", "calc").stdout.splitlines()[0]  # fails again
    escalations = home / "state" / "escalations"
    # The repeat counts in the open escalation instead of filing its own.
    front = _front(escalations / f"{first}.md")
    assert (front["status"], front["count"], front["latest_run"]) == ("open", 2, second)
    assert not (escalations / f"{second}.md").exists()
    # Another task of the same loop succeeding leaves them open.
    loop = home / "loops" / "calc.toml"
    loop.write_text(loop.read_text().replace("Make check.py pass.", "Something else."))
    mode.write_text("fix")
    assert loopd(home, "once", "calc").returncode == 0
    assert _front(escalations / f"{first}.md")["status"] == "open"
    # The task again: the escalation closes, superseded by that run.
    loop.write_text(loop.read_text().replace("Something else.", "Make check.py pass."))
    third = loopd(home, "once", "calc").stdout.splitlines()[0]
    front = _front(escalations / f"{first}.md")
    assert (front["status"], front["superseded_by"]) == ("superseded", third)

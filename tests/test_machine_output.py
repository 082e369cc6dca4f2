"""One machine vocabulary: `--json` of runs, show, escalations and status use the same keys
(`run`, `loop`, `outcome`) and one timestamp format; a loop file that does not load has
its own phase; `status` and `runs` fit 80 columns and status counts open escalations."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.helpers import loopd, make_home, make_repo
from tests.test_daemon import BUGGY, FIXER, agent, loop_text

# ISO 8601 in UTC with a Z, as state files write them: the one format of every --json.
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")
LOOKS_LIKE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def times_in(value: Any) -> list[str]:
    """Every string in a JSON value that looks like a date-time."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in times_in(v)]
    if isinstance(value, list):
        return [t for v in value for t in times_in(v)]
    return [value] if isinstance(value, str) and LOOKS_LIKE_TIME.match(value) else []


def a_morning(tmp_path: Path) -> tuple[Path, str, str]:
    """A home after a night: one run that succeeded, one escalated, one loop file broken."""
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(
        tmp_path / "home",
        agent(FIXER),
        {
            "calc": loop_text(repo),
            "strict": loop_text(repo, max_attempts=1).replace("python3 check.py", "false"),
            "broken": "max_attempts = = 2\n",
        },
    )
    ids = []
    for loop in ("calc", "strict"):
        done = loopd(home, "once", loop, timeout=120)
        ids.append(done.stdout.splitlines()[0])
    return home, ids[0], ids[1]


def test_every_json_names_runs_alike_and_writes_time_one_way(tmp_path: Path) -> None:
    home, good, bad = a_morning(tmp_path)
    listed = json.loads(loopd(home, "runs", "--json").stdout)
    shown = json.loads(loopd(home, "show", good, "--json").stdout)
    escalations = json.loads(loopd(home, "escalations", "--json").stdout)
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert {r["run"] for r in listed} == {good, bad}
    assert all(r["id"] == r["run"] for r in listed)  # the older key, kept for scripts
    assert (shown["run"], shown["loop"], shown["outcome"]) == (good, "calc", "succeeded")
    assert [(e["run"], e["loop"], e["outcome"]) for e in escalations] == [
        (bad, "strict", "escalated")
    ]
    assert status["loops"]["calc"]["last_run"] == good
    stamps = times_in([listed, shown, escalations, status])
    assert len(stamps) >= 8
    assert [t for t in stamps if not TIMESTAMP.match(t)] == []


def test_status_gives_a_broken_loop_its_phase_and_counts_open_escalations(
    tmp_path: Path,
) -> None:
    home, _, bad = a_morning(tmp_path)
    status = json.loads(loopd(home, "status", "--json").stdout)
    broken = status["loops"]["broken"]
    assert broken["phase"] == "not-loaded" and broken["loaded"] is False
    assert "broken.toml" in broken["error"]
    assert status["open_escalations"] == 1
    text = loopd(home, "status", env={"COLUMNS": "80"}).stdout
    assert "open escalations: 1" in text
    row = next(line for line in text.splitlines() if "broken" in line and "not loaded" in line)
    assert "TOML" not in row  # why is on its own line, under the table
    assert "broken.toml" in " ".join(text.split("error:", 1)[1].split()).replace(" ", "")
    assert max(len(line) for line in text.splitlines()) <= 80
    resolved = loopd(home, "escalations", "resolve", bad)
    assert resolved.returncode == 0, resolved.stderr
    assert json.loads(loopd(home, "status", "--json").stdout)["open_escalations"] == 0


def test_runs_fits_80_columns_with_reasons_on_their_own_lines(tmp_path: Path) -> None:
    home, good, bad = a_morning(tmp_path)
    narrow = loopd(home, "runs", env={"COLUMNS": "80"}).stdout.splitlines()
    assert max(len(line) for line in narrow) <= 80
    for run_id in (good, bad):
        (line,) = [n for n in narrow if run_id in n and n.startswith(run_id)]
        reason = narrow[narrow.index(line) + 1]
        assert reason.startswith("  ") and run_id not in reason
    assert any("checks still fail" in line for line in narrow)
    wide = loopd(home, "runs", env={"COLUMNS": "160"}).stdout.splitlines()
    (line,) = [n for n in wide if bad in n]
    assert "attempts used up" in line  # wide enough: the reason stays in its column

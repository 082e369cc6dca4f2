"""`loopd status` by its plain path (cli/plainstatus.py): the same bytes as the full path on
real homes (after a night, paused, held by an escalation, with a daemon), the facts it keeps
forgotten when a file they came from changes, files the models might refuse handed to the
full path, and the plain tables equal to the models' defaults."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest

from daemon.plain import records
from daemon.service.statecap import StateUsage
from daemon.state.records import (
    OUTCOMES,
    BudgetStatus,
    DaemonStatus,
    LoopStatus,
    Phase,
    VerifierStatus,
)
from tests.helpers import both_paths, loopd, start_daemon, stop_daemon, wait_for
from tests.test_machine_output import a_morning

ROOT = Path(__file__).resolve().parent.parent
# The tests share one module fixture (a real night): under pytest-xdist --dist loadgroup they
# stay on one worker, so the night runs once.
pytestmark = pytest.mark.xdist_group("plain-status")


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """One real night (`a_morning`: two real runs) for the module: the tests read copies."""
    base = tmp_path_factory.mktemp("night")
    _, good, bad = a_morning(base)
    return base, good, bad


def a_copy(night: tuple[Path, str, str], tmp_path: Path) -> tuple[Path, str, str]:
    """The night's repository, worktrees and home copied into `tmp_path`, each path the home
    names pointing into the copy: a test changes its own home, as if it had run the night."""
    base, good, bad = night
    to = tmp_path / "night"
    shutil.copytree(base, to, symlinks=True)
    for path in (to / "home").rglob("*"):
        if path.is_file() and str(base).encode() in (data := path.read_bytes()):
            path.write_bytes(data.replace(str(base).encode(), str(to).encode()))
    return to / "home", good, bad


def defaults(spec: records.Spec) -> dict[str, Any]:
    return {field: default for field, (_, default) in spec.items()}


def test_the_plain_tables_are_the_models_defaults() -> None:
    assert defaults(records.DAEMON_STATUS) == DaemonStatus().model_dump()
    assert defaults(records.LOOP_STATUS) == LoopStatus().model_dump()
    assert defaults(records.VERIFIER_STATUS) == VerifierStatus().model_dump()
    assert defaults(records.BUDGET_STATUS) == BudgetStatus().model_dump()
    usage = {name: field.default for name, field in StateUsage.model_fields.items()}
    assert {**defaults(records.STATE_USAGE), "measured": usage["measured"]} == usage
    assert records.PHASES == get_args(Phase)
    assert records.OUTCOMES == OUTCOMES


def plain_declines(home: Path, *argv: str) -> bool:
    return loopd(home, *argv, env={"LOOPD_READ_PATH": "only"}).returncode == 3


def test_after_a_night_both_paths_print_the_same(
    night: tuple[Path, str, str], tmp_path: Path
) -> None:
    home, good, bad = a_copy(night, tmp_path)
    assert plain_declines(home, "status")  # no facts kept yet: the full path answers
    loopd(home, "status")  # reads the configuration, keeps its facts
    out, _ = both_paths(home, "status")
    assert "not loaded" in out and "escalated" in out
    data = json.loads(both_paths(home, "status", "--json")[0])
    assert data["loops"]["calc"]["last_run"] == good
    assert data["loops"]["strict"]["escalation"]["run"] == bad
    assert data["open_escalations"] == 1
    assert loopd(home, "pause", "calc").returncode == 0
    assert "paused" in both_paths(home, "status")[0]


def test_a_changed_loop_file_is_read_again_through_the_models(
    night: tuple[Path, str, str], tmp_path: Path
) -> None:
    home, _, _ = a_copy(night, tmp_path)
    loopd(home, "status")
    assert not plain_declines(home, "status")
    calc = home / "loops" / "calc.toml"
    calc.write_text(calc.read_text() + "\n# a person's edit\n")
    assert plain_declines(home, "status")
    assert "calc" in loopd(home, "status").stdout  # the full path keeps the new facts
    both_paths(home, "status")


def test_a_status_file_the_models_refuse_goes_to_the_full_path(
    night: tuple[Path, str, str], tmp_path: Path
) -> None:
    home, _, _ = a_copy(night, tmp_path)
    loopd(home, "status")
    (home / "state" / "status.toml").write_text('[loops.calc]\nphase = "dancing"\n')
    assert plain_declines(home, "status")
    shown = loopd(home, "status")  # the default: the full path names the file
    assert shown.returncode == 0 and "status.toml" in shown.stderr


def test_a_held_schedule_reads_alike(night: tuple[Path, str, str], tmp_path: Path) -> None:
    home, _, bad = a_copy(night, tmp_path)
    strict = home / "loops" / "strict.toml"
    strict.write_text('schedule = ["0 3 * * *"]\n' + strict.read_text())
    loopd(home, "status")
    out, _ = both_paths(home, "status")
    assert "its schedule is held back by open escalation" in out
    data = json.loads(both_paths(home, "status", "--json")[0])
    assert data["loops"]["strict"]["held_by"] == bad


def shown_by_both(home: Path, *argv: str) -> list[str]:
    """What the plain path, then the full path, print for `loopd ARGV` (exit 0 each)."""
    runs = [loopd(home, *argv, env={"LOOPD_READ_PATH": mode}) for mode in ("only", "models")]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    return [r.stdout for r in runs]


def test_with_the_daemon_running_both_paths_agree(
    night: tuple[Path, str, str], tmp_path: Path
) -> None:
    """The daemon writes status.toml as it goes (its heartbeat, a reload): the two paths,
    run one after the other, agree once it holds still between them."""
    home, _, _ = a_copy(night, tmp_path)
    proc = start_daemon(home)
    try:
        wait_for(lambda: "running, pid" in loopd(home, "status").stdout, what="the daemon")
        texts = wait_for(
            lambda: (t := shown_by_both(home, "status"))[0] == t[1] and t, what="one text"
        )
        assert f"pid {proc.pid}" in texts[0]

        def same_json() -> dict[str, Any] | None:
            shown = [json.loads(text) for text in shown_by_both(home, "status", "--json")]
            for data in shown:  # the heartbeat moves between the two
                data["daemon"].pop("heartbeat")
            return shown[0] if shown[0] == shown[1] else None

        assert wait_for(same_json, what="one JSON")["daemon"]["pid"] == proc.pid
    finally:
        stop_daemon(proc)


def test_the_plain_path_imports_no_model(night: tuple[Path, str, str], tmp_path: Path) -> None:
    """A `status` the plain path answers, in a fresh interpreter: no pydantic, no command
    module of the full path."""
    home, _, _ = a_copy(night, tmp_path)
    loopd(home, "status")
    code = (
        "import sys\n"
        "from daemon.cli.main import main\n"
        f"assert main(['--home', {str(home)!r}, 'status']) == 0\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('daemon', 'pydantic')))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        env={**os.environ, "LOOPD_READ_PATH": "only"},
    ).stdout.splitlines()
    loaded = set(out[-1].split())
    assert not {m for m in loaded if m.startswith("pydantic")}
    assert "daemon.cli.plainstatus" in loaded and "daemon.cli.daemon" not in loaded

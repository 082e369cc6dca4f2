"""The warning before the night: two loops landing on one target whose recent runs changed the
same files are named by `loopd check` and `loopd status` (text and --json), and a run queued
while another loop's run on the target is changing those files says so in its `[trigger]`.

Real git repositories, real `loopd once` processes, `command` agents (the landing queue
tests' home: tests/test_landing_queue.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT, loopd, wait_for
from tests.test_landing_queue import edit_line, finish, once, run_records, status, two_loops


def forced(home: Path, loop: str) -> subprocess.Popen[str]:
    """`loopd once --force LOOP` as a real process."""
    env = {k: v for k, v in os.environ.items() if k != "LOOPD_HOME"}
    argv = [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "once", "--force", loop]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, cwd=ROOT, env=env,
    )  # fmt: skip


def _unwrapped(text: str) -> str:
    return " ".join(text.split())


def test_loops_whose_recent_runs_changed_the_same_file_are_named_by_check_and_status(
    tmp_path: Path,
) -> None:
    home, repo, talk = two_loops(
        tmp_path,
        {
            "a": edit_line(2, "a was here"),
            "b": edit_line(18, "b was here"),
            "c": "pathlib.Path('other.txt').write_text('c was here\\n')",
        },
    )
    (talk / "agents-go").write_text("")
    before = loopd(home.root, "check")
    assert before.returncode == 0 and "recent runs changed the same files" not in before.stdout
    # c's check wants a line of shared.txt it never writes: it fails, but it changed a file.
    outs = finish([once(home.root, name) for name in ("a", "b", "c")])
    runs = run_records(home)
    assert runs["a"].landed and runs["b"].landed, outs
    checked = loopd(home.root, "check")
    assert checked.returncode == 0, checked.stderr
    said = _unwrapped(checked.stdout + checked.stderr)
    assert f"loops a and b both land on main of {repo}" in said
    assert "recent runs changed the same files: shared.txt" in said
    assert "loops a and c" not in said and "loops b and c" not in said
    data = status(home)
    assert data["overlaps"] == [
        {"loops": ["a", "b"], "repo": str(repo), "target": "main", "files": ["shared.txt"]}
    ]
    text = _unwrapped(loopd(home.root, "status").stdout)
    assert "warning: loops a and b both land on main" in text and "shared.txt" in text
    # The plain path and the models' path say the same.
    models = loopd(home.root, "status", "--json", env={"LOOPD_READ_PATH": "models"})
    assert json.loads(models.stdout)["overlaps"] == data["overlaps"]


def test_a_run_queued_while_another_loops_run_changes_its_files_says_so_in_its_trigger(
    tmp_path: Path,
) -> None:
    home, repo, talk = two_loops(
        tmp_path, {"a": edit_line(2, "a was here"), "b": edit_line(18, "b was here")}
    )
    go = talk / "agents-go"
    go.write_text("")
    finish([once(home.root, name) for name in ("a", "b")])  # both changed shared.txt
    first = run_records(home)
    go.unlink()
    for started in talk.glob("started-*"):
        started.unlink()
    # Both checks pass now: `--force` runs them again. a's agent waits: its run is under way.
    held = forced(home.root, "a")
    wait_for(lambda: (talk / "started-a").exists(), timeout=120, what="a's agent under way")
    running_a = next(r for r in home.state().iter_runs("a") if r.id != first["a"].id)
    queued = forced(home.root, "b")
    run_b = wait_for(
        lambda: next((r for r in home.state().iter_runs("b") if r.id != first["b"].id), None),
        timeout=120,
        what="b's new run recorded",
    )
    go.write_text("")
    finish([held, queued])
    (note,) = run_b.trigger.overlaps
    assert note.run == running_a.id and note.loop == "a" and note.step == "running"
    assert note.files == ["shared.txt"]
    shown = loopd(home.root, "show", run_b.id, "--json")
    assert json.loads(shown.stdout)["trigger"]["overlaps"][0]["run"] == running_a.id
    beside = f"queued beside run {running_a.id} of loop a (running), changing the same files"
    for read_path in ("plain", "models"):
        text = loopd(
            home.root, "show", run_b.id, env={"LOOPD_READ_PATH": read_path, "COLUMNS": "400"}
        ).stdout
        assert beside in _unwrapped(text) and "shared.txt" in text, read_path
    # The earlier runs had nothing under way beside them.
    assert first["a"].trigger.overlaps == [] and first["b"].trigger.overlaps == []

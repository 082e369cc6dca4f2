"""The landing queue under load: three succeeded runs landing at once on one target
(the same file, different files), first in, first out, and a real loopd killed with SIGKILL
at each landing step, then restarted: every run lands exactly once.

Real git repositories, real `loopd once` processes side by side or a real daemon, `command`
agents, setup and checks in bubblewrap (tests/test_landing_queue.py's home). The kill tests
stop loopd at a step with `LOOPD_TEST_LANDING_STOP` (daemon/landing/stoppoint.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.landing.stoppoint import STOP_ENV
from tests.helpers import ROOT, git, loopd, start_daemon, stop_daemon, wait_for
from tests.helpers import events as all_events
from tests.test_engines import engine
from tests.test_landing_queue import (
    edit_line,
    finish,
    landed_commits,
    once,
    person_commits,
    run_records,
    status,
    two_loops,
)

__all__ = ["engine"]  # a fixture (each engine's [engine] table), imported for pytest

# Three runs at once: the last to land waits behind two others' landings, each re-verified on
# a target the one before it moved (two runs show only one wait; more show nothing new).
NAMES = ["a", "b", "c"]


def gated(edit: str, name: str) -> str:
    """`edit`, then word that the agent edits, then the test's word to end."""
    return (
        f"{edit}\n(talk / 'editing-{name}').write_text('')\n"
        f"while not (talk / 'go-{name}').exists(): time.sleep(0.05)"
    )


def daemon_home(tmp_path: Path, edits: dict[str, str], engine: str = "") -> tuple[Any, Path, Path]:
    """The landing queue tests' home with a run slot per loop, on `engine` ("": local)."""
    home, repo, talk = two_loops(tmp_path, edits)
    config = home.root / "loopd.toml"
    slots = f"[limits]\nmax_concurrent_runs = {len(edits)}\n"
    config.write_text(config.read_text().replace("[limits]\n", slots, 1) + "\n" + engine)
    return home, repo, talk


def ended(home: Any, count: int) -> bool:
    """`count` runs have their outcome and their landing tried (landed, or why not)."""
    runs = list(home.state().iter_runs())
    return len(runs) == count and all(
        r.outcome and r.phase == "idle" and (r.landed or r.landing) for r in runs
    )


def trigger_then_release(home: Any, repo: Path, talk: Path, names: list[str]) -> None:
    """Trigger each loop of the running daemon; once every agent made its change, a person
    moves `main` and the agents end."""
    for name in names:
        done = loopd(home.root, "trigger", name)
        assert done.returncode == 0, done.stderr
    wait_for(
        lambda: all((talk / f"editing-{n}").exists() for n in names),
        timeout=300,
        what="every agent to make its change",
    )
    person_commits(repo, "NOTES.md")
    for name in names:
        (talk / f"go-{name}").write_text("")


def land_all_at_once(
    tmp_path: Path, edits: dict[str, str], engine: str
) -> tuple[Any, Path, dict[str, Any]]:
    """A daemon on `engine` runs each loop of `edits` once, all at once; their agents end
    together after a person moved `main`, so every run lands behind the others' landings."""
    home, repo, talk = daemon_home(tmp_path, edits, engine)
    (talk / "agents-go").write_text("")
    daemon = start_daemon(home.root)
    try:
        trigger_then_release(home, repo, talk, list(edits))
        wait_for(lambda: ended(home, len(edits)), timeout=600, what="every run to land or not")
    finally:
        stop_daemon(daemon)
    log = (home.root / "daemon.log").read_text()
    return home, repo, {"runs": run_records(home), "outs": log[-3000:]}


def assert_each_landed_once(home: Any, repo: Path, runs: dict[str, Any], outs: Any) -> None:
    for name, run in runs.items():
        assert run.outcome == "succeeded" and run.landed, (name, run.landing, outs)
        assert landed_commits(repo, run.id) == [run.landed_as], name
        assert git(repo, "merge-base", "--is-ancestor", run.landed_as, "main") == ""
        events = [e for e in all_events(home.root) if e.get("run") == run.id]
        assert [e["type"] for e in events].count("landed") == 1, name
    assert len({r.landed_as for r in runs.values()}) == len(runs)
    assert status(home).get("landing", []) == []


def test_runs_changing_different_lines_of_one_file_all_land(tmp_path: Path, engine: str) -> None:
    names = NAMES
    edits = {n: gated(edit_line(2 + 3 * i, f"{n} was here"), n) for i, n in enumerate(names)}
    home, repo, got = land_all_at_once(tmp_path, edits, engine)
    assert_each_landed_once(home, repo, got["runs"], got["outs"])
    text = git(repo, "show", "main:shared.txt")
    assert all(f"{n} was here" in text for n in names)
    assert git(repo, "show", "main:NOTES.md") == "the person's own work"


def test_runs_changing_different_files_all_land(tmp_path: Path, engine: str) -> None:
    names = NAMES
    # Each agent writes a file of its own and the line its check wants (lines apart).
    edits = {
        n: gated(
            f"pathlib.Path('{n}.txt').write_text('{n} was here\\n')\n"
            + edit_line(2 + 3 * i, f"{n} was here"),
            n,
        )
        for i, n in enumerate(names)
    }
    home, repo, got = land_all_at_once(tmp_path, edits, engine)
    assert_each_landed_once(home, repo, got["runs"], got["outs"])
    for n in names:
        assert git(repo, "show", f"main:{n}.txt") == f"{n} was here"


def test_runs_changing_the_same_lines_land_one_and_escalate_the_rest(
    tmp_path: Path, engine: str
) -> None:
    """The same line of the same file: the first to land lands, every other conflicts with
    it and is escalated naming it; nothing lands twice, nothing half."""
    names = NAMES
    edits = {n: gated(edit_line(5, f"{n} says five") + "\n" + edit_line(17, f"{n} "), n)
             for n in names}  # fmt: skip
    home, repo, got = land_all_at_once(tmp_path, edits, engine)
    runs = got["runs"]
    landed = [r for r in runs.values() if r.landed]
    assert len(landed) == 1, got["outs"]
    (first,) = landed
    assert landed_commits(repo, first.id) == [first.landed_as]
    for run in runs.values():
        if run is first:
            continue
        assert run.outcome == "succeeded" and run.cause == "landing-conflict", run.landing
        assert f"run {first.id}" in run.landing and "shared.txt" in run.landing
        assert landed_commits(repo, run.id) == []
        assert home.state().escalation_path(run.id).exists()
    assert status(home).get("landing", []) == []


def once_env(home: Path, loop: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """`loopd once LOOP` as a real process with `env` added to its environment."""
    full = {k: v for k, v in os.environ.items() if k != "LOOPD_HOME"} | env
    argv = [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "once", loop]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, cwd=ROOT, env=full,
    )  # fmt: skip


def test_runs_land_in_the_order_they_entered_the_queue(tmp_path: Path) -> None:
    """c enters the queue before b, but stops (its process alive) before it asks for its
    turn; b asks at once. When a's landing ends the lock is free and b alone waits for it:
    b still lets c, which entered first, land before it."""
    names = ["a", "b", "c"]
    edits = {n: gated(edit_line(2 + 5 * i, f"{n} was here"), n) for i, n in enumerate(names)}
    home, repo, talk = two_loops(tmp_path, edits)
    (talk / "agents-go").write_text("")
    (talk / "hold").write_text("")  # a landing's setup waits for `landings-go`
    procs = [once(home.root, "a"), once(home.root, "b")]
    procs.append(once_env(home.root, "c", {STOP_ENV: f"queued:{talk}"}))
    wait_for(
        lambda: all((talk / f"editing-{n}").exists() for n in names),
        timeout=240,
        what="every agent to make its change",
    )
    person_commits(repo, "NOTES.md")
    (talk / "go-a").write_text("")
    wait_for(lambda: list(talk.glob("landing-*")), timeout=120, what="a's landing under way")
    ids = {r.loop: r.id for r in home.state().iter_runs()}

    def queued(expected: list[str]) -> bool:
        queues = status(home).get("landing", [])
        return bool(queues) and queues[0]["queued"] == expected

    (talk / "go-c").write_text("")
    wait_for(lambda: (talk / f"at-queued-{ids['c']}").exists(), timeout=120, what="c queued")
    (talk / "go-b").write_text("")
    # Each look is a `loopd status` process: a second apart, not back to back.
    wait_for(lambda: queued([ids["c"], ids["b"]]), 120, 1.0, what="b queued behind c")
    (talk / "landings-go").write_text("")
    wait_for(lambda: home.state().load_run(ids["a"]).landed, timeout=120, what="a landed")
    (talk / "go-queued").write_text("")  # c asks for its turn now
    outs = finish(procs)
    runs = run_records(home)
    assert_each_landed_once(home, repo, runs, outs)
    order = [e["run"] for e in all_events(home.root) if e["type"] == "landed"]
    assert order == [ids["a"], ids["c"], ids["b"]]
    starts = [e["run"] for e in all_events(home.root) if e["type"] == "landing_merge"]
    assert starts == order  # each began its landing only after the one before it ended


@pytest.mark.parametrize("step", ["queued", "landing", "moving", "moved"])
def test_a_daemon_killed_at_each_landing_step_lands_every_run_exactly_once(
    tmp_path: Path, step: str
) -> None:
    names = ["a", "b"]
    edits = {n: gated(edit_line(2 + 9 * i, f"{n} was here"), n) for i, n in enumerate(names)}
    home, repo, talk = daemon_home(tmp_path, edits)
    (talk / "agents-go").write_text("")
    daemon = start_daemon(home.root, env={STOP_ENV: f"{step}:{talk}"})
    try:
        trigger_then_release(home, repo, talk, names)
        stopped = wait_for(
            lambda: list(talk.glob(f"at-{step}-*")), timeout=240, what=f"a landing at {step}"
        )

        def both_queued() -> dict[str, Any] | None:
            queues = status(home).get("landing", [])
            ids = [queues[0]["landing"], *queues[0]["queued"]] if queues else []
            return queues[0] if len([i for i in ids if i]) == 2 else None

        # Each look is a `loopd status` process: a second apart, not back to back.
        queue = wait_for(both_queued, 240, 1.0, what="both runs in the queue")
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(30)
        at = stopped[0].name.removeprefix(f"at-{step}-")
        if step != "queued":
            assert queue["landing"] == at and queue["step"] == step.replace("moved", "moving")
        main_at_kill = git(repo, "rev-parse", "main")
        moved = git(repo, "show", "main:shared.txt")
        assert ("was here" in moved) == (step == "moved")  # only `moved` moved the target
        assert status(home)["landing"][0] == queue  # kept across the kill
        (talk / "busy").unlink(missing_ok=True)  # a killed landing's setup held it
        daemon = start_daemon(home.root)
        wait_for(
            lambda: len([r for r in home.state().iter_runs() if r.landed]) == 2,
            timeout=300,
            what="both runs to land after the restart",
        )
    finally:
        stop_daemon(daemon)
    runs = run_records(home)
    assert_each_landed_once(home, repo, runs, "")
    if step == "moved":  # the move the kill interrupted was recorded, not redone
        assert runs[loop_of_run(runs, at)].landed_as == main_at_kill
    text = git(repo, "show", "main:shared.txt")
    assert "a was here" in text and "b was here" in text


def loop_of_run(runs: dict[str, Any], run_id: str) -> str:
    return next(name for name, run in runs.items() if run.id == run_id)

"""The landing queue: one landing at a time per target, re-verified on a moved target,
conflicts escalated with both sides, a kill -9 mid-landing landed exactly once.

Real git repositories, two loops on one repository run by real `loopd once` processes side
by side (or a real daemon killed with SIGKILL), `command` agents, setup and checks in
bubblewrap. A gate file lets the test hold an agent or a landing's setup at a known step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.home import Home
from daemon.runparts.services import RunServices
from daemon.runs.finish import complete_finish
from daemon.state.landingqueue import (
    LandingQueue,
    QueuedLanding,
    load_landing_queue,
    update_landing_queue,
)
from tests.helpers import ROOT, git, loopd, make_home, make_repo, start_daemon, wait_for
from tests.helpers import events as all_events

# The agent writes its change, says so, and waits for the test's word before it ends.
AGENT = (
    "import pathlib, sys, time\n"
    "talk = pathlib.Path({talk!r})\n"
    "{edit}\n"
    "(talk / 'started-{name}').write_text('')\n"
    "while not (talk / 'agents-go').exists(): time.sleep(0.05)\n"
)
# The loop's setup: nothing in the run's own tree; in a landing's fresh tree (`RUN.land`)
# it marks that the landing is busy (failing if another landing of the target is), and with
# `hold` it waits for the test's word.
PROBE = (
    "import os, pathlib, sys, time\n"
    "talk = pathlib.Path(sys.argv[1])\n"
    "if not os.getcwd().endswith('.land'): sys.exit(0)\n"
    "busy = talk / 'busy'\n"
    "fd = os.open(busy, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # two landings at once: fails\n"
    "os.write(fd, str(os.getpid()).encode()); os.close(fd)\n"
    "name = pathlib.Path(os.getcwd()).name\n"
    "(talk / ('landing-' + name)).write_text('')\n"
    "with open(talk / 'rounds', 'a') as rounds: rounds.write('x')\n"
    "if (talk / 'stepwise').exists():  # one landing try at a time, each released by the test\n"
    "    while not (talk / 'release').exists(): time.sleep(0.05)\n"
    "    (talk / 'release').unlink()\n"
    "while (talk / 'hold').exists() and not (talk / 'landings-go').exists(): time.sleep(0.05)\n"
    "if busy.read_text() == str(os.getpid()): busy.unlink()\n"
)
BASE = {
    "probe.py": PROBE,
    "shared.txt": "".join(f"line {n}\n" for n in range(1, 21)),
    # Loop NAME's check: a line of shared.txt is NAME's (it fails on the base: runs start).
    "check.py": (
        "import pathlib, sys\n"
        "lines = pathlib.Path('shared.txt').read_text().splitlines()\n"
        "assert any(line.startswith(sys.argv[1] + ' ') for line in lines), lines\n"
    ),
}


def two_loops(tmp_path: Path, edits: dict[str, str]) -> tuple[Home, Path, Path]:
    """A home with a loop per `edits` entry (name -> the agent's edit), all landing by
    merge on the `main` of one repository."""
    repo = make_repo(tmp_path / "repo", BASE)
    talk = tmp_path / "talk"
    talk.mkdir()
    loops = {}
    for name in edits:
        settings: dict[str, Any] = {
            "repo": str(repo),
            "task": f"Change shared.txt ({name}).",
            "agent": name,
            "setup": [f"python3 probe.py {talk}"],
            "done_when": [f"python3 check.py {name}"],
            "attempt_timeout": "120s",
            "stall_after": "60s",
            "max_nudges": 0,
            "max_attempts": 1,
            "land": "merge",
        }
        loops[name] = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    agents = ""
    for name, edit in edits.items():
        argv = [sys.executable, "-c", AGENT.format(talk=str(talk), edit=edit, name=name)]
        agents += f'[agents.{name}]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'

    config = agents + f'\n[sandbox]\nwritable = ["{talk}"]\n'
    home = Home(make_home(tmp_path / "home", config, loops))
    assert not home.load().errors, home.load().errors
    return home, repo, talk


def edit_line(n: int, text: str) -> str:
    return (
        "p = pathlib.Path('shared.txt'); lines = p.read_text().splitlines(True)\n"
        f"lines[{n - 1}] = {text!r} + '\\n'; p.write_text(''.join(lines))"
    )


def once(home: Path, loop: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("LOOPD_HOME", None)
    return subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "once", loop],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=env,
    )


def person_commits(repo: Path, name: str) -> str:
    """The person moves `main` (a file of their own): every landing then merges."""
    (repo / name).write_text("the person's own work\n")
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"person: {name}")
    return git(repo, "rev-parse", "main")


def run_records(home: Home) -> dict[str, Any]:
    store = home.state()
    return {run.loop: run for run in store.iter_runs()}


def status(home: Home) -> dict[str, Any]:
    done = loopd(home.root, "status", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def landed_commits(repo: Path, run_id: str) -> list[str]:
    """The commits on main whose message names the run."""
    out = git(repo, "log", "--format=%H %s", "main")
    return [line.split()[0] for line in out.splitlines() if f"(run {run_id}" in line]


def start_both(home: Home, repo: Path, talk: Path) -> list[subprocess.Popen[str]]:
    procs = [once(home.root, name) for name in ("a", "b")]
    wait_for(
        lambda: (talk / "started-a").exists() and (talk / "started-b").exists(),
        timeout=120,
        what="both agents to make their change",
    )
    person_commits(repo, "NOTES.md")  # both runs' bases are behind main now
    return procs


def finish(procs: list[subprocess.Popen[str]]) -> list[str]:
    outs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        outs.append(out)
    return outs


def test_two_runs_changing_different_lines_land_one_at_a_time_each_verified(
    tmp_path: Path,
) -> None:
    home, repo, talk = two_loops(
        tmp_path, {"a": edit_line(2, "a was here"), "b": edit_line(18, "b was here")}
    )
    (talk / "hold").write_text("")
    procs = start_both(home, repo, talk)
    (talk / "agents-go").write_text("")
    # One landing holds the target (its setup waits); the other run waits in the queue.
    wait_for(lambda: list(talk.glob("landing-*")), timeout=120, what="a landing's setup")

    def queued() -> dict[str, Any] | None:
        queues = status(home).get("landing", [])
        if queues and queues[0]["landing"] and len(queues[0]["queued"]) == 1:
            return queues[0]
        return None

    queue = wait_for(queued, timeout=120, what="the second run queued behind the first")
    assert queue["target"] == "main" and queue["step"] == "landing"
    assert len(list(talk.glob("landing-*"))) == 1  # the queued one has not begun
    said = " ".join(loopd(home.root, "status").stdout.split())  # unwrapped
    assert f"landing {queue['landing']} (landing); queued {queue['queued'][0]}" in said
    report = loopd(home.root, "report").stdout
    assert "Landing queue" in report and queue["queued"][0] in report
    runs = run_records(home)
    waiting = next(r for r in runs.values() if r.id == queue["queued"][0])
    assert waiting.outcome == "succeeded" and not waiting.landed
    (talk / "landings-go").write_text("")
    outs = finish(procs)
    runs = run_records(home)
    for name, run in runs.items():
        assert run.outcome == "succeeded" and run.landed, (name, run.landing, outs)
        assert landed_commits(repo, run.id) == [run.landed_as]
        # The commit that landed is the one whose tree passed setup and the checks.
        events = [e for e in all_events(home.root) if e.get("run") == run.id]
        merged = [e["tree"] for e in events if e["type"] == "landing_merge"]
        checks = [e["passed"] for e in events if e["type"] == "landing_checks"]
        assert merged[-1] == git(repo, "rev-parse", f"{run.landed_as}^{{tree}}")
        assert checks[-1] is True
    text = git(repo, "show", "main:shared.txt")
    assert "a was here" in text and "b was here" in text
    assert git(repo, "show", "main:NOTES.md") == "the person's own work"
    second = max(runs.values(), key=lambda r: r.finished or r.started)
    assert runs["a"].landed_as != runs["b"].landed_as
    assert git(repo, "merge-base", "--is-ancestor", runs["a"].landed_as, "main") == ""
    assert second.landed_as == git(repo, "rev-parse", "main")
    assert status(home).get("landing", []) == []  # the queue is empty again


def test_a_textual_conflict_escalates_naming_both_sides_and_how_to_finish(
    tmp_path: Path,
) -> None:
    home, repo, talk = two_loops(
        tmp_path, {"a": edit_line(5, "a says five"), "b": edit_line(5, "b says 5")}
    )
    procs = start_both(home, repo, talk)
    (talk / "agents-go").write_text("")
    outs = finish(procs)
    runs = run_records(home)
    landed = [r for r in runs.values() if r.landed]
    blocked = [r for r in runs.values() if not r.landed]
    assert len(landed) == 1 and len(blocked) == 1, outs
    first, second = landed[0], blocked[0]
    assert second.outcome == "succeeded" and second.cause == "landing-conflict"
    why = second.landing
    assert "shared.txt (lines " in why
    assert second.id in why and f"run {first.id}" in why  # both runs named
    assert first.landed_as[:12] in why  # the commit on the target side
    assert f"loopd land {second.id}" in why and "--retry" in why
    escalation = home.state().escalation_path(second.id).read_text()
    assert first.id in escalation and "shared.txt" in escalation
    assert len(landed_commits(repo, first.id)) == 1 and landed_commits(repo, second.id) == []


def test_a_daemon_killed_mid_landing_lands_the_run_exactly_once_after_restart(
    tmp_path: Path,
) -> None:
    home, repo, talk = two_loops(tmp_path, {"a": edit_line(3, "a fixed three")})
    (talk / "hold").write_text("")
    (talk / "agents-go").write_text("")
    daemon = start_daemon(home.root)
    try:
        done = loopd(home.root, "trigger", "a")
        assert done.returncode == 0, done.stderr
        wait_for(lambda: (talk / "started-a").exists(), timeout=120, what="the agent's change")
        person_commits(repo, "NOTES.md")
        wait_for(lambda: list(talk.glob("landing-*")), timeout=120, what="the landing's setup")
        queues = status(home)["landing"]
        assert queues and queues[0]["step"] == "landing"
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(30)
        entry = status(home)["landing"][0]
        assert entry["step"] == "landing" and entry["queued"] == []  # kept across the kill
        # The restarted daemon finishes the run before it serves (recovery): no more waits.
        (talk / "hold").unlink()
        (talk / "busy").unlink(missing_ok=True)  # the killed landing's setup held it
        daemon = start_daemon(home.root)
        run = wait_for(
            lambda: next((r for r in home.state().iter_runs() if r.landed), None),
            timeout=180,
            what="the run to land after the restart",
        )
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
    assert landed_commits(repo, run.id) == [run.landed_as]
    assert run.landed_as == git(repo, "rev-parse", "main")
    assert "a fixed three" in git(repo, "show", "main:shared.txt")
    assert status(home).get("landing", []) == []
    merges = [e for e in all_events(home.root) if e["type"] == "landing_merge"]
    assert len(merges) == 2  # begun, killed, redone from the recorded step: landed once


def test_a_landing_killed_after_the_target_moved_is_recorded_not_redone(tmp_path: Path) -> None:
    """The state a kill -9 right after the target moved leaves: the queue says `moving` to
    a commit the target holds, the run's record says not landed, `land` not done. Finishing
    it again (as a restarted daemon's recovery does) records the landing, merges nothing."""
    home, repo, talk = two_loops(tmp_path, {"a": edit_line(3, "a fixed three")})
    (talk / "agents-go").write_text("")
    before = git(repo, "rev-parse", "main")
    done = loopd(home.root, "once", "a", timeout=300)
    store = home.state()
    run = next(store.iter_runs())
    assert run.landed, (done.stdout, done.stderr, run.landing)
    new = run.landed_as
    assert git(repo, "rev-parse", "main") == new
    run.landed, run.landed_as, run.landed_how, run.phase = False, "", "", "landing"
    run.finish_done = []
    store.save_run(run)
    stamp = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)

    def killed_while_moving(queue: LandingQueue) -> None:
        entry = QueuedLanding(run_id=run.id, loop="a", queued_at=stamp, step="moving", tries=1)
        entry.old, entry.new = before, new
        queue.runs.append(entry)

    update_landing_queue(store, str(repo), "main", killed_while_moving)
    loaded = home.load()
    services = RunServices(home=home, config=loaded.daemon, store=store)
    complete_finish(services, store.load_run(run.id), config=loaded.loops["a"].config)
    again = store.load_run(run.id)
    assert again.landed and again.landed_how == "merge" and again.landed_as == new
    assert git(repo, "rev-parse", "main") == new  # nothing merged again
    assert landed_commits(repo, run.id) == [new]
    assert load_landing_queue(store, str(repo), "main").runs == []


def test_a_target_moving_under_every_try_is_escalated_after_three(tmp_path: Path) -> None:
    home, repo, talk = two_loops(tmp_path, {"a": edit_line(3, "a fixed three")})
    (talk / "stepwise").write_text("")
    (talk / "agents-go").write_text("")
    proc = once(home.root, "a")
    wait_for(lambda: (talk / "started-a").exists(), timeout=120, what="the agent's change")
    person_commits(repo, "NOTES.md")
    rounds = talk / "rounds"
    for n in range(1, 4):
        wait_for(
            lambda n=n: rounds.exists() and len(rounds.read_text()) == n,
            timeout=120,
            what=f"landing try {n}",
        )
        moved = person_commits(repo, f"MORE-{n}.md")  # a push under the try's checks
        (talk / "release").write_text("")
    out, _ = proc.communicate(timeout=300)
    (run,) = list(home.state().iter_runs())
    assert run.outcome == "succeeded" and not run.landed, out
    assert run.cause == "landing-moving" and "moved under each of 3 landings" in run.landing
    assert home.state().escalation_path(run.id).exists()
    assert git(repo, "rev-parse", "main") == moved and landed_commits(repo, run.id) == []
    assert status(home).get("landing", []) == []

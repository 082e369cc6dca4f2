"""`loopd run` as a real process: triggers, the lock, schedules, kill -9 and restart, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from datetime import datetime, timedelta
from pathlib import Path

from daemon.clock import utc_now
from tests.helpers import (
    ROOT,
    daemon_log,
    events,
    loopd,
    make_home,
    make_repo,
    processes_with,
    runs,
    start_daemon,
    stop_daemon,
    talk,
    unique_token,
    wait_for,
)

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}


def agent(script: str) -> str:
    return (
        '[agents.fixer]\nadapter = "command"\n'
        f"command = {json.dumps([sys.executable, '-c', script])}\n"
    )


FIXER = (
    "import pathlib; p = pathlib.Path('calc.py'); "
    "p.write_text(p.read_text().replace('a - b', 'a + b'))"
)


def loop_text(repo: Path, **extra: object) -> str:
    lines = [
        f'repo = "{repo}"',
        'task = "Make check.py pass."',
        'agent = "fixer"',
        'done_when = ["python3 check.py"]',
        'attempt_timeout = "120s"',
        'stall_after = "60s"',
    ]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def seed_cursor(home: Path, loop: str, handled_until: datetime) -> None:
    """The timer's cursor as a stopped daemon would have left it."""
    import tomli_w

    path = home / "state" / "schedule.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps({"loops": {loop: {"handled_until": handled_until}}}))


def test_trigger_wait_runs_through_the_daemon_and_a_second_daemon_is_refused(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent(FIXER), {"calc": loop_text(repo)})
    proc = loopd(home, "trigger", "calc", "--wait")
    assert proc.returncode == 2 and "no daemon runs" in proc.stderr
    daemon = start_daemon(home)
    daemons.append(daemon)
    second = loopd(home, "run", timeout=30)
    assert second.returncode == 2
    assert f"pid {daemon.pid}" in second.stderr
    proc = loopd(home, "trigger", "calc", "--reason", "from a test", "--wait", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr + daemon_log(home)
    run_id = proc.stdout.splitlines()[0]
    (run,) = runs(home)
    assert run["id"] == run_id and run["outcome"] == "succeeded"
    assert run["trigger"]["kind"] == "manual" and run["trigger"]["reason"] == "from a test"
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert status["daemon"]["running"] and status["daemon"]["pid"] == daemon.pid
    assert status["loops"]["calc"]["last_outcome"] == "succeeded"
    assert stop_daemon(daemon) == 0
    types = [e["type"] for e in events(home)]
    assert types[0] == "daemon_started" and types[-1] == "daemon_stopped"


def test_a_schedule_runs_and_kill_9_mid_attempt_is_interrupted_and_retried_once(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    shared, sandbox = talk(tmp_path)
    marker = shared / "agent-started"
    token = unique_token("kill9", tmp_path)  # in the command lines of the agent and its grandchild
    # The first agent hangs after leaving a grandchild behind; the retry fixes the code.
    script = (
        f"# {token}\n"
        "import os, pathlib, subprocess, sys, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        f"    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)',"
        f" {token!r}], start_new_session=True)\n"
        "    marker.write_text('yes')\n"
        "    time.sleep(600)\n"
        "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    )
    # A daily fire a minute ago, missed by a cursor seeded just before it: the daemon catches
    # it up at start, without waiting for a real minute boundary.
    fire = utc_now().replace(second=0, microsecond=0) - timedelta(minutes=1)
    home = make_home(
        tmp_path / "home",
        agent(script) + sandbox,
        {"calc": loop_text(repo, schedule=[f"{fire.minute} {fire.hour} * * *"], catch_up="1h")},
    )
    seed_cursor(home, "calc", fire - timedelta(minutes=1))
    daemon = start_daemon(home)
    daemons.append(daemon)
    wait_for(marker.exists, timeout=30, what="the scheduled run's agent")
    assert len(processes_with(token)) >= 2
    (run,) = runs(home)
    assert run["trigger"]["kind"] == "catch-up" and run["phase"] == "running"
    assert f"{fire.hour:02d}:{fire.minute:02d}" in run["trigger"]["reason"]
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.wait()
    restarted = start_daemon(home)
    daemons.append(restarted)
    wait_for(
        lambda: not processes_with(token),
        timeout=20,
        what="the dead daemon's agent processes to be gone",
    )

    def two_finished() -> list[dict]:
        found = runs(home)
        return found if len(found) >= 2 and all(r.get("outcome") for r in found) else []

    first, retry = wait_for(two_finished, timeout=60, what="the interrupted run and its retry")[:2]
    assert first["outcome"] == "interrupted"
    assert retry["trigger"]["kind"] == "retry" and retry["trigger"]["retry_of"] == first["id"]
    assert retry["outcome"] == "succeeded"
    assert stop_daemon(restarted) == 0
    # No second retry, and every state file parses.
    assert sum(r["trigger"]["kind"] == "retry" for r in runs(home)) == 1
    for path in (home / "state").rglob("*.toml"):
        tomllib.loads(path.read_text())
    for line in (home / "state" / "events.jsonl").read_text().splitlines():
        json.loads(line)


def test_sigterm_gives_the_attempt_its_grace_then_the_run_is_interrupted(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    shared, sandbox = talk(tmp_path)
    started = shared / "started"
    script = (
        f"import pathlib, time; pathlib.Path({str(started)!r}).write_text('x'); time.sleep(600)"
    )
    home = make_home(
        tmp_path / "home",
        agent(script)
        + sandbox
        + f'[limits]\nshutdown_grace = "1s"\nworktrees = "{tmp_path / "wt"}"\n',
        {"calc": loop_text(repo)},
    )
    daemon = start_daemon(home)
    daemons.append(daemon)
    assert loopd(home, "trigger", "calc").returncode == 0
    wait_for(started.exists, timeout=30, what="the agent to start")
    assert stop_daemon(daemon, timeout=30) == 0
    (run,) = runs(home)
    assert run["outcome"] == "interrupted"
    assert not Path(run["worktree"]).exists()
    # The next start retries it, as it would after a crash.
    (waiting,) = [json.loads(p.read_text()) for p in (home / "state" / "inbox").glob("*.json")]
    assert waiting["kind"] == "retry" and waiting["retry_of"] == run["id"]


def test_broken_loop_files_are_reported_and_the_others_keep_running(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    plain = tmp_path / "plain"
    plain.mkdir()
    good = loop_text(repo)
    home = make_home(
        tmp_path / "home",
        agent(FIXER),
        {
            "good": good,
            "syntax": good + "max_attempts = = 3\n",
            "typo": good + "max_attempt = 3\n",
            "cron": loop_text(repo, schedule=["61 * * * *"]),
            "norepo": loop_text(tmp_path / "missing"),
            "notgit": loop_text(plain),
        },
    )
    check = loopd(home, "check")
    assert check.returncode == 2
    out = check.stdout
    assert "syntax.toml" in out and "TOML syntax error" in out
    assert "typo.toml: max_attempt: unknown key" in out
    assert "cron.toml: schedule" in out and "'61' is outside 0-59" in out
    assert "norepo.toml: repo" in out and "does not exist" in out
    assert "notgit.toml: repo" in out and "is not a git repository" in out
    assert "good.toml" not in out
    assert "1 valid loop(s): good" in out
    daemon = start_daemon(home)
    daemons.append(daemon)
    proc = loopd(home, "trigger", "good", "--wait", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert status["loops"]["typo"]["enabled"] is False
    assert "unknown key" in status["loops"]["typo"]["error"]
    assert stop_daemon(daemon) == 0


def first_run_at_a_gate(tmp_path: Path, daemons: list) -> tuple[Path, Path, subprocess.Popen[str]]:
    """A daemon whose first run (reason "first") waits at a gate; home, gate, daemon."""
    repo = make_repo(tmp_path / "repo", BUGGY)
    shared, sandbox = talk(tmp_path)
    gate = shared / "gate"
    script = (
        "import pathlib, time\n"
        f"gate = pathlib.Path({str(gate)!r})\n"
        "while not gate.exists(): time.sleep(0.05)\n"
        "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    )
    home = make_home(tmp_path / "home", agent(script) + sandbox, {"calc": loop_text(repo)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    assert loopd(home, "trigger", "calc", "--reason", "first").returncode == 0
    wait_for(lambda: runs(home), timeout=30, what="the first run")
    return home, gate, daemon


def test_triggers_during_a_run_coalesce_into_one_pending_run(tmp_path: Path, daemons: list) -> None:
    home, gate, daemon = first_run_at_a_gate(tmp_path, daemons)
    for i in range(10):
        assert loopd(home, "trigger", "calc", "--reason", f"burst {i}").returncode == 0
    wait_for(
        lambda: sum(e["type"] in ("trigger", "trigger_merged") for e in events(home)) >= 11,
        timeout=30,
        what="all triggers taken",
    )
    gate.write_text("go")
    done = wait_for(
        lambda: (
            [r for r in runs(home) if r.get("outcome")]
            if len(runs(home)) == 2 and all(r.get("outcome") for r in runs(home))
            else []
        ),
        timeout=60,
        what="two runs",
    )
    first, merged = done
    assert first["trigger"]["reason"] == "first"
    reasons = [merged["trigger"]["reason"]] + [m["reason"] for m in merged["trigger"]["merged"]]
    assert reasons == [f"burst {i}" for i in range(10)]
    assert sum(e["type"] == "trigger_merged" for e in events(home)) == 9
    assert stop_daemon(daemon) == 0


def test_trigger_wait_follows_a_trigger_merged_into_a_pending_run(
    tmp_path: Path, daemons: list
) -> None:
    home, gate, daemon = first_run_at_a_gate(tmp_path, daemons)
    assert loopd(home, "trigger", "calc", "--reason", "second").returncode == 0
    queue = home / "state" / "queue.toml"
    [queued] = wait_for(
        lambda: queue.exists() and tomllib.loads(queue.read_text()).get("pending"),
        what="the second trigger queued",
    )
    command = [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "trigger", "calc"]
    waiter = subprocess.Popen(
        [*command, "--reason", "third", "--wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "LOOPD_HOME"},
    )
    try:
        wait_for(
            lambda: any(e["type"] == "trigger_merged" for e in events(home)),
            what="the third trigger merged into the queued run",
        )
        gate.write_text("go")
        out, err = waiter.communicate(timeout=120)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
    assert waiter.returncode == 0, out + err + daemon_log(home)
    # The run it waited for is the pending one, older than the trigger merged into it.
    assert out.splitlines()[0] == queued["id"]
    assert "succeeded" in out
    merged_run = next(r for r in runs(home) if r["id"] == queued["id"])
    assert merged_run["trigger"]["reason"] == "second"
    assert [m["reason"] for m in merged_run["trigger"]["merged"]] == ["third"]
    assert stop_daemon(daemon) == 0


def test_pause_records_triggers_and_resume_runs_them(tmp_path: Path, daemons: list) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent(FIXER), {"calc": loop_text(repo)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    assert loopd(home, "pause", "calc").returncode == 0
    assert loopd(home, "trigger", "calc", "--reason", "while paused").returncode == 0
    wait_for(lambda: any(e["type"] == "trigger" for e in events(home)), what="the trigger taken")
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert status["loops"]["calc"]["paused"] is True
    assert runs(home) == []
    assert loopd(home, "resume", "calc").returncode == 0
    (run,) = wait_for(
        lambda: [r for r in runs(home) if r.get("outcome")], timeout=60, what="the run"
    )
    assert run["trigger"]["reason"] == "while paused" and run["outcome"] == "succeeded"
    types = [e["type"] for e in events(home)]
    assert "loop_paused" in types and "loop_resumed" in types
    assert stop_daemon(daemon) == 0


def test_cancel_stops_a_running_run(tmp_path: Path, daemons: list) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(
        tmp_path / "home", agent("import time; time.sleep(600)"), {"calc": loop_text(repo)}
    )
    daemon = start_daemon(home)
    daemons.append(daemon)
    assert loopd(home, "trigger", "calc").returncode == 0
    (run,) = wait_for(
        lambda: [r for r in runs(home) if r.get("phase") == "running"], what="a running run"
    )
    proc = loopd(home, "cancel", run["id"])
    assert proc.returncode == 0, proc.stderr
    (run,) = wait_for(lambda: [r for r in runs(home) if r.get("outcome")], what="the outcome")
    assert run["outcome"] == "cancelled"
    assert loopd(home, "cancel", "20990101T000000Z-calc-0000").returncode == 2
    assert stop_daemon(daemon) == 0


def test_sighup_with_a_broken_config_keeps_the_running_one(tmp_path: Path, daemons: list) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent(FIXER), {"calc": loop_text(repo)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    config = home / "loopd.toml"
    config.write_text(config.read_text() + "\n[limits\n")
    daemon.send_signal(signal.SIGHUP)
    wait_for(lambda: any(e["type"] == "reload_failed" for e in events(home)), what="reload_failed")
    assert daemon.poll() is None
    proc = loopd(home, "trigger", "calc", "--wait", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert stop_daemon(daemon) == 0


def test_a_broken_loopd_toml_stops_the_daemon_with_exit_2(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", "[verifier]\nbase_url = 3\n")
    proc = loopd(home, "run", timeout=30)
    assert proc.returncode == 2
    assert "loopd.toml: verifier.base_url" in proc.stderr


def test_cancel_of_a_queued_run_ends_it_without_starting(tmp_path: Path, daemons: list) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent(FIXER), {"calc": loop_text(repo)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    assert loopd(home, "pause", "calc").returncode == 0
    assert loopd(home, "trigger", "calc").returncode == 0
    queue = home / "state" / "queue.toml"
    pending = wait_for(
        lambda: queue.exists() and tomllib.loads(queue.read_text()).get("pending"),
        what="the queued run",
    )
    run_id = pending[0]["id"]
    proc = loopd(home, "cancel", run_id)
    assert proc.returncode == 0, proc.stderr
    # The record is written when the run is made and again when it ends: wait for the end.
    (run,) = wait_for(
        lambda: [r for r in runs(home) if r.get("outcome")], what="the cancelled run's record"
    )
    assert run["id"] == run_id and run["outcome"] == "cancelled" and run["attempts"] == []
    assert loopd(home, "resume", "calc").returncode == 0
    assert stop_daemon(daemon) == 0
    assert len(runs(home)) == 1


def test_once_refuses_while_the_daemon_runs_the_loop(tmp_path: Path, daemons: list) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent(FIXER), {"calc": loop_text(repo)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 2
    assert f"pid {daemon.pid}" in proc.stderr and "loopd trigger calc --wait" in proc.stderr
    assert runs(home) == []
    assert stop_daemon(daemon) == 0


def test_status_watch_redraws_as_state_changes(tmp_path: Path, daemons: list) -> None:

    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent(FIXER), {"calc": loop_text(repo)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    out = tmp_path / "watch.out"
    with out.open("w") as fh:
        watch = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "status", "--watch"],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200"},
        )
    try:
        wait_for(lambda: "idle" in out.read_text(), what="the first frame")
        assert "succeeded" not in out.read_text()
        assert loopd(home, "trigger", "calc", "--wait", timeout=90).returncode == 0
        wait_for(lambda: "succeeded" in out.read_text(), what="a frame with the outcome")
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=30) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
    assert out.read_text().count("running, pid") >= 2  # more than one frame
    assert stop_daemon(daemon) == 0


def test_sighup_with_a_duration_too_large_to_load_keeps_the_daemon_alive(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent(FIXER), {"calc": loop_text(repo)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    huge = loop_text(repo).replace('attempt_timeout = "120s"', 'attempt_timeout = "99999999999d"')
    (home / "loops" / "huge.toml").write_text(huge)
    daemon.send_signal(signal.SIGHUP)

    def answered() -> list[dict]:
        # Either the whole reload is refused, or the loop file alone is reported broken.
        return [
            e
            for e in events(home)
            if e["type"] == "reload_failed"
            or (e["type"] == "config_error" and e.get("file", "").endswith("huge.toml"))
        ]

    wait_for(answered, what="the reload's answer to huge.toml")
    assert daemon.poll() is None, daemon_log(home)
    (home / "loops" / "huge.toml").unlink()  # for the command line's own loading
    proc = loopd(home, "trigger", "calc", "--wait", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr + daemon_log(home)
    assert stop_daemon(daemon) == 0

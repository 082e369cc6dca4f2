"""SIGTERM while an agent works: an agent that ends by itself within the shutdown grace has
ended its attempt, and its checks decide the run; only an agent that had to be killed is
`interrupted` (tests/test_daemon.py has that one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from daemon.runparts.stop import RunStopped, StopToken
from tests.helpers import (
    ROOT,
    daemon_log,
    events,
    loopd,
    make_home,
    make_repo,
    runs,
    start_daemon,
    stop_daemon,
    talk,
    wait_for,
)

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}


def released_fixer(shared: Path) -> str:
    """An agent that says it started, waits for the test's word (given once loopd is stopping),
    works two seconds more, then fixes calc.py and ends."""
    return (
        "import pathlib, time\n"
        f"shared = pathlib.Path({str(shared)!r})\n"
        "(shared / 'started').write_text('x')\n"
        "while not (shared / 'release').exists():\n"
        "    time.sleep(0.05)\n"
        "time.sleep(2)\n"
        "p = pathlib.Path('calc.py')\n"
        "p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    )


def home_with(tmp_path: Path, grace: str, check: str) -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "repo", BUGGY)
    shared, sandbox = talk(tmp_path)
    profile = (
        '[agents.fixer]\nadapter = "command"\n'
        f"command = {json.dumps([sys.executable, '-c', released_fixer(shared)])}\n"
    )
    loop = (
        f'repo = "{repo}"\ntask = "Make check.py pass."\nagent = "fixer"\n'
        f"done_when = [{json.dumps(check)}]\n"
        'attempt_timeout = "300s"\nstall_after = "120s"\ncritic = "off"\n'
    )
    config = profile + sandbox + f'[limits]\nshutdown_grace = "{grace}"\n'
    config += f'worktrees = "{tmp_path / "wt"}"\n'
    return make_home(tmp_path / "home", config, {"calc": loop}), shared


def stop_while_the_agent_works(home: Path, shared: Path, daemons: list) -> None:
    """Start a run, SIGTERM the daemon while its agent works, let the agent end; wait for the
    daemon to exit."""
    daemon = start_daemon(home)
    daemons.append(daemon)
    trigger = loopd(home, "trigger", "calc")
    assert trigger.returncode == 0, trigger.stderr
    wait_for((shared / "started").exists, timeout=60, what="the agent to start")
    daemon.send_signal(signal.SIGTERM)
    wait_for(
        lambda: "loopd: stopping" in daemon_log(home) or daemon.poll() is not None,
        timeout=60,
        what="the daemon to take the signal",
    )
    (shared / "release").write_text("x")  # the agent ends by itself, inside its grace
    assert daemon.wait(timeout=120) == 0, daemon_log(home)  # one signal: a second cuts the grace


def test_an_agent_that_ends_within_the_grace_gets_its_checks(tmp_path: Path, daemons: list) -> None:
    home, shared = home_with(tmp_path, "40s", "python3 check.py")
    stop_while_the_agent_works(home, shared, daemons)
    (run,) = runs(home)
    assert run["outcome"] == "succeeded", (run.get("reason"), daemon_log(home))
    (attempt,) = run["attempts"]
    assert attempt["checks_passed"] is True and not attempt.get("interrupted")
    assert not list((home / "state" / "inbox").glob("*.json"))  # no retry: nothing was cut
    finished = [e for e in events(home) if e["type"] == "attempt_finished"]
    assert len(finished) == 1 and "interrupted" not in finished[0]


def test_checks_that_outlast_the_stop_run_after_the_restart(tmp_path: Path, daemons: list) -> None:
    shared = tmp_path / "talk"
    slow = shared / "slow"
    # Once check.py passes, the check waits while `slow` exists: longer than the grace left.
    check = (
        "python3 check.py && python3 -c \"import pathlib, time; p = pathlib.Path('"
        + str(slow)
        + "'); [time.sleep(0.1) for _ in range(3000) if p.exists()]\""
    )
    home, shared = home_with(tmp_path, "8s", check)
    slow.write_text("x")
    stop_while_the_agent_works(home, shared, daemons)
    (run,) = runs(home)
    assert run.get("outcome") is None and run["phase"] in ("judging", "learning"), run
    (attempt,) = run["attempts"]
    assert attempt.get("finished") and not attempt.get("interrupted")
    slow.unlink()
    daemon = start_daemon(home)
    daemons.append(daemon)
    wait_for(lambda: runs(home)[0].get("outcome"), timeout=120, what="the resumed run to end")
    assert stop_daemon(daemon) == 0
    (run,) = runs(home)
    assert run["outcome"] == "succeeded", (run.get("reason"), daemon_log(home))
    assert [e["phase"] for e in events(home) if e["type"] == "run_resumed"] == ["judging"]


def test_a_finishing_token_follows_a_cancel_and_ends_with_the_grace() -> None:
    token = StopToken()
    token.interrupt(0.3)
    finishing = token.finishing()
    assert not finishing.stopped  # the grace is not over yet
    assert finishing.wait(30)  # then it is
    assert finishing.why == "interrupted"
    other = StopToken()
    other.interrupt(60)
    late = other.finishing()
    other.cancel()
    assert late.why == "cancelled"
    try:
        late.raise_if_stopped()
    except RunStopped as stopped:
        assert stopped.why == "cancelled"
    else:
        raise AssertionError("a cancelled finishing token did not raise")


def test_loopd_once_gives_an_agent_that_ends_within_the_grace_its_checks(tmp_path: Path) -> None:
    home, shared = home_with(tmp_path, "40s", "python3 check.py")
    env = dict(os.environ)
    env.pop("LOOPD_HOME", None)
    once = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "once", "calc"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
        text=True,
    )
    try:
        wait_for((shared / "started").exists, timeout=60, what="the agent to start")
        once.send_signal(signal.SIGTERM)
        (shared / "release").write_text("x")  # the agent ends two seconds later, by itself
        out, _ = once.communicate(timeout=120)
    finally:
        if once.poll() is None:
            once.kill()
            once.wait()
    (run,) = runs(home)
    assert run["outcome"] == "succeeded", (run.get("reason"), out)
    assert not run["attempts"][0].get("interrupted")

"""A refused login, end to end under bubblewrap: the run ends `agent-login` without a nudge,
one escalation stands for the agent profile, that profile's loops are held (in `loopd once`
and in `status` of a running daemon) while other profiles' loops run, and `loopd check`
tries the agent again: still refused, the hold stays; working, the hold lifts, the escalation
is resolved and the held loop's queued run starts. A program that fails before its stream
begins is not nudged into a session that never existed.

Real parts: `loopd once`, `loopd run`, `loopd check` and `loopd status` as subprocesses, the
real Qwen Code CLI against a scripted server answering HTTP 401, `command` agents that print
what real programs print, bubblewrap.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tomli_w

from daemon.people.escalation_file import open_escalations
from daemon.people.escalation_repeat import escalate
from daemon.state.records import Cause, RunRecord, RunTrigger
from daemon.state.store import StateStore
from tests.helpers import (
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
from tests.model_server import ScriptedModelServer, Spec
from tests.sandboxing import require_bwrap
from tests.test_e2e_qwen import QWEN, loopd_lines

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}
UNAUTHORIZED = {
    "error": {
        "message": "Incorrect API key provided: sk-test-****1234. You can find your API key "
        "at https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
        "code": "invalid_api_key",
    }
}


def loop_file(repo: Path, agent: str, **more: Any) -> str:
    settings = {
        "repo": str(repo),
        "task": "Make check.py pass.",
        "agent": agent,
        "done_when": ["python3 check.py"],
        "attempt_timeout": "120s",
        "stall_after": "90s",
        "max_nudges": 1,
        "max_attempts": 1,
        **more,
    }
    return tomli_w.dumps(settings)


def fixing_agent(calls: Path) -> list[str]:
    """A command agent that fixes calc.py (and counts its calls)."""
    code = (
        "import pathlib, sys\n"
        f"calls = pathlib.Path({str(calls)!r}); calls.write_text(calls.read_text() + 'x' "
        "if calls.exists() else 'x')\n"
        "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
        "print('fixed add()')\n"
    )
    return [sys.executable, "-c", code]


def escalations(home: Path) -> list[Any]:
    return open_escalations(StateStore(home / "state"))


def held_profiles(home: Path) -> dict[str, Any]:
    path = home / "state" / "logins.toml"
    return tomllib.loads(path.read_text())["profiles"] if path.exists() else {}


def assert_refused_login_held(outcome: Any, profile: str, loop: str) -> None:
    """A `loopd once` run of a real program whose key was refused: it ended `agent-login`
    in one session (no nudge spent on the same key), and its profile is held, as a daemon's
    `loopd status --json` shows for its loop."""
    run = outcome.run
    assert (run["outcome"], run["cause"]) == ("escalated", "agent-login"), outcome.explain()
    (attempt,) = run["attempts"]
    assert attempt["nudges"] == 0
    assert len(loopd_lines(outcome, "process", event="started")) == 1
    assert outcome.events("nudge") == []
    assert set(held_profiles(outcome.home)) == {profile}
    (filed,) = escalations(outcome.home)
    assert (filed.cause, filed.profile, filed.run) == ("agent-login", profile, run["id"])
    daemon = start_daemon(outcome.home)
    try:

        def held() -> str:
            status = json.loads(loopd(outcome.home, "status", "--json").stdout)
            return status["loops"][loop].get("waiting_for", "")

        why = wait_for(held, timeout=60, interval=0.5, what="status to show the login's hold")
        assert f"refused the login of agent profile '{profile}'" in why
        assert run["id"] in why and "loopd check" in why
    finally:
        assert stop_daemon(daemon) == 0


def test_qwen_refused_login_holds_its_profile_until_check_finds_it_working(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    require_bwrap()
    assert QWEN is not None, "the real qwen CLI (node_modules/.bin/qwen)"
    refuse = {"on": True}

    def reply(request: dict[str, Any]) -> Spec:
        if refuse["on"]:
            return {"status": 401, "body": UNAUTHORIZED}
        return "OK."

    model_server.script(reply)
    talk_dir, sandbox = talk(tmp_path)
    qwen = {"adapter": "qwen", "model": "qwen3-coder-test", "base_url": model_server.base_url}
    other = {"adapter": "command", "command": fixing_agent(talk_dir / "calls")}
    config = tomli_w.dumps({"agents": {"qwen": qwen, "other": other}}) + sandbox
    # b's run once the hold lifts need only show that it ran: no nudge (another qwen start).
    nudges = {"a": 1, "b": 0, "c": 1}
    loops = {
        name: loop_file(make_repo(tmp_path / f"repo-{name}", BUGGY), agent, max_nudges=nudges[name])
        for name, agent in (("a", "qwen"), ("b", "qwen"), ("c", "other"))
    }
    home = make_home(tmp_path / "home", config, loops)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "qwen").symlink_to(QWEN.resolve())
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    once = loopd(home, "once", "a", env=env, timeout=300)
    assert once.returncode != 0, once.stdout + once.stderr
    (run,) = runs(home)
    assert (run["outcome"], run["cause"]) == ("escalated", "agent-login"), run["reason"]
    assert "Incorrect API key" in run["reason"]
    assert run["attempts"][0]["nudges"] == 0  # the same key is not sent again
    assert [e["type"] for e in events(home) if e["type"] == "nudge"] == []
    assert set(held_profiles(home)) == {"qwen"}
    (filed,) = escalations(home)
    assert (filed.cause, filed.profile, filed.run) == ("agent-login", "qwen", run["id"])
    text = (home / "state" / "escalations" / f"{run['id']}.md").read_text()
    assert "`loopd check`" in text

    # Another loop of the profile waits; another profile's loop runs.
    held = loopd(home, "once", "b", env=env)
    assert held.returncode == 1
    assert "not run: the provider refused the login of agent profile 'qwen'" in held.stdout
    assert "`loopd check` finds the login working again" in held.stdout
    ran = loopd(home, "once", "c", env=env, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert runs(home)[-1]["outcome"] == "succeeded"

    # Still refused: the hold stays.
    asked = len(model_server.chat_requests())
    check = loopd(home, "check", env=env, timeout=300)
    assert "warning: agent profile 'qwen' stays held" in check.stdout, check.stdout
    assert "still refused" in check.stdout
    assert len(model_server.chat_requests()) > asked  # it did try the real agent
    assert set(held_profiles(home)) == {"qwen"}

    # Logged in again: the hold lifts and the escalation is resolved.
    refuse["on"] = False
    check = loopd(home, "check", env=env, timeout=300)
    assert "agent profile 'qwen': its login works again" in check.stdout, check.stdout
    assert f"escalation {run['id']} resolved" in check.stdout
    assert held_profiles(home) == {}
    assert escalations(home) == []
    lifted = [e for e in events(home) if e["type"] == "login_lifted"]
    assert [(e["profile"], e["held_by"], e["escalation"]) for e in lifted] == [
        ("qwen", run["id"], run["id"])
    ]
    again = loopd(home, "once", "b", env=env, timeout=300)
    assert "not run" not in again.stdout
    assert runs(home)[-1]["loop"] == "b"
    assert runs(home)[-1]["cause"] != "agent-login"


def gated_agent(flag: Path, calls: Path) -> list[str]:
    """A command agent whose provider refuses it while `flag` exists (stderr, exit 1, before
    any output: as a CLI with an expired key), and fixes calc.py otherwise."""
    code = (
        "import pathlib, sys\n"
        f"calls = pathlib.Path({str(calls)!r}); calls.write_text(calls.read_text() + 'x' "
        "if calls.exists() else 'x')\n"
        f"if pathlib.Path({str(flag)!r}).exists():\n"
        "    sys.stderr.write('Error: 401 Unauthorized: invalid x-api-key. Please run /login\\n')\n"
        "    sys.exit(1)\n"
        "p = pathlib.Path('calc.py')\n"
        "if p.exists():  # `loopd check`'s try has no calc.py: it only answers\n"
        "    p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
        "print('OK')\n"
    )
    return [sys.executable, "-c", code]


def test_the_daemon_holds_a_refused_profile_in_status_and_starts_its_runs_once_lifted(
    tmp_path: Path, daemons: list
) -> None:
    require_bwrap()
    talk_dir, sandbox = talk(tmp_path)
    flag, calls = talk_dir / "refuse", talk_dir / "calls"
    flag.write_text("")
    agents = {
        "cli": {"adapter": "command", "command": gated_agent(flag, calls)},
        "other": {"adapter": "command", "command": fixing_agent(talk_dir / "other-calls")},
    }
    config = tomli_w.dumps({"agents": agents}) + sandbox
    loops = {
        name: loop_file(make_repo(tmp_path / f"repo-{name}", BUGGY), agent)
        for name, agent in (("a", "cli"), ("b", "cli"), ("c", "other"))
    }
    home = make_home(tmp_path / "home", config, loops)
    daemon = start_daemon(home)
    daemons.append(daemon)
    assert loopd(home, "trigger", "a").returncode == 0
    first = wait_for(
        lambda: next((r for r in runs(home) if r.get("outcome")), None),
        timeout=120,
        what="run a to end",
    )
    assert (first["outcome"], first["cause"]) == ("escalated", "agent-login")
    assert calls.read_text() == "x"  # never nudged

    def held_in_status() -> dict[str, Any] | None:
        loops = json.loads(loopd(home, "status", "--json").stdout)["loops"]
        return loops if "refused the login" in loops["b"].get("waiting_for", "") else None

    status = wait_for(held_in_status, timeout=60, what="status to show the hold")
    assert "agent profile 'cli'" in status["b"]["waiting_for"]
    assert "loopd check" in status["b"]["waiting_for"]
    assert not status["c"].get("waiting_for")  # another profile's loop is not held
    text = " ".join(loopd(home, "status").stdout.split())
    assert text.count("idle (held: the") == 2  # a and b, not c
    assert loopd(home, "trigger", "b").returncode == 0
    assert loopd(home, "trigger", "c").returncode == 0
    wait_for(
        lambda: any(r["loop"] == "c" and r.get("outcome") for r in runs(home)),
        timeout=120,
        what="loop c (another profile) to run",
    )
    assert [r["loop"] for r in runs(home)] == ["a", "c"]  # b waits
    flag.unlink()
    check = loopd(home, "check", timeout=300)
    assert "agent profile 'cli': its login works again" in check.stdout, check.stdout
    done = wait_for(
        lambda: next((r for r in runs(home) if r["loop"] == "b" and r.get("outcome")), None),
        timeout=120,
        what="b's queued run to start and end once the hold lifted",
    )
    assert done["outcome"] == "succeeded"
    assert stop_daemon(daemon) == 0


def test_a_program_that_fails_before_its_stream_is_not_nudged(tmp_path: Path) -> None:
    require_bwrap()
    talk_dir, sandbox = talk(tmp_path)
    calls = talk_dir / "calls"
    code = (
        "import pathlib, sys\n"
        f"calls = pathlib.Path({str(calls)!r}); calls.write_text(calls.read_text() + 'x' "
        "if calls.exists() else 'x')\n"
        "sys.stderr.write('error while loading shared libraries: libfoo.so.1: cannot open\\n')\n"
        "sys.exit(3)\n"
    )
    agents = {"agents": {"broken": {"adapter": "command", "command": [sys.executable, "-c", code]}}}
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(
        tmp_path / "home", tomli_w.dumps(agents) + sandbox, {"a": loop_file(repo, "broken")}
    )
    once = loopd(home, "once", "a", timeout=300)
    assert once.returncode != 0
    (run,) = runs(home)
    assert (run["outcome"], run["cause"]) == ("escalated", "agent-failed"), run["reason"]
    assert "exited 3 before its stream began" in run["reason"]
    assert "libfoo.so.1: cannot open" in run["reason"]
    assert run["attempts"][0]["nudges"] == 0
    assert calls.read_text() == "x"
    assert held_profiles(home) == {}  # not a login: nothing held


NOW = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)


def refused(loop: str, n: int) -> RunRecord:
    trigger = RunTrigger(kind="manual", reason="test", ts=NOW)
    return RunRecord(
        id=f"20261207-03000{n}-{loop}",
        loop=loop,
        task=f"task of {loop}",
        trigger=trigger,
        started=NOW,
        outcome="escalated",
        reason="the agent's provider refused its login: 401",
        cause=Cause.AGENT_LOGIN,
    )


def test_refused_logins_of_one_profile_count_in_one_escalation_across_loops(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state")
    first, second, third = refused("a", 1), refused("b", 2), refused("c", 3)
    assert escalate(store, first, NOW, "claude") == (first.id, False)
    assert escalate(store, second, NOW, "claude") == (first.id, True)  # another loop, counted
    assert escalate(store, third, NOW, "codex") == (third.id, False)  # another profile: its own
    by_run = {e.run: e for e in open_escalations(store)}
    assert set(by_run) == {first.id, third.id}
    assert (by_run[first.id].count, by_run[first.id].latest_run) == (2, second.id)
    text = store.escalation_path(first.id).read_text()
    assert "loops using agent profile `claude` had their login refused" in text

"""Configuration changes reach the running daemon: a watcher (no signal needed), `loopd
reload`, per-loop reload with the last good configuration kept, status and trigger naming
what is not loaded and why, and an agent that rewrites its own loop file.

`loopd run` as a real process on real files; the merge rules also in process.
"""

from __future__ import annotations

import json
import sys
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.home import Home
from daemon.service.reload import first_load, keep_last_good
from daemon.state.records import Trigger
from daemon.state.store import StateStore
from tests.helpers import (
    daemon_log,
    events,
    loopd,
    make_home,
    make_repo,
    runs,
    start_daemon,
    stop_daemon,
    wait_for,
)

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}
FIXER = (
    "import pathlib; p = pathlib.Path('calc.py'); "
    "p.write_text(p.read_text().replace('a - b', 'a + b'))"
)


def agent_config(script: str = FIXER, name: str = "fixer") -> str:
    return (
        f'[agents.{name}]\nadapter = "command"\n'
        f"command = {json.dumps([sys.executable, '-c', script])}\n"
    )


def loop_text(repo: Path, **extra: object) -> str:
    keys: dict[str, object] = {
        "repo": str(repo),
        "task": "Make check.py pass.",
        "agent": "fixer",
        "done_when": ["python3 check.py"],
        "max_nudges": 0,
        "max_attempts": 1,
        **extra,
    }
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())


def status(home: Path) -> dict[str, Any]:
    proc = loopd(home, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def daemon_status(home: Path) -> dict[str, Any]:
    return tomllib.loads((home / "state" / "status.toml").read_text())


def test_a_loop_file_written_while_the_daemon_runs_is_loaded_without_a_signal(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config())
    daemon = start_daemon(home)
    daemons.append(daemon)
    (home / "loops" / "calc.toml").write_text(loop_text(repo))
    wait_for(lambda: "calc" in daemon_status(home)["loops"], timeout=20, what="the watcher")
    proc = loopd(home, "trigger", "calc", "--wait", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr + daemon_log(home)
    assert [r["outcome"] for r in runs(home)] == ["succeeded"]
    (reloaded,) = [e for e in events(home) if e["type"] == "reloaded"]
    assert reloaded["changed"] == ["calc"] and reloaded["loops"] == ["calc"]
    assert stop_daemon(daemon) == 0


def test_a_trigger_right_after_the_file_is_written_finds_the_loop(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config())
    daemon = start_daemon(home)
    daemons.append(daemon)
    # No waiting for the watcher: the daemon reloads for a trigger naming a new loop file.
    (home / "loops" / "calc.toml").write_text(loop_text(repo))
    proc = loopd(home, "trigger", "calc", "--wait", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr + daemon_log(home)
    assert stop_daemon(daemon) == 0


def test_a_broken_edit_keeps_the_last_good_configuration_and_says_so(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config(), {"calc": loop_text(repo)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    (home / "loops" / "calc.toml").write_text(loop_text(repo, max_attempts="three"))

    def stale() -> dict[str, Any] | None:
        entry = daemon_status(home)["loops"].get("calc", {})
        return entry if entry.get("stale") else None

    entry = wait_for(stale, timeout=20, what="the stale loop")
    assert "max_attempts" in entry["error"] and entry["loaded"] is True
    info = status(home)["loops"]["calc"]
    assert info["stale"] is True and info["note"].startswith("stale")
    text = loopd(home, "status", env={"COLUMNS": "300"}).stdout
    assert "stale: its file does not load" in text and "max_attempts" in text
    # The loop still runs, on its last good configuration; trigger says so.
    proc = loopd(home, "trigger", "calc", "--wait", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr + daemon_log(home)
    assert "last good configuration" in proc.stderr and "max_attempts" in proc.stderr
    assert runs(home)[-1]["outcome"] == "succeeded"
    # Fixed: no longer stale.
    (home / "loops" / "calc.toml").write_text(loop_text(repo, max_attempts=2))
    wait_for(lambda: stale() is None, timeout=20, what="the fixed loop")
    assert "note" not in status(home)["loops"]["calc"]
    assert stop_daemon(daemon) == 0


def test_a_new_broken_file_is_not_loaded_and_trigger_says_why_and_how_to_fix_it(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config(), {"calc": loop_text(repo)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    (home / "loops" / "fresh.toml").write_text(loop_text(repo, overlap="sometimes"))
    wait_for(
        lambda: daemon_status(home)["loops"].get("fresh", {}).get("loaded") is False,
        timeout=20,
        what="the broken file to be seen",
    )
    assert status(home)["loops"]["fresh"]["note"].startswith("not loaded")
    proc = loopd(home, "trigger", "fresh", "--wait")
    assert proc.returncode == 2
    assert "overlap" in proc.stderr and "Fix the file" in proc.stderr
    # A trigger that reaches the daemon anyway (a hook, an older loopd) is skipped with why.
    store = StateStore(home / "state")
    from daemon.clock import utc_now

    store.put_trigger(Trigger(loop="fresh", kind="manual", reason="hook", ts=utc_now()))
    store.put_trigger(Trigger(loop="nowhere", kind="manual", reason="hook", ts=utc_now()))

    def skipped() -> dict[str, str]:
        return {e["loop"]: e["why"] for e in events(home) if e["type"] == "trigger_skipped"}

    why = wait_for(lambda: len(skipped()) == 2 and skipped(), what="both skips")
    assert "is not loaded" in why["fresh"] and "overlap" in why["fresh"]
    assert "reloads it within seconds" in why["fresh"]
    assert "there is no" in why["nowhere"] and "nowhere.toml" in why["nowhere"]
    assert stop_daemon(daemon) == 0


def test_loopd_reload_says_what_loaded(tmp_path: Path, daemons: list) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config(), {"calc": loop_text(repo)})
    proc = loopd(home, "reload")
    assert proc.returncode == 2 and "no daemon runs" in proc.stderr
    daemon = start_daemon(home)
    daemons.append(daemon)
    proc = loopd(home, "reload")
    assert proc.returncode == 0, proc.stderr + daemon_log(home)
    assert proc.stdout.startswith("reloaded: 1 loop(s): calc")
    (home / "loops" / "calc.toml").write_text("repo = \n")
    (home / "loops" / "more.toml").write_text(loop_text(repo))
    proc = loopd(home, "reload")
    assert proc.returncode == 1
    assert "calc: its file does not load; the last good configuration is kept" in proc.stdout
    assert "reloaded: 2 loop(s): calc, more" in proc.stdout
    # A broken loopd.toml keeps everything.
    (home / "loopd.toml").write_text("[limits\n")
    proc = loopd(home, "reload", "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["type"] == "reload_failed"
    warnings = daemon_status(home)["daemon"]["warnings"]
    assert any("loopd.toml does not load" in w for w in warnings)
    assert sorted(daemon_status(home)["loops"]) == ["calc", "more"]
    assert stop_daemon(daemon) == 0


def test_an_agent_rewriting_its_own_loop_file_is_recorded_and_its_run_keeps_its_checks(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home")
    loop_file = home / "loops" / "calc.toml"
    # A hostile agent: instead of fixing add(), it makes its own checks always pass.
    # (skip_if_done off: its next run then runs the agent and succeeds by `true`.)
    weaker = loop_text(repo, done_when=["true"], skip_if_done=False).replace('"fixer"', '"cheat"')
    cheat = (
        "import pathlib, time\n"
        f"pathlib.Path({str(loop_file)!r}).write_text({weaker!r})\n"
        "time.sleep(1.5)\n"  # still working when the daemon reloads
    )
    # No sandbox: where one runs, the home is hidden from the agent and this write fails.
    # Without one (mode = "off", or a machine where bubblewrap cannot run) the agent reaches
    # the home, and this test is about what loopd does then.
    (home / "loopd.toml").write_text(
        agent_config(cheat, "cheat")
        + f'[limits]\nworktrees = "{tmp_path / "worktrees"}"\n'
        + '[sandbox]\nmode = "off"\nunconfined_as_root = true\n'
    )
    loop_file.write_text(loop_text(repo).replace('"fixer"', '"cheat"'))
    daemon = start_daemon(home)
    daemons.append(daemon)
    proc = loopd(home, "trigger", "calc", "--wait", timeout=90)
    assert proc.returncode == 1, proc.stdout + daemon_log(home)
    (run,) = runs(home)
    # Judged by the checks it started with, not the ones it wrote.
    assert run["outcome"] == "escalated" and run["attempts"][0]["checks_passed"] is False
    checks = (home / "state" / "runs" / run["id"] / "attempt-1" / "checks.log").read_text()
    assert "check.py" in checks
    (changed,) = [e for e in events(home) if e["type"] == "config_changed_during_attempt"]
    assert changed["runs"] == [run["id"]] and changed["files"] == [str(loop_file)]
    # The change applies from the next run on (the record above is how a person learns of it).
    proc = loopd(home, "trigger", "calc", "--wait", timeout=90)
    assert runs(home)[-1]["outcome"] == "succeeded", proc.stdout
    assert stop_daemon(daemon) == 0


def test_a_stale_loop_whose_profile_is_gone_is_not_kept(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = Home(make_home(tmp_path / "home", agent_config(), {"calc": loop_text(repo)}))
    before = home.load()
    files = first_load(home, before)
    (home.loops_dir / "calc.toml").write_text(loop_text(repo, max_attempts=0))
    after = home.load()
    merged = keep_last_good(home, before, files, after)
    assert "calc" in after.loops and "max_attempts" in merged.stale["calc"]
    # The profile it needs is gone from loopd.toml: keeping it would start nothing.
    home.config_path.write_text(agent_config(name="other"))
    after = home.load()
    merged = keep_last_good(home, before, files, after)
    assert "calc" not in after.loops and not merged.stale


def test_a_stale_scheduled_loop_shows_its_next_fire_as_the_others_do(
    tmp_path: Path, daemons: list
) -> None:
    """Its file does not load, yet the daemon fires it on its last good configuration: the
    next fire is printed as a person reads one, never as raw ISO."""
    repo = make_repo(tmp_path / "repo", BUGGY)
    loops = {
        "calc": loop_text(repo, schedule=["0 3 * * *"], timezone="UTC"),
        "other": loop_text(repo, schedule=["0 3 * * *"], timezone="UTC"),
    }
    home = make_home(tmp_path / "home", agent_config(), loops)
    daemon = start_daemon(home)
    daemons.append(daemon)
    broken = loop_text(repo, schedule=["0 3 * * *"], timezone="UTC", max_attempts="three")
    (home / "loops" / "calc.toml").write_text(broken)

    def stale() -> dict[str, Any] | None:
        entry = daemon_status(home)["loops"].get("calc", {})
        return entry if entry.get("stale") and entry.get("next_fire") else None

    entry = wait_for(stale, timeout=20, what="the stale loop")
    # No [listen]: the start banner says so.
    assert "[listen] off; Ctrl-C" in daemon_log(home).splitlines()[0]
    text = loopd(home, "status", env={"COLUMNS": "300"}).stdout
    rows = {line.replace("│", " ").split()[0]: line for line in text.splitlines() if "│" in line}
    row, other = rows["calc"], rows["other"]
    fire = entry["next_fire"]
    when = fire if not isinstance(fire, str) else datetime.fromisoformat(fire)
    shown = f"{when:%a %d %b %H:%M} UTC"
    assert shown in row and shown in other, (row, other)
    assert "T03:00" not in row and "+00:00" not in row, row
    assert stop_daemon(daemon) == 0

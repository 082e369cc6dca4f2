"""The spine end to end: `loopd once` with a command agent on a real repository in a worktree."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

from tests.helpers import (
    file_text,
    git,
    loopd,
    make_home,
    make_repo,
    processes_with,
    transcript_text,
    unique_token,
)

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n",
}
FIXER = (
    "import pathlib; p = pathlib.Path('calc.py'); "
    "p.write_text(p.read_text().replace('a - b', 'a + b')); print('fixed calc.py')"
)


def agent_config(script: str, with_prompt_arg: bool = False) -> str:
    argv = [sys.executable, "-c", script]
    if with_prompt_arg:
        argv.append("{prompt}")
    return f'[agents.fixer]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'


def loop_file(repo: Path, **extra: object) -> str:
    lines = [
        f'repo = "{repo}"',
        'task = "Make check.py pass."',
        'agent = "fixer"',
        'done_when = ["python3 check.py"]',
        'attempt_timeout = "60s"',
        'stall_after = "30s"',
    ]
    for key, value in extra.items():
        lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def read_run(home: Path, run_id: str) -> dict:
    return tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())


def test_once_fixes_the_code_in_a_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config(FIXER), {"calc": loop_file(repo)})
    proc = loopd(home, "once", "calc", "--reason", "test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    assert run_id.endswith(tuple("0123456789abcdef")) and "-calc-" in run_id
    run = read_run(home, run_id)
    assert run["outcome"] == "succeeded"
    assert run["branch"] == f"loopd/calc/{run_id}"
    assert len(run["attempts"]) == 1 and run["attempts"][0]["checks_passed"] is True
    attempt = home / "state" / "runs" / run_id / "attempt-1"
    for name in ("prompt.md", "checks.log", "diff.patch"):
        assert (attempt / name).is_file(), name
    # Compressed as the attempt ended; read as before.
    assert (attempt / "transcript.jsonl.gz").is_file()
    assert "a + b" in (attempt / "diff.patch").read_text()
    assert (attempt / "prompt.md").read_text().startswith("# Task\n\nMake check.py pass.")
    assert "fixed calc.py" in transcript_text(attempt)
    # The user's tree is untouched; the branch holds the fix; the worktree is gone.
    assert (repo / "calc.py").read_text() == BUGGY["calc.py"]
    assert git(repo, "status", "--porcelain") == ""
    assert "a + b" in git(repo, "show", f"{run['branch']}:calc.py")
    assert not Path(run["worktree"]).exists()
    author = git(repo, "log", "-1", "--format=%an <%ae>", run["branch"])
    assert author == "loopd <loopd@localhost>"
    # Files and folders under state/ are private.
    assert (attempt / "prompt.md").stat().st_mode & 0o777 == 0o600
    assert attempt.stat().st_mode & 0o777 == 0o700
    events = [json.loads(line) for line in (home / "state" / "events.jsonl").open()]
    types = [e["type"] for e in events if e.get("run") == run_id]
    for expected in ("run_started", "attempt_started", "attempt_finished", "checks", "verdict"):
        assert expected in types
    assert types[-1] == "run_finished"


def test_an_agent_that_does_nothing_is_escalated_after_three_attempts(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(
        tmp_path / "home",
        agent_config("print('I looked at it.')"),
        {"calc": loop_file(repo, max_nudges=0)},
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run = read_run(home, run_id)
    assert run["outcome"] == "escalated"
    assert [a["n"] for a in run["attempts"]] == [1, 2, 3]
    assert all(a["checks_passed"] is False for a in run["attempts"])
    runs = home / "state" / "runs" / run_id
    first = (runs / "attempt-1" / "prompt.md").read_text()
    second = (runs / "attempt-2" / "prompt.md").read_text()
    assert "# What failed last time" not in first
    assert "# What failed last time" in second
    assert "add(2, 3) gave -1" in second
    assert second.index("# Task") < second.index("# What failed last time")
    assert (home / "state" / "escalations" / f"{run_id}.md").is_file()
    assert (repo / "calc.py").read_text() == BUGGY["calc.py"]


def test_command_agent_with_prompt_argument_gets_the_prompt(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    script = (
        "import sys, pathlib; pathlib.Path('seen.txt').write_text(sys.argv[1]); "
        "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))"
    )
    home = make_home(
        tmp_path / "home",
        agent_config(script, with_prompt_arg=True),
        {"calc": loop_file(repo)},
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run = read_run(home, run_id)
    prompt = (home / "state" / "runs" / run_id / "attempt-1" / "prompt.md").read_text()
    assert git(repo, "show", f"{run['branch']}:seen.txt") == prompt.rstrip("\n")


def test_stopping_early_gets_a_nudge_with_the_whole_prompt(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    # Fixes the code only when it has been nudged (the prompt then has a # Nudge section).
    script = (
        "import sys, pathlib; prompt = sys.stdin.read()\n"
        "if '# Nudge' in prompt:\n"
        "    p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
        "    print('fixed after the nudge')\n"
        "else:\n"
        "    print('done, I think')\n"
    )
    home = make_home(
        tmp_path / "home", agent_config(script), {"calc": loop_file(repo, max_nudges=1)}
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = read_run(home, proc.stdout.splitlines()[0])
    attempt = run["attempts"][0]
    assert attempt["nudges"] == 1
    assert [s["kind"] for s in attempt["stalls"]] == ["stopped_early"]
    events = [json.loads(line) for line in (home / "state" / "events.jsonl").open()]
    assert any(e["type"] == "nudge" and e["run"] == run["id"] for e in events)


def test_in_place_refuses_a_dirty_tree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    (repo / "calc.py").write_text("# local edit\n")
    home = make_home(
        tmp_path / "home",
        agent_config(FIXER),
        {"calc": loop_file(repo, isolation="in-place")},
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 1
    run = read_run(home, proc.stdout.splitlines()[0])
    assert run["outcome"] == "error"
    assert "uncommitted changes" in run["reason"]
    assert (repo / "calc.py").read_text() == "# local edit\n"


def test_in_place_commits_on_the_checked_out_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(
        tmp_path / "home",
        agent_config(FIXER),
        {"calc": loop_file(repo, isolation="in-place")},
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "a + b" in (repo / "calc.py").read_text()
    assert git(repo, "log", "-1", "--format=%an") == "loopd"
    assert git(repo, "status", "--porcelain") == ""


def test_once_on_unknown_and_broken_loops_exits_2(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(
        tmp_path / "home",
        agent_config(FIXER),
        {"broken": loop_file(repo) + "colour = 'blue'\n"},
    )
    proc = loopd(home, "once", "nosuch")
    assert proc.returncode == 2 and "unknown loop 'nosuch'" in proc.stderr
    proc = loopd(home, "once", "broken")
    assert proc.returncode == 2
    assert "colour" in proc.stderr and "unknown key" in proc.stderr


def test_secrets_an_agent_prints_never_reach_state(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    aws = "AKIA" + "Q3EXAMPLE7KEYXYZ"
    github = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    pem_body = "MIIEowIBAAKCAQEA7bq98Xyz" + "Q" * 40
    script = (
        f"print('key {aws}'); print('token {github}');"
        "print('-----BEGIN RSA PRIVATE KEY-----');"
        f"print('{pem_body}');"
        "print('-----END RSA PRIVATE KEY-----');"
        f"open('leak.txt', 'w').write('{aws}\\n{github}\\n')"
    )
    home = make_home(
        tmp_path / "home", agent_config(script), {"calc": loop_file(repo, max_attempts=1)}
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 1
    texts = [file_text(p) for p in (home / "state").rglob("*") if p.is_file()]
    assert any("REDACTED" in t for t in texts)
    for secret in (aws, github, pem_body):
        assert not any(secret in t for t in texts), secret


def test_an_agent_that_leaves_a_grandchild_and_hangs_is_killed_with_it(tmp_path: Path) -> None:
    # The agent and its grandchild are found by a token in their command lines: inside the
    # sandbox their pids are the PID namespace's, and they cannot write outside the tree.
    token = unique_token("grandchild", tmp_path)
    repo = make_repo(tmp_path / "repo", BUGGY)
    script = (
        f"# {token}\n"
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600) # {token}'],"
        " start_new_session=True)\n"
        "open('started', 'w').write('yes')\n"
        "time.sleep(600)\n"
    )
    home = make_home(
        tmp_path / "home",
        agent_config(script),
        {"calc": loop_file(repo, max_attempts=1).replace('"60s"', '"3s"')},
    )
    proc = loopd(home, "once", "calc", timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = read_run(home, proc.stdout.splitlines()[0])
    assert run["attempts"][0]["timed_out"] is True
    assert git(repo, "show", f"{run['branch']}:started") == "yes"  # both had started
    assert processes_with(token) == []


def test_an_agent_that_cannot_start_is_escalated_at_once(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(
        tmp_path / "home",
        '[agents.fixer]\nadapter = "command"\ncommand = ["/nonexistent/agent"]\n',
        {"calc": loop_file(repo)},
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 1
    run = read_run(home, proc.stdout.splitlines()[0])
    assert run["outcome"] == "escalated"
    assert run["reason"].startswith("agent failed to start")
    assert len(run["attempts"]) == 1
    assert (home / "state" / "escalations" / f"{run['id']}.md").is_file()


def test_a_killed_once_leaves_a_run_the_next_once_ends(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import time

    from tests.helpers import ROOT, wait_for

    repo = make_repo(tmp_path / "repo", BUGGY)
    token = unique_token("abandoned", tmp_path)
    # The first run's agent hangs; the second's (its trigger's reason is in the prompt) fixes.
    script = (
        f"# {token}\n"
        "import pathlib, sys, time\n"
        "if 'second' not in sys.stdin.read():\n"
        "    pathlib.Path('started').write_text('yes'); time.sleep(600)\n"
        "c = pathlib.Path('calc.py'); c.write_text(c.read_text().replace('a - b', 'a + b'))\n"
    )
    home = make_home(tmp_path / "home", agent_config(script), {"calc": loop_file(repo)})
    first = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "once", "calc"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
        text=True,
    )
    try:
        wait_for(lambda: list((tmp_path / "worktrees").glob("calc/*/started")), what="the agent")
        assert processes_with(token)
        first_id = first.stdout.readline().strip()
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        time.sleep(0.2)
        proc = loopd(home, "once", "calc", "--reason", "second")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"ended abandoned run {first_id}" in proc.stderr
        # Nothing of the first agent is left: the sandbox's processes die with the loopd that
        # started them, and an unsandboxed agent is found and killed by the next `loopd once`.
        assert processes_with(token) == []
        assert read_run(home, first_id)["outcome"] == "interrupted"
    finally:
        if first.poll() is None:
            first.kill()

"""Issue 3 end to end: repository events and the safety of a run, through the real CLI.

Every test uses real git repositories in tmp_path, `loopd hooks install` as a subprocess, and
the daemon as a real process (`loopd run`) or `loopd once`, with a `command` agent (python3 -c)
that records what it saw at its start (its prompt, a file's content) into a JSON-lines log.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tomllib
from pathlib import Path

from daemon.scheduling.hook_script import take_records
from tests.helpers import (
    daemon_log,
    events,
    git,
    loopd,
    make_home,
    make_repo,
    runs,
    start_daemon,
    stop_daemon,
    wait_for,
)

CALC = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from calc import add\nassert add(2, 3) == 5, 'add is wrong'\n",
}
CHECK = "PYTHONPATH=. python3 tests/test_calc.py"
FIX = "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))"


def agent_profile(log: Path, body: str) -> str:
    """A `command` agent: reads its prompt from stdin, logs a record, then runs `body`."""
    script = (
        "import json, os, pathlib, subprocess, sys, time\n"
        "started = time.time()\n"
        "prompt = sys.stdin.read()\n"
        "def record(**fields):\n"
        f"    with open({str(log)!r}, 'a') as fh:\n"
        "        fh.write(json.dumps({'t': started, 'cwd': os.getcwd(), 'prompt': prompt,"
        " **fields}) + '\\n')\n"
        f"{body}\n"
    )
    argv = [sys.executable, "-c", script]
    # The agent runs sandboxed: the folder of its log is the one outside its tree it may write.
    log.parent.mkdir(parents=True, exist_ok=True)
    return (
        f'[agents.bot]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
        f'\n[sandbox]\nwritable = ["{log.parent}"]\n'
    )


def loop_text(repo: Path, **extra: object) -> str:
    lines = [
        f"repo = {json.dumps(str(repo))}",
        'task = "Make tests/test_calc.py pass without changing it."',
        'agent = "bot"',
        'attempt_timeout = "60s"',
        'stall_after = "60s"',
        "max_nudges = 0",
    ]
    lines += [f"{key} = {json.dumps(value)}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"


def records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def finished_runs(home: Path, count: int) -> list[dict]:
    """The runs, in the order they started, once exactly `count` exist and all have ended."""
    found = runs(home)
    if len(found) != count or not all(r.get("outcome") for r in found):
        return []
    return sorted(found, key=lambda r: r["started"])


def of_type(home: Path, *types: str) -> list[dict]:
    return [e for e in events(home) if e["type"] in types]


def hooks_state(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of a hooks folder: its bytes (or link target) and mode."""
    out = {}
    for path in sorted(folder.iterdir()):
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        out[path.name] = (data, stat.S_IMODE(path.lstat().st_mode))
    return out


def install(home: Path) -> None:
    proc = loopd(home, "hooks", "install")
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------- hooks
def test_commits_start_runs_only_on_watched_branches_and_a_burst_coalesces(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", CALC)
    log, gate = tmp_path / "talk" / "agent.jsonl", tmp_path / "talk" / "gate"
    body = f"record()\nwhile not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.02)\n{FIX}"
    home = make_home(
        tmp_path / "home",
        agent_profile(log, body),
        # worktree: the guards watch the refs, so the burst on main shows in the first run
        {"calc": loop_text(repo, on_push=["main"], done_when=[CHECK], isolation="worktree")},
    )
    install(home)
    daemon = start_daemon(home)
    daemons.append(daemon)

    git(repo, "checkout", "-q", "-b", "other")
    git(repo, "commit", "-q", "--allow-empty", "-m", "on another branch")
    git(repo, "checkout", "-q", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "first on main")
    first_sha = git(repo, "rev-parse", "HEAD")
    wait_for(lambda: records(log), timeout=30, what="the first run's agent")

    burst = []
    for i in range(10):
        git(repo, "commit", "-q", "--allow-empty", "-m", f"burst {i}")
        burst.append(git(repo, "rev-parse", "HEAD"))
    wait_for(
        lambda: len(of_type(home, "trigger")) >= 11,
        timeout=30,
        what="the ten burst triggers taken",
    )
    gate.write_text("go")
    first, merged = wait_for(lambda: finished_runs(home, 2), timeout=60, what="two runs")
    assert stop_daemon(daemon) == 0, daemon_log(home)

    assert first["trigger"]["kind"] == "push" and first["trigger"]["ref"] == "refs/heads/main"
    assert first["trigger"]["new"] == first_sha and first["trigger"]["merged"] == []
    recorded = [merged["trigger"], *merged["trigger"]["merged"]]
    assert [t["new"] for t in recorded] == burst
    assert {(t["kind"], t["ref"]) for t in recorded} == {("push", "refs/heads/main")}
    assert len(of_type(home, "trigger_merged")) == 9
    # One trigger per commit: the burst commits and the first one, none for `other`.
    taken = of_type(home, "trigger", "trigger_skipped")
    assert sorted(e["new"] for e in taken) == sorted([first_sha, *burst])
    assert all(e["ref"] == "refs/heads/main" for e in taken)
    assert {Path(r["cwd"]).name for r in records(log)} == {first["id"], merged["id"]}
    # main moved while the first run's agent worked: that may be the person, but loopd cannot
    # tell, so the first run ends for a person to look, and main stays where it was put.
    assert first["outcome"] == "escalated" and first["cause"] == "ref-violation"
    assert [v["target"] for v in first["attempts"][0]["violations"]] == ["refs/heads/main"]
    assert git(repo, "rev-parse", "main") == burst[-1]
    assert merged["outcome"] == "succeeded", merged["reason"]


def test_a_persons_commits_during_a_run_are_not_undone(tmp_path: Path, daemons: list) -> None:
    repo = make_repo(tmp_path / "repo", CALC)
    log, gate = tmp_path / "talk" / "agent.jsonl", tmp_path / "talk" / "gate"
    body = f"record()\nwhile not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.02)"
    home = make_home(
        tmp_path / "home",
        agent_profile(log, body),
        {"calc": loop_text(repo, on_push=["main"], isolation="worktree")},
    )
    install(home)
    daemon = start_daemon(home)
    daemons.append(daemon)
    git(repo, "commit", "-q", "--allow-empty", "-m", "starts a run")
    wait_for(lambda: records(log), timeout=30, what="the agent")
    git(repo, "commit", "-q", "--allow-empty", "-m", "a person's work during the run")
    mine = git(repo, "rev-parse", "HEAD")
    gate.write_text("go")
    first, _ = wait_for(lambda: finished_runs(home, 2), timeout=60, what="two runs")
    assert stop_daemon(daemon) == 0
    # Never rewound; reported, because an agent could have made the same move.
    assert git(repo, "rev-parse", "main") == mine
    (violation,) = first["attempts"][0]["violations"]
    assert violation["kind"] == "ref_moved" and violation["target"] == "refs/heads/main"
    assert "left where it is" in violation["detail"]
    assert first["outcome"] == "escalated"


def test_an_in_place_agents_own_commit_does_not_trigger_its_loop_again(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", CALC)
    log = tmp_path / "talk" / "agent.jsonl"
    body = (
        "record()\n"
        "subprocess.run(['git', '-c', 'user.name=agent', '-c', 'user.email=agent@example.com',"
        " 'commit', '-q', '--allow-empty', '-m', 'agent work'], check=True)"
    )
    home = make_home(
        tmp_path / "home",
        agent_profile(log, body),
        {"calc": loop_text(repo, on_push=["main"], isolation="in-place", max_attempts=1)},
    )
    install(home)
    daemon = start_daemon(home)
    daemons.append(daemon)
    git(repo, "commit", "-q", "--allow-empty", "-m", "a person's commit")

    def settled() -> bool:
        # The agent's commit wrote its trigger before the agent exited: once the first run
        # is over and the daemon idle with an empty inbox, every trigger has been decided.
        if len(runs(home)) > 1:
            return True
        status = tomllib.loads((home / "state" / "status.toml").read_text())["loops"]["calc"]
        return (
            bool(finished_runs(home, 1))
            and status["phase"] == "idle"
            and status.get("pending", 0) == 0
            and not list((home / "state" / "inbox").glob("*.json"))
        )

    wait_for(settled, timeout=60, what="the first run and the daemon idle")
    count = len(runs(home))
    stop_daemon(daemon)
    assert count == 1


def test_a_push_into_a_bare_repository_triggers_the_loop_once(
    tmp_path: Path, daemons: list
) -> None:
    bare = tmp_path / "remote.git"
    bare.mkdir()
    git(bare, "init", "-q", "--bare", "-b", "main")
    work = make_repo(tmp_path / "work", CALC)
    git(work, "remote", "add", "origin", str(bare))
    git(work, "push", "-q", "origin", "main")
    log = tmp_path / "talk" / "agent.jsonl"
    body = "record()\npathlib.Path('calc.py').write_text('def add(a, b):\\n    return a + b\\n')"
    home = make_home(
        tmp_path / "home",
        agent_profile(log, body),
        {"calc": loop_text(bare, on_push=["main"], done_when=[CHECK])},
    )
    install(home)
    daemon = start_daemon(home)
    daemons.append(daemon)

    git(work, "commit", "-q", "--allow-empty", "-m", "pushed")
    git(work, "checkout", "-q", "-b", "feature")
    git(work, "commit", "-q", "--allow-empty", "-m", "feature work")
    pushed = git(work, "rev-parse", "main")
    # Two refs in one push: post-receive and reference-transaction both see main's update.
    git(work, "push", "-q", "origin", "main", "feature")
    (run,) = wait_for(lambda: finished_runs(home, 1), timeout=60, what="the pushed run")
    # The hooks ran inside `git push`: everything they wrote has been taken by now.
    wait_for(lambda: not list((home / "state" / "inbox").glob("*.json")), what="inbox empty")
    daemon_state = json.loads(loopd(home, "status", "--json").stdout)
    assert stop_daemon(daemon) == 0, daemon_log(home)

    assert run["outcome"] == "succeeded", run["reason"]
    assert run["trigger"]["kind"] == "push" and run["trigger"]["ref"] == "refs/heads/main"
    assert run["trigger"]["new"] == pushed and run["trigger"]["merged"] == []
    taken = of_type(home, "trigger", "trigger_merged", "trigger_skipped")
    assert [(e["type"], e["ref"]) for e in taken] == [("trigger", "refs/heads/main")]
    assert daemon_state["loops"]["calc"]["pending"] == 0
    assert "return a + b" in git(bare, "show", f"{run['branch']}:calc.py")
    assert len(records(log)) == 1


def test_user_hooks_still_run_and_uninstall_restores_them_byte_for_byte(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", CALC)
    home = make_home(
        tmp_path / "home",
        agent_profile(tmp_path / "talk" / "log", ""),
        {"calc": loop_text(repo, on_push=["main"])},
    )
    folder = repo / ".git" / "hooks"
    seen = tmp_path / "user-hooks.log"
    post_commit = folder / "post-commit"
    post_commit.write_bytes(f'#!/bin/sh\necho "post-commit $#" >> "{seen}"\n# no newline'.encode())
    post_commit.chmod(0o750)
    transaction = folder / "reference-transaction"
    transaction.write_text(
        f'#!/bin/sh\necho "rt $1" >> "{seen}"\nsed "s/^/  /" >> "{seen}"\nexit 0\n'
    )
    transaction.chmod(0o755)
    before = hooks_state(folder)

    install(home)
    assert hooks_state(folder) != before
    installed = hooks_state(folder)
    # git 2.28+ reports each update to reference-transaction: the user's post-commit stays
    # as it was, and loopd's wrapper chains the user's reference-transaction.
    assert installed["post-commit"] == before["post-commit"]
    assert (folder / "reference-transaction.loopd-orig").read_bytes() == before[
        "reference-transaction"
    ][0]
    again = loopd(home, "hooks", "install", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["repos"][0]["changed"] == []
    assert hooks_state(folder) == installed

    git(repo, "commit", "-q", "--allow-empty", "-m", "with hooks")
    sha = git(repo, "rev-parse", "HEAD")
    lines = seen.read_text().splitlines()
    assert "post-commit 0" in lines
    # The user's reference-transaction hook got each state and git's stdin, unchanged.
    assert "rt prepared" in lines and "rt committed" in lines
    assert any(line.strip().endswith(f"{sha} refs/heads/main") for line in lines)
    # The hook left a record; the daemon's intake makes the trigger of it.
    take_records(str(home / "state" / "inbox"))
    inbox = sorted((home / "state" / "inbox").glob("*.json"))
    assert [json.loads(p.read_text())["new"] for p in inbox] == [sha]

    proc = loopd(home, "hooks", "install", "--uninstall")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert hooks_state(folder) == before
    seen.unlink()
    git(repo, "commit", "-q", "--allow-empty", "-m", "after uninstall")
    assert "post-commit 0" in seen.read_text().splitlines()
    assert not list((home / "state" / "inbox").glob("*.hook"))
    assert len(list((home / "state" / "inbox").glob("*.json"))) == 1


# --------------------------------------------------------------------- text that is data
def test_a_hostile_branch_name_and_commit_message_make_a_normal_run(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", CALC)
    marker = tmp_path / "pwned"
    branch = f'x";touch${{IFS}}{marker};#'
    message = (
        f"$(touch {marker}) `touch {marker}` ; touch {marker} | touch {marker} && "
        f"touch {marker} '\" \\ $IFS > {marker}"
    )
    log = tmp_path / "talk" / "agent.jsonl"
    body = f"record()\n{FIX}"
    home = make_home(
        tmp_path / "home",
        agent_profile(log, body),
        {"calc": loop_text(repo, on_push=["**"], done_when=[CHECK])},
    )
    install(home)
    daemon = start_daemon(home)
    daemons.append(daemon)
    git(repo, "checkout", "-q", "-b", branch)
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    sha = git(repo, "rev-parse", "HEAD")
    (run,) = wait_for(lambda: finished_runs(home, 1), timeout=60, what="the run")
    shown = loopd(home, "show", run["id"], "--json")
    assert stop_daemon(daemon) == 0, daemon_log(home)

    assert run["outcome"] == "succeeded", run["reason"]
    assert run["trigger"]["ref"] == f"refs/heads/{branch}" and run["trigger"]["new"] == sha
    (seen,) = records(log)
    assert f"ref: refs/heads/{branch}\n" in seen["prompt"]
    assert json.loads(shown.stdout)["trigger"]["ref"] == f"refs/heads/{branch}"
    assert not marker.exists()
    assert not list(tmp_path.glob("*pwned*"))


def test_repository_configured_programs_are_not_run_by_loopd_during_a_run(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {**CALC, ".gitattributes": "*.py filter=evil diff=evil\n"})
    ran = tmp_path / "ran.log"
    program = tmp_path / "program.sh"
    program.write_text(f'#!/bin/sh\necho "$0 $*" >> "{ran}"\ncat\n')
    program.chmod(0o755)
    for key in (
        "core.fsmonitor",
        "filter.evil.clean",
        "filter.evil.smudge",
        "diff.evil.textconv",
        "diff.external",
        "core.pager",
    ):
        git(repo, "config", key, f"{program} {key}")
    git(repo, "config", "filter.evil.required", "true")
    for hook in ("pre-commit", "post-commit", "post-checkout", "reference-transaction"):
        path = repo / ".git" / "hooks" / hook
        path.write_text(f'#!/bin/sh\necho "hook {hook}" >> "{ran}"\n')
        path.chmod(0o755)
    log = tmp_path / "talk" / "agent.jsonl"
    # Attempt 1 also edits a protected path, so that restoring it (a checkout) runs too.
    body = (
        "record(test=pathlib.Path('tests/test_calc.py').read_text())\n"
        "if '# Reviewer feedback' not in prompt:\n"
        "    pathlib.Path('tests/test_calc.py').write_text('pass\\n')\n"
        f"{FIX}"
    )
    home = make_home(
        tmp_path / "home",
        agent_profile(log, body),
        {"calc": loop_text(repo, done_when=[CHECK], protect=["tests/**"], max_attempts=2)},
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = tomllib.loads((home / "state" / "runs" / proc.stdout.split()[0] / "run.toml").read_text())
    assert [a["n"] for a in run["attempts"]] == [1, 2]
    assert not ran.exists(), ran.read_text()
    assert records(log)[1]["test"] == CALC["tests/test_calc.py"]
    assert run["outcome"] == "succeeded", run["reason"]
    # The configuration is live: plain git in the repository does run these programs.
    (repo / "calc.py").write_text("changed\n")
    git(repo, "add", "calc.py")
    assert "filter.evil.clean" in ran.read_text() and "core.fsmonitor" in ran.read_text()


# ---------------------------------------------------------------------------- the guards
def test_an_agent_editing_protected_tests_fails_and_the_next_attempt_gets_them_back(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", CALC)
    log = tmp_path / "talk" / "agent.jsonl"
    body = (
        "record(test=pathlib.Path('tests/test_calc.py').read_text(),"
        " listing=sorted(os.listdir('tests')))\n"
        "if '# Reviewer feedback' not in prompt:\n"
        "    pathlib.Path('tests/test_calc.py').write_text('pass  # weakened\\n')\n"
        "    pathlib.Path('tests/extra.py').write_text('new\\n')\n"
        "else:\n"
        "    p = pathlib.Path('calc.py')\n"
        "    p.write_text(p.read_text().replace('a - b', 'a + b'))"
    )
    home = make_home(
        tmp_path / "home",
        agent_profile(log, body),
        {"calc": loop_text(repo, done_when=[CHECK], protect=["tests/**"], max_attempts=2)},
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.split()[0]
    folder = home / "state" / "runs" / run_id
    run = tomllib.loads((folder / "run.toml").read_text())

    first, second = records(log)
    assert first["test"] == CALC["tests/test_calc.py"]
    # The second agent process saw the tests as they were, and not the file it had added.
    assert second["test"] == CALC["tests/test_calc.py"]
    assert second["listing"] == ["test_calc.py"]
    one, two = run["attempts"]
    assert one["checks_passed"] is True  # the weakened test passes: only the guard catches it
    assert one["violations"] == [
        {"kind": "protected", "target": "tests/extra.py", "detail": ""},
        {"kind": "protected", "target": "tests/test_calc.py", "detail": ""},
    ]
    prompt = (folder / "attempt-2" / "prompt.md").read_text()
    assert prompt == second["prompt"]
    feedback = prompt.split("# Reviewer feedback\n", 1)[1]
    assert "protected path changed: tests/test_calc.py" in feedback
    assert two.get("violations", []) == [] and run["outcome"] == "succeeded"
    # The run's branch holds the tests as they were, and the fix.
    assert (
        git(repo, "show", f"{run['branch']}:tests/test_calc.py") + "\n"
        == CALC["tests/test_calc.py"]
    )
    assert git(repo, "ls-tree", "--name-only", f"{run['branch']}", "tests/") == "tests/test_calc.py"


def test_an_agent_moving_main_fails_the_run_and_main_stays_where_it_was_moved(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", CALC)
    git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    git(repo, "branch", "release")
    main_before = git(repo, "rev-parse", "main")
    parent = git(repo, "rev-parse", "main~1")
    log = tmp_path / "talk" / "agent.jsonl"
    # With the hooks installed, the agent's own ref updates run them too (release's with an
    # old value, which the hooks count as new work): they must not start another run.
    body = (
        "def git(*args):\n"
        "    return subprocess.run(['git', *args], capture_output=True, text=True,"
        " check=True).stdout.strip()\n"
        "record(main=git('rev-parse', 'main'), release=git('rev-parse', 'release'))\n"
        "git('update-ref', 'refs/heads/main', 'HEAD~1')\n"
        "git('update-ref', 'refs/heads/release', 'HEAD~1', git('rev-parse', 'release'))\n"
        f"{FIX}"
    )
    # Unconfined: sandboxed, a worktree's agent cannot move the person's refs at all
    # (tests/test_worktree_git.py); here the guard reports what it did.
    unconfined = 'mode = "off"\nunconfined_as_root = true\n'
    home = make_home(
        tmp_path / "home",
        agent_profile(log, body) + unconfined,
        {
            "calc": loop_text(
                repo,
                done_when=[CHECK],
                max_attempts=2,
                on_push=["main", "release"],
                isolation="worktree",
            )
        },
    )
    install(home)
    daemon = start_daemon(home)
    daemons.append(daemon)
    proc = loopd(home, "trigger", "calc", "--wait", timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr + daemon_log(home)
    run_id = proc.stdout.split()[0]
    hooks_log = home / "state" / "hooks.log"
    assert stop_daemon(daemon) == 0, daemon_log(home)
    (run,) = runs(home)

    assert run["id"] == run_id
    # Nothing is rewound: the refs stay where the agent put them, for a person to look at.
    assert git(repo, "rev-parse", "main") == git(repo, "rev-parse", "release") == parent
    assert main_before != parent
    (one,) = run["attempts"]  # the run ends at once: no second attempt
    assert one["checks_passed"] is True
    assert [(v["kind"], v["target"]) for v in one["violations"]] == [
        ("ref_moved", "refs/heads/main"),
        ("ref_moved", "refs/heads/release"),
    ]
    assert run["outcome"] == "escalated" and run["cause"] == "ref-violation"
    assert "refs/heads/main" in run["reason"]
    assert git(repo, "for-each-ref", "refs/loopd/") == ""
    moved = of_type(home, "ref_moved")
    assert {(e["ref"], e["was"], e["to"]) for e in moved} == {
        ("refs/heads/main", main_before, parent),
        ("refs/heads/release", main_before, parent),
    }
    assert [e["kind"] for e in of_type(home, "trigger", "trigger_skipped")] == ["manual"]
    assert not hooks_log.exists()


# ------------------------------------------------------------------------------ on_change
def test_on_change_starts_a_run_for_a_watched_path_and_not_for_an_ignored_one(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {**CALC, "src/app.py": "x = 1\n", ".gitignore": "node_modules/\n", "docs/a.md": "a\n"},
    )
    (repo / "src" / "node_modules" / "pkg").mkdir(parents=True)
    log = tmp_path / "talk" / "agent.jsonl"
    # The agent edits src/ in its worktree: that must not trigger the loop again.
    body = "record()\npathlib.Path('src/app.py').write_text('x = 2\\n')"
    home = make_home(
        tmp_path / "home",
        agent_profile(log, body),
        {"calc": loop_text(repo, on_change=["src/**"], debounce="300ms")},
    )
    daemon = start_daemon(home)
    daemons.append(daemon)
    (repo / "src" / "node_modules" / "pkg" / "index.js").write_text("ignored\n")
    (repo / "docs" / "a.md").write_text("not watched\n")
    (repo / "src" / "app.py").write_text("x = 3\n")
    (run,) = wait_for(lambda: finished_runs(home, 1), timeout=60, what="the change run")
    assert stop_daemon(daemon) == 0, daemon_log(home)

    assert run["trigger"]["kind"] == "change" and run["trigger"]["paths"] == ["src/app.py"]
    assert run["outcome"] == "succeeded", run["reason"]
    assert [e["type"] for e in of_type(home, "trigger", "trigger_merged")] == ["trigger"]
    assert len(records(log)) == 1

"""A landing's textual conflict: the run's one conflict attempt, or the person's escalation.

Real git repositories, a real `loopd once` (the local engine) and the home's Temporal finish
(tests/test_parity_conflict.py), a `command` agent in bubblewrap: it makes its change, waits
while the test moves `main` under it (the person changes the same lines), and, when it finds
conflict markers in its tree, resolves them or not as the test tells it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.home import Home
from tests.helpers import ROOT, git, loopd, make_home, make_repo, start_daemon, wait_for
from tests.helpers import events as all_events
from tests.test_landing_queue import landed_commits, once

# The agent: its first session edits; a session that finds the merge's markers keeps the
# prompt it got and resolves them (`resolve` says how: "both" keeps both sides, "theirs"
# the person's alone, "none" leaves the markers, "wait" waits for another word).
AGENT = """\
import os, pathlib, sys, time
talk = pathlib.Path({talk!r})
shared = pathlib.Path('shared.txt')
text = shared.read_text()
if '<<<<<<< ' in text:
    (talk / 'conflict-prompt').write_text(sys.stdin.read())
    (talk / 'conflict-pid').write_text(str(os.getpid()))
    while (talk / 'resolve').read_text() == 'wait': time.sleep(0.05)
    how, out, ours = (talk / 'resolve').read_text(), [], False
    for line in text.splitlines(True):
        if line.startswith(('<<<<<<< ', '=======', '>>>>>>> ')):
            ours = line.startswith('<<<<<<< ')
        elif how == 'both' or (how == 'theirs' and not ours):
            out.append(line)
    if how in ('both', 'theirs'):
        shared.write_text(''.join(out))
    sys.exit(0)
lines = text.splitlines(True)
lines[4] = 'a says five\\n'
shared.write_text(''.join(lines))
{extra}
(talk / 'started').write_text('')
while not (talk / 'go').exists(): time.sleep(0.05)
"""
BASE = {
    "shared.txt": "".join(f"line {n}\n" for n in range(1, 21)),
    ".github/workflows/ci.yml": "on: push\nrun: make test\n",
    "check.py": (
        "import pathlib\n"
        "lines = pathlib.Path('shared.txt').read_text().splitlines()\n"
        "assert any(line.startswith('a ') for line in lines), lines\n"
        "assert not any(line.startswith(('<<<<<<<', '>>>>>>>')) for line in lines), lines\n"
    ),
}
CI_EDIT = (
    "ci = pathlib.Path('.github/workflows/ci.yml')\n"
    "ci.write_text(ci.read_text().replace('make test', 'make test-a'))"
)


def conflict_home(tmp_path: Path, extra: str = "", **settings: Any) -> tuple[Home, Path, Path]:
    """A home with loop `a` landing by merge on the `main` of a new repository."""
    repo = make_repo(tmp_path / "repo", BASE)
    talk = tmp_path / "talk"
    talk.mkdir()
    loop: dict[str, Any] = {
        "repo": str(repo),
        "task": "Make line 5 of shared.txt a's.",
        "agent": "a",
        "done_when": ["python3 check.py"],
        "attempt_timeout": "120s",
        "stall_after": "60s",
        "max_nudges": 0,
        "max_attempts": 1,
        "land": "merge",
        **settings,
    }
    argv = [sys.executable, "-c", AGENT.format(talk=str(talk), extra=extra)]
    config = f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    config += f'\n[sandbox]\nwritable = ["{talk}"]\n'
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in loop.items())
    home = Home(make_home(tmp_path / "home", config, {"a": text}))
    assert not home.load().errors, home.load().errors
    return home, repo, talk


def person_edits(repo: Path, path: str, old: str, new: str) -> str:
    """The person changes the lines the run changed, on `main`; their commit."""
    file = repo / path
    file.write_text(file.read_text().replace(old, new))
    git(repo, "add", path)
    git(repo, "commit", "-q", "-m", f"person: {path}")
    return git(repo, "rev-parse", "main")


def run_once_under_conflict(home: Home, repo: Path, talk: Path, path: str, old: str) -> Any:
    """`loopd once a`, `main` moved into a conflict while its agent works; the run's record."""
    proc = once(home.root, "a")
    wait_for(lambda: (talk / "started").exists(), timeout=120, what="the agent's change")
    theirs = person_edits(repo, path, old, old.replace("line", "person's line").upper())
    (talk / "go").write_text("")
    out, _ = proc.communicate(timeout=300)
    (run,) = list(home.state().iter_runs())
    return run, theirs, out


def agents(talk: Path) -> list[int]:
    """The processes running this test's agent (its script names the test's folder)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if proc.name.isdigit() and str(talk).encode() in cmdline and b"loopd" not in cmdline:
            found.append(int(proc.name))
    return found


def run_events(home: Home, run_id: str) -> list[dict[str, Any]]:
    return [e for e in all_events(home.root) if e.get("run") == run_id]


def test_a_conflict_the_agent_resolves_lands_the_merge_its_checks_passed_on(
    tmp_path: Path,
) -> None:
    home, repo, talk = conflict_home(tmp_path, protect=["NOTES.md"])
    (talk / "resolve").write_text("both")
    # The person's side also changes a protected file: theirs, not the agent's doing.
    (repo / "NOTES.md").write_text("the person's notes\n")
    git(repo, "add", "NOTES.md")
    run, theirs, out = run_once_under_conflict(home, repo, talk, "shared.txt", "line 5\n")
    assert run.outcome == "succeeded" and run.landed, (out, run.landing)
    assert len(run.attempts) == 2
    first, second = run.attempts
    assert not first.conflict and second.conflict.startswith(f"main at {theirs[:12]}: shared.txt")
    # The prompt named the files, hunks and both sides.
    prompt = (talk / "conflict-prompt").read_text()
    assert "shared.txt: lines 5-" in prompt and theirs[:12] in prompt and run.id in prompt
    assert "Make line 5 of shared.txt a's." in prompt  # the task, for context
    # What landed: the agent's merge of the run's work and the person's commit (squashed
    # onto the person's, land_commits' default), the checks passed on a clean tree of
    # exactly its files.
    landed = run.landed_as
    assert git(repo, "rev-parse", "main") == landed
    assert git(repo, "rev-list", "--parents", "-n1", landed).split()[1:] == [theirs]
    text = git(repo, "show", "main:shared.txt")
    assert "a says five" in text and "PERSON'S LINE 5" in text and "<<<<<<<" not in text
    assert git(repo, "show", "main:NOTES.md") == "the person's notes"
    assert not second.violations
    events = run_events(home, run.id)
    kinds = [e["type"] for e in events]
    assert "conflict_attempt" in kinds
    (resolved,) = [e for e in events if e["type"] == "conflict_resolved"]
    parents = git(repo, "rev-list", "--parents", "-n1", resolved["commit"]).split()[1:]
    assert parents == [first.head_commit, theirs]
    checks = [e for e in events if e["type"] == "checks" and e["attempt"] == 2]
    assert checks and checks[-1]["passed"] is True
    tree = git(repo, "rev-parse", f"{landed}^{{tree}}")
    assert git(repo, "rev-parse", f"{second.head_commit}^{{tree}}") == tree
    assert run.verified_tree == tree
    assert not home.state().escalation_path(run.id).exists()
    shown = loopd(home.root, "show", run.id)
    assert shown.returncode == 0 and "conflict attempt" in " ".join(shown.stdout.split())


@pytest.mark.parametrize(
    ("how", "why_not"),
    [
        ("none", "conflict markers are left in shared.txt"),
        ("theirs", "the checks fail on the merge"),  # a's line is gone: check.py fails
    ],
)
def test_a_conflict_the_agent_cannot_resolve_is_one_escalation_naming_both_sides(
    tmp_path: Path, how: str, why_not: str
) -> None:
    home, repo, talk = conflict_home(tmp_path)
    (talk / "resolve").write_text(how)
    run, theirs, out = run_once_under_conflict(home, repo, talk, "shared.txt", "line 5\n")
    assert run.outcome == "succeeded" and not run.landed, out
    assert run.cause == "landing-conflict"
    assert len(run.attempts) == 2 and run.attempts[1].conflict
    why = run.landing
    assert "shared.txt (lines 5-" in why and run.id in why and theirs[:12] in why
    assert f"conflict attempt 2 did not resolve it: {why_not}" in why
    assert f"loopd land {run.id}" in why and f"loopd escalations resolve {run.id} --retry" in why
    escalation = home.state().escalation_path(run.id).read_text()
    assert theirs[:12] in escalation and "conflict attempt 2" in escalation
    escalations = home.state().escalation_path(run.id).parent
    assert [p.name for p in escalations.glob("*.md")] == [f"{run.id}.md"]
    assert git(repo, "rev-parse", "main") == theirs and landed_commits(repo, run.id) == []
    # The run's branch is back at the work that passed, for the person to merge.
    assert git(repo, "rev-parse", run.branch) == run.attempts[0].head_commit
    kinds = [e["type"] for e in run_events(home, run.id)]
    assert kinds.count("conflict_attempt") == 1 and "conflict_unresolved" in kinds


def test_a_conflict_in_a_guarded_path_goes_to_the_person_without_an_attempt(
    tmp_path: Path,
) -> None:
    home, repo, talk = conflict_home(tmp_path, CI_EDIT, land_allow=[".github/workflows/**"])
    (talk / "resolve").write_text("both")
    run, theirs, out = run_once_under_conflict(
        home, repo, talk, ".github/workflows/ci.yml", "make test"
    )
    assert run.outcome == "succeeded" and not run.landed, out
    assert run.cause == "landing-conflict" and len(run.attempts) == 1
    assert not (talk / "conflict-prompt").exists()  # the agent never saw it
    why = run.landing
    assert ".github/workflows/ci.yml" in why and "which no agent resolves" in why
    assert theirs[:12] in why and f"loopd land {run.id}" in why
    assert home.state().escalation_path(run.id).exists()
    kinds = [e["type"] for e in run_events(home, run.id)]
    assert "conflict_kept" in kinds and "conflict_attempt" not in kinds
    assert git(repo, "rev-parse", "main") == theirs


def test_a_daemon_killed_during_the_conflict_attempt_escalates_after_restart(
    tmp_path: Path,
) -> None:
    home, repo, talk = conflict_home(tmp_path)
    (talk / "resolve").write_text("wait")
    daemon = start_daemon(home.root)
    try:
        assert loopd(home.root, "trigger", "a").returncode == 0
        wait_for(lambda: (talk / "started").exists(), timeout=120, what="the agent's change")
        theirs = person_edits(repo, "shared.txt", "line 5\n", "PERSON'S LINE 5\n")
        (talk / "go").write_text("")
        pid_file = talk / "conflict-pid"
        wait_for(pid_file.exists, timeout=180, what="the conflict attempt's agent")
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(30)
        daemon = start_daemon(home.root)
        run = wait_for(
            lambda: next((r for r in home.state().iter_runs() if "event" in r.finish_done), None),
            timeout=180,
            what="the run finished after the restart",
        )
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
    assert not agents(talk)  # nothing of the conflict attempt is left running
    assert run.outcome == "succeeded" and not run.landed and run.cause == "landing-conflict"
    assert len(run.attempts) == 2 and run.attempts[1].interrupted  # given once, never again
    assert "had its one conflict attempt (attempt 2)" in run.landing
    assert theirs[:12] in run.landing and f"loopd land {run.id}" in run.landing
    assert home.state().escalation_path(run.id).exists()
    assert git(repo, "rev-parse", "main") == theirs
    kinds = [e["type"] for e in run_events(home, run.id)]
    assert kinds.count("conflict_attempt") == 1


# A stand-in for the `qwen` program (loopd's qwen adapter starts `qwen` from PATH): it speaks
# Qwen Code's stream-json, keeps each argv, resumes the session `--resume` names, and works
# as AGENT does with the prompt it is given as its last word.
FAKE_QWEN = """\
#!{python}
import json, pathlib, sys, uuid
talk = pathlib.Path({talk!r})
argv = sys.argv[1:]
with open(talk / 'argv.jsonl', 'a') as kept:
    kept.write(json.dumps(argv) + '\\n')
resumed = argv[argv.index('--resume') + 1] if '--resume' in argv else ''
session = resumed or 'session-' + uuid.uuid4().hex[:8]
print(json.dumps({{'type': 'system', 'subtype': 'init', 'session_id': session}}), flush=True)
sys.stdin = __import__('io').StringIO(argv[-1])
exec(compile({agent!r}, 'agent', 'exec'))
result = {{'type': 'result', 'subtype': 'success', 'is_error': False, 'result': 'Done.',
          'session_id': session, 'usage': {{'input_tokens': 10, 'output_tokens': 5}}}}
print(json.dumps(result), flush=True)
"""


def test_the_conflict_attempt_resumes_the_agents_own_session(tmp_path: Path) -> None:
    home, repo, talk = conflict_home(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    agent = AGENT.format(talk=str(talk), extra="")
    qwen = bin_dir / "qwen"
    qwen.write_text(FAKE_QWEN.format(python=sys.executable, talk=str(talk), agent=agent))
    qwen.chmod(0o755)
    config = home.root / "loopd.toml"
    profile = '[agents.a]\nadapter = "qwen"\nbase_url = "http://127.0.0.1:9/v1"\n'
    sandbox = config.read_text().split("[sandbox]", 1)[1]
    config.write_text(profile + "\n[sandbox]" + sandbox)
    (talk / "resolve").write_text("both")
    env = dict(os.environ)
    env.pop("LOOPD_HOME", None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "--home", str(home.root), "once", "a"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    wait_for(lambda: (talk / "started").exists(), timeout=120, what="the agent's change")
    theirs = person_edits(repo, "shared.txt", "line 5\n", "PERSON'S LINE 5\n")
    (talk / "go").write_text("")
    out, _ = proc.communicate(timeout=300)
    (run,) = list(home.state().iter_runs())
    assert run.landed, (out, run.landing)
    first, second = run.attempts
    assert second.conflict and first.session_id and second.session_id == first.session_id
    calls = [json.loads(line) for line in (talk / "argv.jsonl").read_text().splitlines()]
    assert len(calls) == 2 and "--resume" not in calls[0]
    assert calls[1][calls[1].index("--resume") + 1] == first.session_id
    assert "shared.txt: lines 5-" in calls[1][-1] and theirs[:12] in calls[1][-1]

"""The agent's words reach the person (issue 42, point 2): every escalation and its
notification quote the agent's last message (redacted, capped, terminal sequences
stripped); an agent that gives up (exits non-zero, or says it cannot go on) is nudged at most
once, then the run escalates with cause `agent-gave-up` and its words; a person's answer to an
agent's question is kept for the loop's later runs; `loopd escalations` lists the id to
resolve. Real `command` agents in real git repositories, loopd as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from daemon.agents.endings import gave_up_how, says_it_gave_up
from daemon.runparts.checks import ChecksResult, base_digests, run_check
from daemon.runs.sameoutput import unchanged_failure
from tests.helpers import loopd, make_home, make_repo
from tests.machines import Machine, command_agent, loop_toml
from tests.test_engines import machines
from tests.test_handoff_e2e import notified, notify_config
from tests.test_parity import on_both

__all__ = ["machines"]  # a fixture, imported for pytest

APP = {
    "app.py": "def add(a, b):\n    return a - b\n",
    "check.py": "import app\nassert app.add(2, 3) == 5, 'add(2, 3) is not 5'\n",
}
SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
# Gives up every time it is started: says so and exits 3, the bug left in place.
GIVES_UP = (
    "import pathlib, sys\n"
    "p = pathlib.Path('starts.txt'); p.write_text(p.read_text() + 'x' if p.exists() else 'x')\n"
    "print('I looked at app.py.')\n"
    f"print('With token {SECRET}\\x1b]0;pwned\\x07 I cannot figure this out; giving up.')\n"
    "sys.exit(3)\n"
)
# Works, exits 0, never fixes the bug: the checks still fail; it says what it did.
TRIES = (
    "import pathlib\n"
    "pathlib.Path('notes.txt').write_text('tried\\n')\n"
    "print('I rewrote notes.txt; add() still looks right to me.\\x1b[2J')\n"
)
ASKS = (
    "import pathlib, subprocess\n"
    "p = pathlib.Path('app.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    "subprocess.run(['loopd-tool', 'ask-person', '--question', 'Should add() accept strings?'])\n"
    "print('fixed add()')\n"
)


def _home(tmp_path: Path, agent: str, notify: str = "", **keys: object) -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "repo", APP)
    argv = [sys.executable, "-c", agent]
    config = f'[agents.fixer]\nadapter = "command"\ncommand = {json.dumps(argv)}\n' + notify
    settings: dict[str, object] = {
        "repo": str(repo),
        "task": "Make check.py pass.",
        "agent": "fixer",
        "done_when": ["python3 check.py"],
        "critic": "off",
        "max_attempts": 3,
        "max_nudges": 2,
        "stall_after": "300s",
        "attempt_timeout": "300s",
        **keys,
    }
    loop = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    return make_home(tmp_path / "home", config, {"app": loop}), repo


def _once(home: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = loopd(home, "once", "app", timeout=300)
    run_id = proc.stdout.split()[0]
    record = home / "state" / "runs" / run_id / "run.toml"
    assert record.is_file(), proc.stdout + proc.stderr
    return proc, tomllib.loads(record.read_text())


def test_an_agent_that_gives_up_is_nudged_once_then_escalates_with_its_words(
    tmp_path: Path,
) -> None:
    notify, out = notify_config(tmp_path, "http://127.0.0.1:9/unused")
    home, _ = _home(tmp_path, GIVES_UP, notify.split("webhook")[0])
    proc, run = _once(home)
    assert (run["outcome"], run["cause"]) == ("escalated", "agent-gave-up"), run
    assert len(run["attempts"]) == 1, "a run whose agent gave up went on to more attempts"
    assert run["attempts"][0]["nudges"] == 1, run["attempts"][0]
    assert "I cannot figure this out; giving up." in run["reason"], run["reason"]
    assert SECRET not in run["reason"], run["reason"]
    assert "exit 3" in run["reason"] or "exited 3" in run["reason"], run["reason"]
    escalation = (home / "state" / "escalations" / f"{run['id']}.md").read_text()
    assert "## The agent's last message" in escalation, escalation
    assert "I cannot figure this out; giving up." in escalation
    assert "## Last failure of the checks (attempt 1" in escalation
    assert "add(2, 3) is not 5" in escalation  # the checks' log, kept though unjudged
    assert SECRET not in escalation and "\x1b" not in escalation and "\x07" not in escalation
    sent = notified(out)
    assert len(sent) == 1, sent
    assert "I cannot figure this out; giving up." in sent[0][-1], sent
    assert SECRET not in json.dumps(sent) and "\\u001b" not in json.dumps(sent)


def test_every_escalation_quotes_the_agents_last_message(tmp_path: Path) -> None:
    notify, out = notify_config(tmp_path, "http://127.0.0.1:9/unused")
    home, _ = _home(tmp_path, TRIES, notify.split("webhook")[0], max_attempts=1, max_nudges=1)
    _, run = _once(home)
    assert (run["outcome"], run["cause"]) == ("escalated", "checks-failed"), run
    escalation = (home / "state" / "escalations" / f"{run['id']}.md").read_text()
    assert "## The agent's last message (attempt 1)" in escalation, escalation
    assert "> I rewrote notes.txt; add() still looks right to me." in escalation
    assert "\x1b" not in escalation
    (sent,) = notified(out)
    assert "add() still looks right to me" in sent[-1], sent


def test_an_answer_to_a_question_reaches_the_loops_later_runs(tmp_path: Path) -> None:
    home, _ = _home(tmp_path, ASKS)
    _, first = _once(home)
    assert first["outcome"] == "succeeded", first
    question = f"{first['id']}-q1"
    listed = loopd(home, "escalations")
    assert listed.returncode == 0, listed.stderr
    (line,) = [ln for ln in listed.stdout.splitlines() if "question" in ln]
    assert line.split()[0] == question, listed.stdout
    as_json = json.loads(loopd(home, "escalations", "--json").stdout)
    assert [e["id"] for e in as_json] == [question], as_json
    answer = "Yes: strings are concatenated, never converted."
    proc = loopd(home, "escalations", "resolve", question, "--note", answer)
    assert proc.returncode == 0, proc.stderr
    kept = (home / "state" / "answers" / "app.md").read_text()
    assert "Should add() accept strings?" in kept and answer in kept, kept
    # The next run of the loop is told.
    _, second = _once(home)
    prompt = (home / "state" / "runs" / second["id"] / "attempt-1" / "prompt.md").read_text()
    assert "# Answers from a person" in prompt, prompt
    assert "Should add() accept strings?" in prompt and answer in prompt, prompt


def test_both_engines_end_a_run_whose_agent_gave_up_alike(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    def setup(folder: Path, engine: str) -> Machine:
        root = folder / "machine"
        repo = make_repo(root / "src" / "app", APP)
        text = command_agent("a", GIVES_UP) + f'\n[limits]\nworktrees = "{root / "worktrees"}"\n'
        loop = loop_toml(
            repo,
            task="Make check.py pass.",
            agent="a",
            done_when=["python3 check.py"],
            critic="off",
            max_attempts=2,
        )
        home = make_home(root / "loopd-home", text + engine, {"calc": loop})
        return Machine("machine", root, home, repo)

    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc").returncode == 0
        return 1

    (run,) = on_both(tmp_path, temporal, machines, setup, scenario)
    assert (run["outcome"], run["cause"]) == ("escalated", "agent-gave-up"), run
    assert len(run["attempts"]) == 1 and run["attempts"][0]["nudges"] == 1, run
    assert "giving up" in run["reason"], run


# Point 1's last clause: a check whose output is the same before and after the agent's edits.
NEEDS_LIB = {
    "app.py": "def add(a, b):\n    return a - b\n",
    "check.py": "import app\nimport yaml_not_installed_here\nassert app.add(2, 3) == 5\n",
}
FIXES = (
    "import pathlib\n"
    "p = pathlib.Path('app.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    "print('fixed add()')\n"
)
# Writes the module the check lacks, in the wrong place: its work is in play, not the
# environment's, though the output stays the same.
MISPLACES = (
    "import pathlib\n"
    "pathlib.Path('lib').mkdir(exist_ok=True)\n"
    "pathlib.Path('lib/yaml_not_installed_here.py').write_text('')\n"
    "print('wrote the module')\n"
)


def _home_with(tmp_path: Path, files: dict[str, str], agent: str) -> Path:
    repo = make_repo(tmp_path / "repo", files)
    argv = [sys.executable, "-c", agent]
    config = f'[agents.fixer]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    settings = {
        "repo": str(repo),
        "task": "Make check.py pass.",
        "agent": "fixer",
        "done_when": ["python3 check.py"],
        "critic": "off",
        "max_attempts": 2,
        "max_nudges": 2,
    }
    loop = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    return make_home(tmp_path / "home", config, {"app": loop})


def test_the_same_environmental_failure_after_the_agents_edits_ends_the_run_unnudged(
    tmp_path: Path,
) -> None:
    home = _home_with(tmp_path, NEEDS_LIB, FIXES)
    _, run = _once(home)
    assert (run["outcome"], run["cause"]) == ("escalated", "environment"), run
    (attempt,) = run["attempts"]
    assert attempt["nudges"] == 0, attempt
    assert "its output is the same before and after the agent's edits (app.py)" in run["reason"]
    assert "No module named 'yaml_not_installed_here'" in run["reason"], run["reason"]


def test_the_same_output_is_the_agents_when_its_work_is_in_play(tmp_path: Path) -> None:
    # The module the check misses is one the agent wrote (in the wrong place).
    home = _home_with(tmp_path / "a", NEEDS_LIB, MISPLACES)
    _, run = _once(home)
    assert run["cause"] == "checks-failed", run
    assert run["attempts"][0]["nudges"] == 2, run["attempts"][0]
    # A real bug that fails the same way (an assertion) after edits elsewhere.
    home = _home_with(tmp_path / "b", APP, TRIES)
    _, run = _once(home)
    assert run["cause"] == "checks-failed", run
    assert run["attempts"][0]["nudges"] == 2, run["attempts"][0]


def test_both_engines_name_the_same_environmental_failure_alike(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    def setup(folder: Path, engine: str) -> Machine:
        root = folder / "machine"
        repo = make_repo(root / "src" / "app", NEEDS_LIB)
        text = command_agent("a", FIXES) + f'\n[limits]\nworktrees = "{root / "worktrees"}"\n'
        loop = loop_toml(
            repo,
            task="Make check.py pass.",
            agent="a",
            done_when=["python3 check.py"],
            critic="off",
            max_attempts=2,
        )
        home = make_home(root / "loopd-home", text + engine, {"calc": loop})
        return Machine("machine", root, home, repo)

    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc").returncode == 0
        return 1

    (run,) = on_both(tmp_path, temporal, machines, setup, scenario)
    assert (run["outcome"], run["cause"]) == ("escalated", "environment"), run
    assert len(run["attempts"]) == 1 and run["attempts"][0]["nudges"] == 0, run
    assert "the same before and after the agent's edits" in run["reason"], run


def test_what_counts_as_giving_up_is_narrow() -> None:
    said = [
        "I cannot figure this out; giving up.",
        "I give up.",
        "Tried three fixes.\n\nI cannot continue.",
        "I'm giving up on this.",
        "I can't proceed with the task.",
    ]
    not_said = [
        "I am giving up on this approach and trying another one.",
        "I give up trying to use sed, and edited the file by hand.",
        "Rather than giving up, I fixed it.",
        "The server kept giving up connections. Fixed the retry.",
        "Fixed add(). I did not give up.",
        "I cannot continue without your input on the schema?",
        "```\ngiving up\n```\nDone: add() fixed.",
    ]
    assert [t for t in said if not says_it_gave_up(t)] == []
    assert [t for t in not_said if says_it_gave_up(t)] == []
    assert gave_up_how(3, False, "no luck") == "exit 3: no luck"
    assert gave_up_how(127, False, "sh: x: not found") == ""  # agent-failed's, not this
    assert gave_up_how(1, True, "killed by loopd") == ""
    assert gave_up_how(0, False, "All done.") == ""


def test_the_same_output_rule_on_real_check_outputs(tmp_path: Path) -> None:
    (tmp_path / "check.py").write_text("import app\nimport not_here_xyz\n")
    (tmp_path / "app.py").write_text("x = 1\n")
    (tmp_path / "assert.py").write_text("assert 1 == 2, 'still wrong'\n")
    trees = (str(tmp_path),)

    def ran(command: str) -> ChecksResult:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
        return ChecksResult([run_check(command, tmp_path, 60, env)])

    missing, wrong = ran("python3 check.py"), ran("python3 assert.py")
    assert not missing.passed and not wrong.passed
    base = base_digests(missing, trees)
    found = unchanged_failure(missing, base, ["app.py"], trees)
    assert "No module named 'not_here_xyz'" in found, found
    assert unchanged_failure(missing, base, [], trees) == ""  # the agent changed nothing
    assert unchanged_failure(missing, base, ["lib/not_here_xyz.py"], trees) == ""  # its work
    assert unchanged_failure(missing, base, ["check.py"], trees) == ""  # the check names it
    assert unchanged_failure(wrong, base_digests(wrong, trees), ["app.py"], trees) == ""
    # Output that differs from the base's is the agent's, whatever it says.
    other = ChecksResult(
        [run_check("python3 check.py; echo more; exit 1", tmp_path, 60, {"PATH": "/usr/bin:/bin"})]
    )
    assert not other.passed and unchanged_failure(other, base, ["app.py"], trees) == ""


def test_both_engines_give_a_later_run_the_persons_answer(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    answer = "Yes: strings are concatenated."

    def setup(folder: Path, engine: str) -> Machine:
        root = folder / "machine"
        repo = make_repo(root / "src" / "app", APP)
        text = command_agent("a", ASKS) + f'\n[limits]\nworktrees = "{root / "worktrees"}"\n'
        loop = loop_toml(
            repo,
            task="Make check.py pass.",
            agent="a",
            done_when=["python3 check.py"],
            critic="off",
            max_attempts=1,
        )
        home = make_home(root / "loopd-home", text + engine, {"calc": loop})
        return Machine("machine", root, home, repo)

    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc", "--wait", timeout=300).returncode == 0
        (first,) = machine.runs()
        listed = machine.loopd("escalations").stdout.split()
        assert f"{first['id']}-q1" in listed, listed
        done = machine.loopd("escalations", "resolve", f"{first['id']}-q1", "--note", answer)
        assert done.returncode == 0, done.stdout + done.stderr
        assert machine.loopd("trigger", "calc", "--wait", timeout=300).returncode == 0
        return 2

    on_both(tmp_path, temporal, machines, setup, scenario)
    for machine in machines:
        second = max(run["id"] for run in machine.runs())
        prompt = machine.home / "state" / "runs" / second / "attempt-1" / "prompt.md"
        text = prompt.read_text()
        assert "# Answers from a person" in text and answer in text, (machine.root, text)
        assert "Should add() accept strings?" in text

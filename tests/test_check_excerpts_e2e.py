"""Issue 36, point 2: a check that prints a lot before and after its failure.

The nudge the agent receives, the critic's evidence and the escalation each keep the first
failing lines, the lines that name failures and the last lines, with a marker of what was
cut between them, within their budgets (the nudge within `prompt_cap`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import loopd, make_home, make_repo, talk
from tests.machines import Machine, engine_toml
from tests.model_server import ScriptedModelServer

FAILED = "FAILED tests/test_calc.py::test_add - assert add(2, 3) == 5"
ASSERT = "E       assert -1 == 5"
HEADER = "platform linux -- Python 3.11.9, pytest-8.3.3 (the run's header)"
SUMMARY = "=========== 1 failed, 60000 passed in 3.21s ==========="
CHECK = """\
import sys
print(HEADER)
for i in range(BEFORE // 44):
    print(f"tests/test_load.py::test_case_{i:06d} PASSED")
print(FAILED)
print(ASSERT)
for i in range(AFTER // 44):
    print(f"tests/test_more.py::test_case_{i:06d} PASSED")
print(SUMMARY)
sys.exit(1)
"""
# Records every prompt it receives (the nudge comes as a whole new prompt) and stops.
AGENT = """\
import pathlib, sys
prompt = sys.stdin.read()
n = len(list(pathlib.Path(sys.argv[1]).glob("prompt-*.md")))
pathlib.Path(sys.argv[1], f"prompt-{n}.md").write_text(prompt)
print("I looked at it and stopped.")
"""
PROMPT_CAP = 24_000
CRITIC = {"score": 2, "verdict": "The checks fail.", "unsupported_claims": [], "feedback": "x"}


def check_script(before: int, after: int) -> str:
    script = CHECK.replace("BEFORE", str(before)).replace("AFTER", str(after))
    for name in ("HEADER", "FAILED", "ASSERT", "SUMMARY"):
        script = script.replace(f"print({name})", f"print({globals()[name]!r})")
    return script


def make_case(
    tmp_path: Path, server: ScriptedModelServer, before: int, after: int, engine: str = ""
) -> tuple[Path, Path]:
    """A home whose loop's check prints `before` and `after` bytes around its failure, and
    the folder where its agent leaves each prompt it receives."""
    server.add({"json": CRITIC}, name="critic_verdict")
    server.default = {"status": 404, "message": "not scripted in this test"}
    prompts, sandbox = talk(tmp_path)
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    repo = make_repo(tmp_path / "repo", {"check.py": check_script(before, after)})
    argv = [sys.executable, str(script), str(prompts)]
    config = (
        f'[verifier]\nbase_url = "{server.base_url}"\nmodel = "critic-model"\n'
        'timeout = "20s"\npending_limit = "30s"\n\n'
        f'[agents.idle]\nadapter = "command"\ncommand = {json.dumps(argv)}\n\n'
        f'[limits]\nprompt_cap = "{PROMPT_CAP // 1000}KB"\n'
        f'worktrees = "{tmp_path / "worktrees"}"\n{sandbox}\n{engine}'
    )
    fields = {
        "repo": str(repo),
        "task": "Make check.py pass.",
        "agent": "idle",
        "done_when": ["python3 check.py"],
        "attempt_timeout": "120s",
        "stall_after": "60s",
        "max_attempts": 1,
        "max_nudges": 1,
    }
    loop = "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())
    return make_home(tmp_path / "home", config, {"calc": loop}), prompts


def assert_the_failure_is_kept(
    home: Path, prompts: Path, server: ScriptedModelServer, run_id: str
) -> None:
    """In the nudge the agent received, the critic's checks.log and the escalation."""
    # The nudge, as the agent's second process received it: the whole prompt, nudge last.
    nudged = (prompts / "prompt-1.md").read_text()
    nudge = nudged.split("# Nudge", 1)[1]
    for line in (FAILED, ASSERT, SUMMARY):
        assert line in nudge, line
    assert nudge.index(FAILED) < nudge.index(SUMMARY)
    assert "cut ...]" in nudge.split(ASSERT, 1)[1].split(SUMMARY, 1)[0]  # a marker between
    assert len(nudged.encode()) <= PROMPT_CAP

    # The critic's evidence: its part of checks.log (the transcript's nudge aside).
    (request,) = server.chat_requests("critic_verdict")
    critic = "\n".join(str(m.get("content")) for m in request["messages"])
    checks = critic.split("(checks.log)\n", 1)[1].split("\n# ", 1)[0]
    for line in (FAILED, ASSERT, SUMMARY):
        assert line in checks, line

    # The person's escalation.
    escalation = (home / "state" / "escalations" / f"{run_id}.md").read_text()
    failure = escalation.split("## Last failure of the checks", 1)[1]
    for line in (FAILED, ASSERT, SUMMARY):
        assert line in failure, line
    assert failure.index(FAILED) < failure.index(SUMMARY)


@pytest.mark.parametrize(
    ("before", "after"),
    [(400_000, 400_000), (600_000, 2_200_000)],
    ids=["hundreds-of-kb-each-side", "more-after-than-loopd-keeps-whole"],
)
def test_the_failure_reaches_the_agent_the_critic_and_the_person(
    tmp_path: Path, model_server: ScriptedModelServer, before: int, after: int
) -> None:
    home, prompts = make_case(tmp_path, model_server, before, after)
    proc = loopd(home, "once", "calc", "--reason", "test", timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert_the_failure_is_kept(home, prompts, model_server, proc.stdout.splitlines()[0])


@pytest.mark.parametrize("kind", ["local", "temporal"])
def test_both_engines_keep_the_failure(
    tmp_path: Path, model_server: ScriptedModelServer, kind: str, request: pytest.FixtureRequest
) -> None:
    """`loopd run` and a trigger on each engine (Temporal: the home's own worker)."""
    engine = ""
    if kind == "temporal":
        server, namespace = request.getfixturevalue("temporal")
        engine = engine_toml(server.address, namespace)
    home, prompts = make_case(tmp_path, model_server, 600_000, 2_200_000, engine)
    machine = Machine("machine", tmp_path, home, tmp_path / "repo")
    machine.start("run")
    try:
        proc = machine.loopd("trigger", "calc", "--wait", timeout=300)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert_the_failure_is_kept(home, prompts, model_server, proc.stdout.splitlines()[0])
    finally:
        assert machine.stop() == 0


def test_a_worker_sends_its_home_the_lines_of_checks_log_that_name_the_failure(
    tmp_path: Path,
) -> None:
    """The Temporal engine: the home's checks.log (escalation, critic) holds the failure."""
    from daemon.engine.temporal.workerside import LOG_WHOLE, _log_file

    log = tmp_path / "checks.log"
    log.write_text(
        "$ python3 check.py\n" + check_script_output(300_000, 300_000) + "[exit 1 after 3.2s]\n\n"
    )
    sent = _log_file(log)
    text = sent.text()
    assert sum(len(line) + 1 for line in sent.lines.values()) <= LOG_WHOLE
    lines = text.split("\n")
    for wanted in (FAILED, ASSERT, SUMMARY, "$ python3 check.py", "[exit 1 after 3.2s]"):
        assert wanted in lines, wanted
    # At its own line number, as the worker's file has it.
    number = log.read_text().split("\n").index(FAILED) + 1
    assert sent.lines[number] == FAILED


def check_script_output(before: int, after: int) -> str:
    """What check_script prints."""
    passing = "".join(
        f"tests/test_load.py::test_case_{i:06d} PASSED\n" for i in range(before // 44)
    )
    more = "".join(f"tests/test_more.py::test_case_{i:06d} PASSED\n" for i in range(after // 44))
    return f"{HEADER}\n{passing}{FAILED}\n{ASSERT}\n{more}{SUMMARY}\n"

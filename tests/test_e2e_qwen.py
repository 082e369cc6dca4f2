"""End to end with the real Qwen Code CLI: `loopd once` on a real repository.

Each scenario starts a scripted OpenAI-compatible server (tests/model_server.py), points an
agent profile `adapter = "qwen"` at it, and runs `loopd once` as a subprocess. The real
`qwen` process does the work: its write tool edits the run's worktree, its stream goes into
the transcript, loopd watches it for stalls and nudges it with `--resume SESSION_ID`.

The scripts are callables over the request rather than fixed lists: Qwen Code sends requests
of its own (a memory extraction subagent after a session, with its own system prompt), so a
reply is chosen from what the request is: the agent's own turn or not, after a tool result
or not, before or after the nudge.

Qwen Code is found at $LOOPD_QWEN_BIN, `<repository>/node_modules/.bin/qwen` (where `.ci/run`
installs the pinned `@qwen-code/qwen-code@0.24.4`), or on PATH.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.agent_programs import find_program
from tests.helpers import git, loopd, make_home, make_repo, transcript_text
from tests.model_server import ScriptedModelServer, Spec
from tests.sandboxing import require_bwrap

QWEN_PACKAGE = "@qwen-code/qwen-code@0.24.4"


def find_qwen() -> Path | None:
    """The qwen executable: $LOOPD_QWEN_BIN, the repository's node_modules, or PATH."""
    return find_program("qwen", "LOOPD_QWEN_BIN")


QWEN = find_qwen()

pytestmark = pytest.mark.skipif(
    QWEN is None or shutil.which("node") is None,
    reason=(
        "the real qwen CLI is needed: `npm install --no-save "
        f"{QWEN_PACKAGE}` in the repository root (as .ci/run does), or put `qwen` on PATH, "
        "or set LOOPD_QWEN_BIN to it; node must be on PATH"
    ),
)

LOOP = "fix"
TASK = "Fix add() in calc.py so that check.py passes. Do not change check.py."
NUDGE = "loopd nudge: continue the task. If something blocks you, say exactly what."
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
CHECK = (
    "from calc import add\n\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\nprint('ok')\n"
)
# Long enough that qwen's start is not a stall: 2-4 s of silence on a quiet 2-core machine,
# 12 s seen in CI under the whole suite's load (a stall at 10 s killed it before its first
# request, and the test failed).
STALL_AFTER = 25
QUIET = "Nothing durable to remember from this session."
# Qwen Code's own system prompt opens with this; its side requests (memory extraction) do not.
AGENT_PROMPT = "You are Qwen Code"
WORKDIR = re.compile(r"I'm currently working in the directory: (\S+)")


# --- reading what qwen sent ------------------------------------------------------------------


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


@dataclass
class Turn:
    """One chat request from qwen, read for what a scripted model needs to decide."""

    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [m for m in self.body.get("messages") or [] if isinstance(m, dict)]

    @property
    def is_agent(self) -> bool:
        """The agent's own conversation, not one of qwen's side requests."""
        system = [text_of(m) for m in self.messages if m.get("role") == "system"]
        return bool(self.body.get("tools")) and any(s.startswith(AGENT_PROMPT) for s in system)

    @property
    def after_tool(self) -> bool:
        return bool(self.messages) and self.messages[-1].get("role") == "tool"

    @property
    def answered(self) -> str:
        """The call id whose tool result ends the conversation, or "" after any other message."""
        return self.messages[-1].get("tool_call_id", "") if self.after_tool else ""

    @property
    def nudged(self) -> bool:
        return any(NUDGE in text_of(m) for m in self.messages if m.get("role") == "user")

    @property
    def workdir(self) -> str:
        for message in self.messages:
            match = WORKDIR.search(text_of(message))
            if match:
                return match.group(1)
        raise AssertionError("qwen did not say its working directory")

    def has_task(self) -> bool:
        return any(TASK in text_of(m) for m in self.messages if m.get("role") == "user")

    def tool_call_ids(self) -> list[str]:
        return [
            call.get("id", "")
            for m in self.messages
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
        ]

    def tool_result_ids(self) -> list[str]:
        return [m.get("tool_call_id", "") for m in self.messages if m.get("role") == "tool"]


def read_calc(turn: Turn, call_id: str) -> Spec:
    """A read_file call on calc.py: qwen will not overwrite a file it has not read."""
    path = f"{turn.workdir}/calc.py"
    return {"tool_calls": [{"name": "read_file", "id": call_id, "arguments": {"file_path": path}}]}


def write_fix(turn: Turn, call_id: str) -> Spec:
    """A write_file tool call that fixes calc.py (qwen's write tool wants an absolute path)."""
    path = f"{turn.workdir}/calc.py"
    return {
        "text": "I will fix add() in calc.py.",
        "tool_calls": [
            {
                "name": "write_file",
                "id": call_id,
                "arguments": {"file_path": path, "content": FIXED},
            }
        ],
    }


def same_shell_call(command: str) -> Callable[[Turn], Spec]:
    """An agent that runs one shell command again and again (a new call id each time)."""
    count = iter(range(1, 1_000_000))

    def decide(turn: Turn) -> Spec:
        call = {"command": command, "description": "look again"}
        return {
            "tool_calls": [
                {"name": "run_shell_command", "id": f"call_loop_{next(count)}", "arguments": call}
            ]
        }

    return decide


def agent_script(decide: Callable[[Turn], Spec]) -> Callable[[dict[str, Any]], Spec]:
    """A server script: the agent's turns go to `decide`, qwen's side requests get a quiet text."""

    def reply(body: dict[str, Any]) -> Spec:
        turn = Turn(body)
        return decide(turn) if turn.is_agent else QUIET

    return reply


def agent_turns(server: ScriptedModelServer) -> list[Turn]:
    return [t for t in map(Turn, server.chat_requests()) if t.is_agent]


# --- one run through `loopd once` ------------------------------------------------------------


@dataclass
class Outcome:
    """What one `loopd once` left behind."""

    exit_code: int
    stdout: str
    stderr: str
    run_id: str
    run: dict[str, Any]
    home: Path
    repo: Path

    @property
    def run_dir(self) -> Path:
        return self.home / "state" / "runs" / self.run_id

    @property
    def attempt(self) -> dict[str, Any]:
        assert len(self.run["attempts"]) == 1, self.run["attempts"]
        return self.run["attempts"][0]

    def transcript(self, n: int = 1) -> list[dict[str, Any]]:
        text = transcript_text(self.run_dir / f"attempt-{n}")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        lines = (self.home / "state" / "events.jsonl").read_text().splitlines()
        events = [json.loads(line) for line in lines if line.strip()]
        return [
            e
            for e in events
            if e.get("run") == self.run_id and (type_ is None or e.get("type") == type_)
        ]

    def on_branch(self, path: str) -> str:
        return git(self.repo, "show", f"{self.run['branch']}:{path}") + "\n"

    def explain(self) -> str:
        return f"exit {self.exit_code}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr[-3000:]}"


def run_loop(tmp_path: Path, server: ScriptedModelServer, **loop: Any) -> Outcome:
    """`loopd once fix` on a fresh repository whose add() is broken, with qwen on `server`."""
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY, "check.py": CHECK})
    profile = {"adapter": "qwen", "model": "qwen3-coder-test", "base_url": server.base_url}
    fields = {
        "repo": str(repo),
        "task": TASK,
        "agent": "qwen",
        "done_when": [f"{shlex.quote(sys.executable)} check.py"],
        "check_timeout": "60s",
        "protect": ["check.py"],
        "max_attempts": 1,
        # Room for three starts of qwen (up to 15 s each in CI under the suite's load) and a
        # silence stall: a passing test never waits for it.
        "attempt_timeout": "180s",
        "stall_after": "60s",
        "max_nudges": 2,
        "nudge": NUDGE,
        **loop,
    }
    home = make_home(
        tmp_path / "home",
        tomli_w.dumps({"agents": {"qwen": profile}}),
        {LOOP: tomli_w.dumps(fields)},
    )
    # loopd starts `qwen` from PATH, as a user's daemon would.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    assert QWEN is not None
    (bin_dir / "qwen").symlink_to(QWEN.resolve())
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = loopd(home, "once", LOOP, timeout=300, env=env)
    lines = proc.stdout.splitlines()
    assert lines, f"loopd once printed no run id\n{proc.stderr[-3000:]}"
    run_id = lines[0].strip()
    run = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    return Outcome(proc.returncode, proc.stdout, proc.stderr, run_id, run, home, repo)


def stdout_events(outcome: Outcome, type_: str) -> list[dict[str, Any]]:
    return [e for e in outcome.transcript() if e["stream"] == "stdout" and e["type"] == type_]


def loopd_lines(outcome: Outcome, type_: str, **match: Any) -> list[dict[str, Any]]:
    return [
        e
        for e in outcome.transcript()
        if e["stream"] == "loopd"
        and e["type"] == type_
        and all(e.get(k) == v for k, v in match.items())
    ]


def assert_checks_pass_with_the_fix(outcome: Outcome) -> None:
    assert outcome.exit_code == 0, outcome.explain()
    assert outcome.run["outcome"] == "succeeded", outcome.run.get("reason")
    assert outcome.attempt["checks_passed"] is True
    assert outcome.on_branch("calc.py") == FIXED
    assert outcome.on_branch("check.py") == CHECK
    assert (outcome.repo / "calc.py").read_text() == BUGGY  # the user's checkout is untouched
    checks_log = (outcome.run_dir / "attempt-1" / "checks.log").read_text()
    assert re.search(r"^ok$", checks_log, re.MULTILINE), checks_log
    assert "+    return a + b" in (outcome.run_dir / "attempt-1" / "diff.patch").read_text()


def assert_resumed(outcome: Outcome, server: ScriptedModelServer, earlier_call: str) -> None:
    """The nudge went to the same session: `--resume ID`, and the conversation carried over."""
    session = outcome.attempt["session_id"]
    assert session
    sessions = {e["session_id"] for e in stdout_events(outcome, "session")}
    assert sessions == {session}, "the nudged process reported another session"
    starts = loopd_lines(outcome, "process", event="started")
    assert len(starts) == outcome.attempt["nudges"] + 1
    assert "--resume" not in shlex.split(starts[0]["argv"])
    for start in starts[1:]:
        argv = shlex.split(start["argv"])
        assert argv[argv.index("--resume") + 1] == session
        assert argv[-1] == NUDGE or argv[-1].startswith(NUDGE)
    nudged = [t for t in agent_turns(server) if t.nudged]
    assert nudged, "no request carried the nudge"
    resumed = nudged[0]
    assert resumed.has_task(), "the resumed request lost the original task"
    assert earlier_call in resumed.tool_call_ids(), "the resumed request lost the earlier work"
    assert earlier_call in resumed.tool_result_ids(), "the resumed request lost a tool result"


# --- the scenarios -------------------------------------------------------------------------


def test_agent_writes_the_fix_and_the_checks_pass(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    def decide(turn: Turn) -> Spec:
        if turn.answered == "call_fix_1":
            return "Fixed add() in calc.py: it returns a + b now."
        if turn.answered == "call_read_1":
            return write_fix(turn, "call_fix_1")
        return read_calc(turn, "call_read_1")

    model_server.script(agent_script(decide))
    outcome = run_loop(tmp_path, model_server)

    assert_checks_pass_with_the_fix(outcome)
    attempt = outcome.attempt
    assert attempt["nudges"] == 0 and attempt.get("stalls", []) == []
    assert attempt["exit_code"] == 0
    assert attempt["summary"] == "Fixed add() in calc.py: it returns a + b now."
    assert outcome.events("stall") == [] and outcome.events("nudge") == []
    # The write went through qwen's own tool, and its result went back to the model.
    calls = stdout_events(outcome, "tool_call")
    assert [(c["tool"], c["call_id"]) for c in calls] == [
        ("read_file", "call_read_1"),
        ("write_file", "call_fix_1"),
    ]
    assert calls[1]["arguments"]["content"] == FIXED
    results = stdout_events(outcome, "tool_result")
    assert [r["call_id"] for r in results] == ["call_read_1", "call_fix_1"]
    assert not any(r.get("is_error") for r in results)
    assert "return a - b" in results[0]["output"]  # the model saw the file as it was
    turns = agent_turns(model_server)
    assert turns[0].has_task() and turns[0].body["model"] == "qwen3-coder-test"
    assert any("call_fix_1" in t.tool_result_ids() for t in turns)
    assert [e["outcome"] for e in outcome.events("run_finished")] == ["succeeded"]
    assert outcome.run["tokens"] > 0 and outcome.attempt["tokens"] == outcome.run["tokens"]
    # All of that inside bubblewrap, as every run here gets it (CI requires it).
    require_bwrap()
    assert [e["in_force"] for e in outcome.events("sandbox")] == ["bwrap"]


def test_server_stops_answering_the_stall_is_nudged_and_the_session_finishes(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    def decide(turn: Turn) -> Spec:
        if turn.nudged:
            return "Back again: add() in calc.py is fixed and check.py passes."
        if turn.answered == "call_fix_1":
            # The server stops answering mid-session; the hang ends when the server stops.
            return {"hang": 600, "text": "too late"}
        if turn.answered == "call_read_1":
            return write_fix(turn, "call_fix_1")
        return read_calc(turn, "call_read_1")

    model_server.script(agent_script(decide))
    outcome = run_loop(tmp_path, model_server, stall_after=f"{STALL_AFTER}s", max_nudges=2)

    assert_checks_pass_with_the_fix(outcome)
    attempt = outcome.attempt
    assert [s["kind"] for s in attempt["stalls"]] == ["silence"]
    assert attempt["nudges"] == 1
    assert attempt["exit_code"] == 0  # the resumed session ended by itself
    assert attempt["summary"] == "Back again: add() in calc.py is fixed and check.py passes."
    assert [e["kind"] for e in outcome.events("stall")] == ["silence"]
    assert [(e["n"], e["kind"]) for e in outcome.events("nudge")] == [(1, "silence")]
    # The hung process was killed by loopd before the session was resumed.
    exits = loopd_lines(outcome, "process", event="exited")
    assert [e["reason"] for e in exits] == ["stall", "exited"]
    # The supervisor's own line says how long the agent was silent.
    silent = [s for s in loopd_lines(outcome, "stall", kind="silence") if "silent_seconds" in s]
    assert len(silent) == 1 and silent[0]["silent_seconds"] >= STALL_AFTER
    assert_resumed(outcome, model_server, "call_fix_1")


def test_agent_ends_on_a_question_is_nudged_and_finishes(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    question = "I found the bug in add(). Should I fix calc.py, or would you rather rewrite it?"

    def decide(turn: Turn) -> Spec:
        if not turn.nudged:
            # A look at the file, then a question instead of the fix.
            return question if turn.answered == "call_read_1" else read_calc(turn, "call_read_1")
        if turn.answered == "call_fix_2":
            return "Fixed add() in calc.py; check.py passes."
        if turn.answered == "call_read_2":
            return write_fix(turn, "call_fix_2")
        # A resumed process reads again before it overwrites (qwen's rule for its write tool).
        return read_calc(turn, "call_read_2")

    model_server.script(agent_script(decide))
    outcome = run_loop(tmp_path, model_server, max_nudges=2)

    assert_checks_pass_with_the_fix(outcome)
    attempt = outcome.attempt
    assert [s["kind"] for s in attempt["stalls"]] == ["question"]
    assert question in attempt["stalls"][0]["detail"]
    assert attempt["nudges"] == 1
    assert attempt["summary"] == "Fixed add() in calc.py; check.py passes."
    assert [e["kind"] for e in outcome.events("stall")] == ["question"]
    assert [(e["n"], e["kind"]) for e in outcome.events("nudge")] == [(1, "question")]
    exits = loopd_lines(outcome, "process", event="exited")
    assert [(e["reason"], e["exit_code"]) for e in exits] == [("exited", 0), ("exited", 0)]
    # The fix came only after the nudge: the first session wrote nothing.
    calls = stdout_events(outcome, "tool_call")
    assert [(c["tool"], c["call_id"]) for c in calls] == [
        ("read_file", "call_read_1"),
        ("read_file", "call_read_2"),
        ("write_file", "call_fix_2"),
    ]
    assert_resumed(outcome, model_server, "call_read_1")


def test_agent_repeating_one_tool_call_is_stopped(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    # The same command with the same arguments, whatever happens, nudge or not. (Not a git
    # command: a git killed mid-run leaves index.lock behind, see the test after this one.)
    model_server.script(agent_script(same_shell_call("cat calc.py")))
    outcome = run_loop(tmp_path, model_server, max_nudges=1)

    assert outcome.exit_code == 1, outcome.explain()
    assert outcome.run["outcome"] == "escalated"
    attempt = outcome.attempt
    assert [s["kind"] for s in attempt["stalls"]] == ["repeated_tool_call"] * 2
    assert attempt["nudges"] == 1
    assert attempt["timed_out"] is False  # stopped by the stall, not by attempt_timeout
    assert attempt["checks_passed"] is False
    assert [e["kind"] for e in outcome.events("stall")] == ["repeated_tool_call"] * 2
    assert [(e["n"], e["kind"]) for e in outcome.events("nudge")] == [(1, "repeated_tool_call")]
    # Each session was killed by loopd after its third identical call, not ended by qwen.
    exits = loopd_lines(outcome, "process", event="exited")
    assert [e["reason"] for e in exits] == ["stall", "stall"]
    stalls = [s for s in loopd_lines(outcome, "stall", kind="repeated_tool_call") if "tool" in s]
    assert len(stalls) == 2 and all(s["tool"] == "run_shell_command" for s in stalls)
    assert all("cat calc.py" in s["arguments"] for s in stalls)
    calls = stdout_events(outcome, "tool_call")
    assert {c["tool"] for c in calls} == {"run_shell_command"}
    assert 6 <= len(calls) <= 10, [c["call_id"] for c in calls]
    # It changed nothing: its branch is deleted as the run ends.
    deleted = outcome.run["branch_deleted"]
    assert outcome.run["branch"] == "" and git(outcome.repo, "branch", "--list", deleted) == ""
    assert [e["branch"] for e in outcome.events("branch_deleted")] == [deleted]
    assert_resumed(outcome, model_server, "call_loop_1")


def test_a_git_lock_left_by_the_stopped_agent_does_not_lose_the_attempt(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    # What a `git status` killed with the agent's tree leaves behind (seen in about one run of
    # five when the repeated command was `git status`), made certain.
    lock = 'touch "$(git rev-parse --git-path index.lock)"'
    model_server.script(agent_script(same_shell_call(lock)))
    outcome = run_loop(tmp_path, model_server, max_nudges=0)

    assert [s["kind"] for s in outcome.attempt["stalls"]] == ["repeated_tool_call"]
    assert outcome.events("run_error") == [], outcome.run["reason"]
    assert outcome.run["outcome"] == "escalated"  # the checks fail; the attempt was judged
    assert outcome.attempt["checks_passed"] is False


def test_a_run_over_max_tokens_is_stopped_and_escalated(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    def decide(turn: Turn) -> Spec:
        if turn.answered == "call_fix_1":
            return "Fixed add() in calc.py."
        if turn.answered == "call_read_1":
            return write_fix(turn, "call_fix_1")
        return read_calc(turn, "call_read_1")

    model_server.script(agent_script(decide))
    outcome = run_loop(tmp_path, model_server, max_tokens=10, max_attempts=3)
    assert outcome.exit_code == 1, outcome.explain()
    assert outcome.run["outcome"] == "escalated"
    assert outcome.run["reason"].startswith("token budget exceeded")
    assert outcome.run["tokens"] > 10
    assert len(outcome.run["attempts"]) == 1  # stopped, not tried again
    assert (outcome.home / "state" / "escalations" / f"{outcome.run_id}.md").is_file()

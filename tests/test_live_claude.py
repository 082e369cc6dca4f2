"""End to end with the real Claude Code CLI: `loopd once` on a real repository, in bubblewrap.

Each scenario starts a scripted Anthropic Messages API server (tests/providers/anthropic.py),
points an agent profile `adapter = "claude"` at it (`base_url`, `api_key_env`), and runs the
real `claude` (the pinned @anthropic-ai/claude-code@2.1.332) under loopd's sandbox: its Edit
tool changes the run's tree, its stream goes into the transcript, loopd nudges it with
`--resume SESSION_ID`. Telemetry, error reports and Claude Code's other traffic are off in the
profile's env; the run's HOME for the agent is loopd's own, empty but for what loopd writes.
The usage-limit scenario runs the executor in this process with an injected clock, so that the
park's wait ends when the test says (as tests/test_quota_adapters.py does with stand-ins).

Claude Code is found at $LOOPD_CLAUDE_BIN, `<repository>/node_modules/.bin/claude` (where
`.ci/run` installs the pinned version), or on PATH.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from daemon.agents.claude import ClaudeAdapter
from daemon.config import AgentProfile
from daemon.home import Home
from daemon.runparts.services import RunServices
from daemon.runs import parking
from daemon.runs.executor import RunExecutor, new_run
from daemon.runs.slots import RunSlots
from daemon.scheduling.queue import PendingRun
from daemon.state.records import Trigger
from tests.agent_programs import find_program
from tests.helpers import git, loopd, make_home, make_repo, transcript_text, wait_for
from tests.providers.anthropic import AnthropicServer, Spec, rate_limited, unauthorized
from tests.sandboxing import require_bwrap
from tests.test_e2e_qwen import Outcome, loopd_lines, stdout_events
from tests.test_login_e2e import assert_refused_login_held

CLAUDE_PACKAGE = "@anthropic-ai/claude-code@2.1.332"


def find_claude() -> Path | None:
    """The claude executable: $LOOPD_CLAUDE_BIN, the repository's node_modules, or PATH."""
    return find_program("claude", "LOOPD_CLAUDE_BIN")


CLAUDE = find_claude()

pytestmark = pytest.mark.skipif(
    CLAUDE is None,
    reason=(
        f"the real Claude Code CLI is needed: `npm install --no-save {CLAUDE_PACKAGE}` in the "
        "repository root (as .ci/run does), or put `claude` on PATH, or set LOOPD_CLAUDE_BIN"
    ),
)

LOOP = "fix"
TASK = "Fix add() in calc.py so that check.py passes. Do not change check.py."
NUDGE = "loopd nudge: continue the task. If something blocks you, say exactly what."
BUGGY = "def add(a, b):\n    return a - b\n"
STILL_WRONG = "def add(a, b):\n    return a * b\n"
FIXED = "def add(a, b):\n    return a + b\n"
CHECK = (
    "from calc import add\n\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\nprint('ok')\n"
)
KEY_ENV = "CLAUDE_E2E_KEY"
KEY = "sk-ant-api03-e2e-test-key"
# Claude Code's own traffic besides the model (telemetry, error reports, its reachability
# check) is off, as a user who runs it against a local server would set it.
QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}
STALL_AFTER = 20  # claude starts in 1-7 s on a busy 2-core machine (6.6 s at most in CI)
WORKDIR = re.compile(r"Primary working directory: (\S+)")


# --- reading what claude sent ----------------------------------------------------------------


def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


@dataclass
class Turn:
    """One `POST /v1/messages` from claude, read for what a scripted model decides."""

    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [m for m in self.body.get("messages") or [] if isinstance(m, dict)]

    @property
    def is_agent(self) -> bool:
        """The agent's own conversation (it carries the tools), not a side request."""
        return bool(self.body.get("tools"))

    @property
    def answered(self) -> str:
        """The tool_use id whose result ends the conversation, or ""."""
        last = self.messages[-1] if self.messages else {}
        ids = [b.get("tool_use_id", "") for b in blocks(last) if b.get("type") == "tool_result"]
        return ids[-1] if ids else ""

    def texts(self, role: str) -> list[str]:
        return [
            str(b.get("text", ""))
            for m in self.messages
            if m.get("role") == role
            for b in blocks(m)
            if b.get("type") == "text"
        ]

    @property
    def nudged(self) -> bool:
        return any(NUDGE in text for text in self.texts("user"))

    def has_task(self) -> bool:
        return any(TASK in text for text in self.texts("user"))

    @property
    def workdir(self) -> str:
        for m in self.messages:
            for text in [str(b.get("text", "")) for b in blocks(m)]:
                match = WORKDIR.search(text)
                if match:
                    return match.group(1)
        raise AssertionError("claude did not say its working directory")

    def tool_use_ids(self) -> list[str]:
        return [
            str(b.get("id"))
            for m in self.messages
            if m.get("role") == "assistant"
            for b in blocks(m)
            if b.get("type") == "tool_use"
        ]

    def tool_result_ids(self) -> list[str]:
        return [
            str(b.get("tool_use_id"))
            for m in self.messages
            if m.get("role") == "user"
            for b in blocks(m)
            if b.get("type") == "tool_result"
        ]


def edit(turn: Turn, call_id: str, old: str, new: str, say: str) -> Spec:
    """Claude Code's Edit tool on calc.py (an absolute path, as its tool wants)."""
    path = f"{turn.workdir}/calc.py"
    arguments = {"file_path": path, "old_string": old, "new_string": new}
    return {"text": say, "tool_use": [{"name": "Edit", "id": call_id, "input": arguments}]}


def agent_script(decide: Callable[[Turn], Spec]) -> Callable[[dict[str, Any]], Spec]:
    """A server script: the agent's turns go to `decide`; a side request gets a short text."""

    def reply(body: dict[str, Any]) -> Spec:
        turn = Turn(body)
        return decide(turn) if turn.is_agent else "Fix add"

    return reply


def agent_turns(server: AnthropicServer) -> list[Turn]:
    return [t for t in map(Turn, server.messages_requests()) if t.is_agent]


@pytest.fixture
def anthropic() -> Iterator[AnthropicServer]:
    with AnthropicServer() as server:
        yield server


# --- one run through `loopd once` ------------------------------------------------------------


def profile(server: AnthropicServer) -> dict[str, Any]:
    return {
        "adapter": "claude",
        "model": "claude-test-model",
        "base_url": server.base_url,
        "api_key_env": KEY_ENV,
        "env": QUIET_ENV,
    }


def claude_on_path(tmp_path: Path) -> str:
    """A PATH whose `claude` is the pinned one (loopd starts it from PATH, as a daemon would)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    assert CLAUDE is not None
    if not (bin_dir / "claude").exists():
        (bin_dir / "claude").symlink_to(CLAUDE.resolve())
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def run_loop(tmp_path: Path, server: AnthropicServer, **loop: Any) -> Outcome:
    """`loopd once fix` on a fresh repository whose add() is broken, with claude on `server`."""
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY, "check.py": CHECK})
    fields = {
        "repo": str(repo),
        "task": TASK,
        "agent": "claude",
        "done_when": [f"{shlex.quote(sys.executable)} check.py"],
        "check_timeout": "60s",
        "protect": ["check.py"],
        "max_attempts": 1,
        "attempt_timeout": "120s",
        "stall_after": "60s",
        "max_nudges": 1,
        "nudge": NUDGE,
        "critic": "off",
        **loop,
    }
    home = make_home(
        tmp_path / "home",
        tomli_w.dumps({"agents": {"claude": profile(server)}}),
        {LOOP: tomli_w.dumps(fields)},
    )
    env = {"PATH": claude_on_path(tmp_path), KEY_ENV: KEY}
    proc = loopd(home, "once", LOOP, timeout=240, env=env)
    lines = proc.stdout.splitlines()
    assert lines, f"loopd once printed no run id\n{proc.stderr[-3000:]}"
    run_id = lines[0].strip()
    run = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    return Outcome(proc.returncode, proc.stdout, proc.stderr, run_id, run, home, repo)


def assert_resumed(outcome: Outcome, server: AnthropicServer, earlier_call: str) -> None:
    """The nudge went to the same session: `--resume ID`, and the conversation carried over."""
    session = outcome.attempt["session_id"]
    assert session
    assert {e["session_id"] for e in stdout_events(outcome, "session")} == {session}
    starts = loopd_lines(outcome, "process", event="started")
    assert len(starts) == 2
    assert "--resume" not in shlex.split(starts[0]["argv"])
    argv = shlex.split(starts[1]["argv"])
    assert argv[argv.index("--resume") + 1] == session
    nudged = [t for t in agent_turns(server) if t.nudged]
    assert nudged, "no request carried the nudge"
    resumed = nudged[0]
    assert resumed.has_task(), "the resumed request lost the original task"
    assert earlier_call in resumed.tool_use_ids(), "the resumed request lost the earlier work"
    assert earlier_call in resumed.tool_result_ids(), "the resumed request lost a tool result"


def logs(outcome: Outcome) -> str:
    proc = loopd(outcome.home, "logs", outcome.run_id)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# --- the scenarios -------------------------------------------------------------------------


def wrong_then_right(turn: Turn) -> Spec:
    """A wrong edit and an answer; after the nudge, the right edit and an answer."""
    if not turn.nudged:
        if turn.answered == "toolu_edit_1":
            return "I changed add() in calc.py."
        return edit(turn, "toolu_edit_1", "a - b", "a * b", "I will fix add().")
    if turn.answered == "toolu_edit_2":
        return "Fixed: add() returns a + b now."
    return edit(turn, "toolu_edit_2", "a * b", "a + b", "The checks say 6, not 5.")


def test_an_edit_that_leaves_the_checks_failing_is_nudged_into_the_same_session(
    tmp_path: Path, anthropic: AnthropicServer
) -> None:
    anthropic.script(agent_script(wrong_then_right))
    outcome = run_loop(tmp_path, anthropic)

    assert outcome.exit_code == 0, outcome.explain()
    assert outcome.run["outcome"] == "succeeded", outcome.run.get("reason")
    assert outcome.on_branch("calc.py") == FIXED
    assert (outcome.repo / "calc.py").read_text() == BUGGY  # the user's checkout is untouched
    attempt = outcome.attempt
    assert attempt["nudges"] == 1
    assert attempt["summary"] == "Fixed: add() returns a + b now."
    nudges = outcome.events("nudge")
    assert len(nudges) == 1
    # The nudge says the checks still fail, with their output (6, not 5).
    nudge_text = loopd_lines(outcome, "nudge")[0]["text"]
    assert "add(2, 3) gave 6" in nudge_text
    # The edits went through claude's own Edit tool, and their results back to the model.
    calls = stdout_events(outcome, "tool_call")
    assert [(c["tool"], c["call_id"]) for c in calls] == [
        ("Edit", "toolu_edit_1"),
        ("Edit", "toolu_edit_2"),
    ]
    results = stdout_events(outcome, "tool_result")
    assert [r["call_id"] for r in results] == ["toolu_edit_1", "toolu_edit_2"]
    assert not any(r.get("is_error") for r in results)
    assert_resumed(outcome, anthropic, "toolu_edit_1")
    # Every request went to the scripted server with the profile's model and key.
    entries = anthropic.requests
    assert {e["path"].split("?")[0] for e in entries} == {"/v1/messages"}
    assert {e["key"] for e in entries} == {KEY}
    assert {e["body"]["model"] for e in entries} == {"claude-test-model"}
    # Tokens and cost of both sessions, and the session id, are in the run's record.
    assert outcome.run["tokens"] > 0 and attempt["tokens"] == outcome.run["tokens"]
    usage = stdout_events(outcome, "usage")
    assert len(usage) == 2
    assert attempt["tokens"] == sum(u["input_tokens"] + u["output_tokens"] for u in usage)
    # `loopd logs RUN` shows the agent's words and its tool calls.
    shown = logs(outcome)
    assert "I changed add() in calc.py." in shown
    assert "Fixed: add() returns a + b now." in shown
    assert "▶ Edit" in shown and "a * b" in shown
    # loopd's tools reached it over MCP (the extra is installed here).
    init = json.loads(stdout_events(outcome, "session")[0]["raw"])
    servers = {server["name"]: server["status"] for server in init["mcp_servers"]}
    assert servers == {"loopd": "connected"}
    # All of that inside bubblewrap.
    require_bwrap()
    assert [e["in_force"] for e in outcome.events("sandbox")] == ["bwrap"]


def test_a_held_response_is_a_silence_stall_and_the_session_resumes(
    tmp_path: Path, anthropic: AnthropicServer
) -> None:
    def decide(turn: Turn) -> Spec:
        if turn.nudged:
            return "Back again: add() in calc.py is fixed."
        if turn.answered == "toolu_edit_1":
            # The server holds the response open, streaming nothing, until it stops.
            return {"hang": 600, "text": "too late"}
        return edit(turn, "toolu_edit_1", "a - b", "a + b", "I will fix add().")

    anthropic.script(agent_script(decide))
    outcome = run_loop(tmp_path, anthropic, stall_after=f"{STALL_AFTER}s")

    assert outcome.run["outcome"] == "succeeded", outcome.explain()
    attempt = outcome.attempt
    assert [s["kind"] for s in attempt["stalls"]] == ["silence"]
    assert attempt["nudges"] == 1
    assert attempt["summary"] == "Back again: add() in calc.py is fixed."
    exits = loopd_lines(outcome, "process", event="exited")
    assert [e["reason"] for e in exits] == ["stall", "exited"]
    silent = [s for s in loopd_lines(outcome, "stall", kind="silence") if "silent_seconds" in s]
    assert len(silent) == 1 and silent[0]["silent_seconds"] >= STALL_AFTER
    assert_resumed(outcome, anthropic, "toolu_edit_1")


def test_a_refused_key_is_marked_a_login_failure_after_two_retries(
    tmp_path: Path, anthropic: AnthropicServer
) -> None:
    anthropic.script(lambda body: unauthorized())
    outcome = run_loop(tmp_path, anthropic)  # a nudge allowed, and not spent

    assert_refused_login_held(outcome, "claude", LOOP)
    assert "Invalid API key" in outcome.run["reason"]
    # One request and the two retries loopd allows (CLAUDE_CODE_MAX_RETRIES), not ten.
    assert len(anthropic.messages_requests()) == 3
    errors = stdout_events(outcome, "error")
    assert [(e["text"], e.get("login"), e.get("quota")) for e in errors] == [
        ("Invalid API key · Fix external API key", True, None)
    ]
    # The retries are notices, not raw JSON, in the transcript and in `loopd logs`.
    notices = stdout_events(outcome, "notice")
    assert len(notices) == 2
    shown = logs(outcome)
    assert "-- API request failed (authentication_failed, HTTP 401); retry 1 of 2" in shown
    assert '"api_retry"' not in shown
    assert "!! error: Invalid API key · Fix external API key" in shown


# --- the usage limit: the executor in this process, its clock injected -----------------------

NOW = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


def test_a_429_parks_the_run_and_the_same_session_resumes_after_the_wait(
    tmp_path: Path, anthropic: AnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    limited = threading.Event()

    def decide(turn: Turn) -> Spec:
        if not limited.is_set():
            limited.set()
            return rate_limited(NOW, 3600)
        if turn.answered == "toolu_edit_1":
            return "Fixed add() after the wait."
        return edit(turn, "toolu_edit_1", "a - b", "a + b", "I will fix add().")

    anthropic.script(agent_script(decide))
    monkeypatch.setenv("PATH", claude_on_path(tmp_path))
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setattr(parking, "POLL", 0.05)
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY, "check.py": CHECK})
    config = tomli_w.dumps(
        {
            "agents": {"claude": profile(anthropic)},
            "limits": {"max_wait": "2d", "worktrees": str(tmp_path / "worktrees")},
        }
    )
    loop = {
        "repo": str(repo),
        "task": TASK,
        "agent": "claude",
        "done_when": [f"{shlex.quote(sys.executable)} check.py"],
        "max_nudges": 0,
        "max_attempts": 1,
        "timezone": "UTC",
        "critic": "off",
    }
    home = Home(make_home(tmp_path / "home", config, {"calc": tomli_w.dumps(loop)}))
    loaded = home.load()
    clock = [NOW]
    services = RunServices(
        home=home, config=loaded.daemon, store=home.state(), clock=lambda: clock[0]
    )
    services.slots = RunSlots(lambda: 1)
    trigger = Trigger(loop="calc", kind="manual", reason="test", ts=NOW)
    run_id = services.store.new_run_id("calc", NOW)
    pending = PendingRun(id=run_id, loop="calc", trigger=trigger, queued_at=NOW)
    run = new_run(services, loaded.loops["calc"], pending)
    services.slots.add(run.id)
    thread = threading.Thread(
        target=RunExecutor(services, loaded.loops["calc"], run).execute, daemon=True
    )
    thread.start()
    path = services.store.run_dir(run.id) / "run.toml"

    def parked() -> dict[str, Any] | None:
        record = tomllib.loads(path.read_text())
        return record if record.get("phase") == "waiting" else None

    record = wait_for(parked, timeout=90, what="claude's 429 to park the run")
    # Nothing in claude's stream names the reset: the first wait is the default.
    assert record["resume_at"] == NOW + parking.FIRST_WAIT
    assert record["park"]["reset_named"] is False
    assert "rate limit for your organization" in record["park"]["message"]
    session = record["park"]["session_id"]
    assert session
    assert len(anthropic.messages_requests()) == 1  # a 429 an hour long: claude did not retry
    clock[0] = NOW + parking.FIRST_WAIT
    thread.join(timeout=120)
    assert not thread.is_alive()
    record = tomllib.loads(path.read_text())
    assert record["outcome"] == "succeeded", record.get("reason")
    (attempt,) = record["attempts"]
    assert attempt["nudges"] == 0 and attempt["checks_passed"] is True
    assert attempt["session_id"] == session
    assert git(repo, "show", f"{record['branch']}:calc.py") + "\n" == FIXED
    # The resumed process asked again in the same session: the task is in its history.
    resumed = agent_turns(anthropic)[1]
    assert resumed.has_task()
    assert any(parking.RESUME_NOTE.strip()[:40] in t for t in resumed.texts("user"))
    transcript = transcript_text(services.store.run_dir(run.id) / "attempt-1")
    records = [json.loads(line) for line in transcript.splitlines() if line.strip()]
    starts = [r for r in records if r["stream"] == "loopd" and r.get("event") == "started"]
    assert len(starts) == 2
    argv = shlex.split(starts[1]["argv"])
    assert argv[argv.index("--resume") + 1] == session


# --- how the adapter starts it --------------------------------------------------------------


def started_as_root(
    tmp_path: Path, server: AnthropicServer, sandboxed: bool
) -> subprocess.CompletedProcess[str]:
    """The real claude started with the adapter's argv and environment, outside any sandbox."""
    adapter = ClaudeAdapter(
        AgentProfile(adapter="claude", base_url=server.base_url, env=QUIET_ENV),
        private_home=tmp_path / "home",
        environ={},
    )
    adapter.sandboxed = sandboxed
    invocation = adapter.invocation("Say hi.")
    (tmp_path / "home").mkdir(exist_ok=True)
    env = {"PATH": claude_on_path(tmp_path), "HOME": str(tmp_path / "home")}
    env.update({**QUIET_ENV, **invocation.env})
    return subprocess.run(
        invocation.argv,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def test_is_sandbox_is_said_only_when_loopds_sandbox_confines_the_agent(
    tmp_path: Path, anthropic: AnthropicServer
) -> None:
    anthropic.script(lambda body: "hi")
    assert "IS_SANDBOX" not in started_env(sandboxed=False)
    assert started_env(sandboxed=True)["IS_SANDBOX"] == "1"
    # A profile that says otherwise wins.
    assert started_env(sandboxed=True, IS_SANDBOX="0")["IS_SANDBOX"] == "0"
    if os.geteuid() != 0:
        return  # only root is refused; the environment above is what loopd gives
    # As root and unconfined, Claude Code refuses bypassPermissions; told it is in a sandbox,
    # it starts (bubblewrap with a run's limits runs it as uid 1000, where neither matters).
    refused = started_as_root(tmp_path, anthropic, sandboxed=False)
    assert refused.returncode != 0
    assert "cannot be used with root/sudo privileges" in refused.stdout + refused.stderr
    assert anthropic.messages_requests() == []
    started = started_as_root(tmp_path, anthropic, sandboxed=True)
    assert started.returncode == 0, started.stderr
    assert '"result":"hi"' in started.stdout


def started_env(sandboxed: bool, **profile_env: str) -> dict[str, str]:
    adapter = ClaudeAdapter(AgentProfile(adapter="claude", env=profile_env), environ={})
    adapter.sandboxed = sandboxed
    env = adapter.invocation("x").env
    return {**env, **profile_env}  # the caller adds the profile's env over the adapter's

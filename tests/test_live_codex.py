"""End to end with the real Codex CLI: `loopd once` (and `loopd run`) on a real repository.

Each scenario starts the scripted OpenAI Responses API server (tests/providers/
openai_responses.py), points a profile `adapter = "codex"` with `base_url` at it (the adapter
writes it as the `loopd` provider of the run's `~/.codex/config.toml`), and runs loopd as a
subprocess under bubblewrap. The real `codex exec --json` does the work: its shell tool runs
`apply_patch`, which codex itself applies to the run's worktree; loopd reads its stream,
nudges it with `codex exec ... resume THREAD_ID MESSAGE`, parks it on a usage limit.

Codex CLI is found at $LOOPD_CODEX_BIN, `<repository>/node_modules/.bin/codex` (where
`.ci/run` installs the pinned `@openai/codex@0.171.0`), or on PATH.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.agent_programs import find_program
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
    transcript_text,
    wait_for,
)
from tests.providers.openai_responses import (
    ResponsesServer,
    Spec,
    input_items,
    insufficient_quota,
    invalid_api_key,
    item_text,
    usage_limit_reached,
)
from tests.sandboxing import require_bwrap
from tests.test_login_e2e import assert_refused_login_held

CODEX_PACKAGE = "@openai/codex@0.171.0"


def find_codex() -> Path | None:
    """The codex executable: $LOOPD_CODEX_BIN, the repository's node_modules, or PATH."""
    return find_program("codex", "LOOPD_CODEX_BIN")


CODEX = find_codex()
if CODEX is None or shutil.which("node") is None:
    why = (
        f"the real Codex CLI is needed: `npm install --no-save {CODEX_PACKAGE}` in the "
        "repository root (as .ci/run does), or codex on PATH, or LOOPD_CODEX_BIN; and node"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(why, pytrace=False)
    pytest.skip(why, allow_module_level=True)

LOOP = "fix"
MODEL = "gpt-test-codex"
TASK = "Fix add() in calc.py so that check.py passes. Do not change check.py."
NUDGE = "loopd nudge: continue the task. If something blocks you, say exactly what."
BUGGY = "def add(a, b):\n    return a - b\n"
WRONG = "def add(a, b):\n    return a * b\n"
FIXED = "def add(a, b):\n    return a + b\n"
CHECK = (
    "from calc import add\n\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\nprint('ok')\n"
)
# Every model call reports this, so the run's tokens are known exactly.
USAGE = {"input_tokens": 1200, "cached_tokens": 200, "output_tokens": 30}
# Seconds; codex starts in about one on a busy 2-core machine (its first output 0.6 s
# after its start at load 5), and a start taken for a stall would fail the silent-stream
# test (its first request must come before the stall).
STALL_AFTER = 5


def patch(old: str, new: str) -> str:
    """A shell command running codex's `apply_patch` on calc.py (codex applies it itself)."""
    body = f"*** Begin Patch\n*** Update File: calc.py\n@@\n-{old}\n+{new}\n*** End Patch\n"
    return f"apply_patch <<'PATCH'\n{body}PATCH\n"


# --- reading what codex sent -----------------------------------------------------------------


@dataclass
class Turn:
    """One /v1/responses request from codex, read for what a scripted model needs to decide."""

    body: dict[str, Any]

    @property
    def items(self) -> list[dict[str, Any]]:
        return input_items(self.body)

    @property
    def is_agent(self) -> bool:
        """The agent's own conversation (with its tools), not a request of codex's own."""
        return bool(self.body.get("tools")) and self.has_task()

    def user_texts(self) -> list[str]:
        users = [i for i in self.items if i.get("type") == "message" and i.get("role") == "user"]
        return [item_text(item) for item in users]

    def has_task(self) -> bool:
        return any(TASK in text for text in self.user_texts())

    @property
    def nudged(self) -> bool:
        return any(NUDGE in text for text in self.user_texts())

    @property
    def answered(self) -> str:
        """The call id whose output ends the input, or "" after anything else."""
        last = self.items[-1] if self.items else {}
        return str(last.get("call_id", "")) if last.get("type") == "function_call_output" else ""

    def call_ids(self) -> list[str]:
        return [str(i.get("call_id")) for i in self.items if i.get("type") == "function_call"]

    def output_ids(self) -> list[str]:
        return [
            str(i.get("call_id")) for i in self.items if i.get("type") == "function_call_output"
        ]

    def outputs_since_user(self) -> list[str]:
        """The call ids answered since the last user message (this turn's tool results)."""
        out: list[str] = []
        for item in self.items:
            if item.get("type") == "message" and item.get("role") == "user":
                out = []
            elif item.get("type") == "function_call_output":
                out.append(str(item.get("call_id")))
        return out


def shell(call_id: str, command: str, text: str = "") -> Spec:
    spec: dict[str, Any] = {
        "calls": [{"name": "exec_command", "arguments": {"cmd": command}, "call_id": call_id}],
        "usage": USAGE,
    }
    if text:
        spec["text"] = text
    return spec


def say(text: str) -> Spec:
    return {"text": text, "usage": USAGE}


def agent_script(decide: Callable[[Turn], Spec]) -> Callable[[dict[str, Any]], Spec]:
    """A server script: the agent's turns go to `decide`; anything else gets a short text."""

    def reply(body: dict[str, Any]) -> Spec:
        turn = Turn(body)
        return decide(turn) if turn.is_agent else say("Nothing to add.")

    return reply


def agent_turns(server: ResponsesServer) -> list[Turn]:
    return [t for t in map(Turn, server.responses_requests()) if t.is_agent]


# --- one run ---------------------------------------------------------------------------------


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

    def transcript(self) -> list[dict[str, Any]]:
        text = transcript_text(self.run_dir / "attempt-1")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def events(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in events(self.home) if e.get("run") == self.run_id and e["type"] == type_]

    def explain(self) -> str:
        return f"exit {self.exit_code}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr[-3000:]}"


def setup(tmp_path: Path, server: ResponsesServer, **loop: Any) -> tuple[Path, Path, dict]:
    """A home with a codex profile on `server` and loop `fix` on a repository whose add() is
    broken; the environment that finds the real codex on PATH."""
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY, "check.py": CHECK})
    profile = {
        "adapter": "codex",
        "model": MODEL,
        "base_url": server.base_url,
        "api_key_env": "LOOPD_TEST_CODEX_KEY",
    }
    fields = {
        "repo": str(repo),
        "task": TASK,
        "agent": "codex",
        "done_when": [f"{shlex.quote(sys.executable)} check.py"],
        "check_timeout": "60s",
        "protect": ["check.py"],
        "max_attempts": 1,
        "attempt_timeout": "120s",
        "stall_after": "60s",
        "max_nudges": 1,
        "nudge": NUDGE,
        "timezone": "UTC",
        **loop,
    }
    home = make_home(
        tmp_path / "home",
        tomli_w.dumps({"agents": {"codex": profile}}),
        {LOOP: tomli_w.dumps(fields)},
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    assert CODEX is not None
    (bin_dir / "codex").symlink_to(CODEX.resolve())
    # An empty HOME of loopd's own: the run's HOME for codex is seeded from it (no login).
    real_home = tmp_path / "person"
    real_home.mkdir()
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(real_home),
        "TZ": "UTC",
        "LOOPD_TEST_CODEX_KEY": "sk-test-loopd-codex-0123456789",
    }
    return home, repo, env


def run_once(tmp_path: Path, server: ResponsesServer, **loop: Any) -> Outcome:
    home, repo, env = setup(tmp_path, server, **loop)
    proc = loopd(home, "once", LOOP, timeout=240, env=env)
    lines = proc.stdout.splitlines()
    assert lines, f"loopd once printed no run id\n{proc.stderr[-3000:]}"
    run_id = lines[0].strip()
    run = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    return Outcome(proc.returncode, proc.stdout, proc.stderr, run_id, run, home, repo)


def stdout_events(outcome: Outcome, type_: str) -> list[dict[str, Any]]:
    return [e for e in outcome.transcript() if e["stream"] == "stdout" and e["type"] == type_]


def process_starts(transcript: list[dict[str, Any]]) -> list[list[str]]:
    return [
        shlex.split(e["argv"])
        for e in transcript
        if e["stream"] == "loopd" and e["type"] == "process" and e.get("event") == "started"
    ]


def assert_resumed_with(argv: list[str], session: str) -> str:
    """The process continued thread `session` (`codex exec ... resume ID MESSAGE`): the message."""
    assert argv[:3] == ["codex", "exec", "--json"], argv
    assert argv[-3] == "resume" and argv[-2] == session, argv
    return argv[-1]


# --- the scenarios -------------------------------------------------------------------------


def wrong_then_right(turn: Turn) -> Spec:
    """A wrong edit and an answer; after the nudge, the right edit and an answer."""
    if not turn.nudged:
        if turn.answered == "call_fix_1":
            return say("Changed add() in calc.py.")
        return shell("call_fix_1", patch("    return a - b", "    return a * b"))
    if turn.answered == "call_fix_2":
        return say("Fixed add() in calc.py: it returns a + b now.")
    return shell("call_fix_2", patch("    return a * b", "    return a + b"))


def test_codex_edits_the_checks_fail_the_nudge_resumes_its_thread_and_it_finishes(
    tmp_path: Path,
) -> None:
    with ResponsesServer(agent_script(wrong_then_right)) as server:
        outcome = run_once(tmp_path, server)
        turns = agent_turns(server)
        requests = list(server.requests)

    require_bwrap()
    assert [e["in_force"] for e in outcome.events("sandbox")] == ["bwrap"]
    assert outcome.exit_code == 0, outcome.explain()
    assert outcome.run["outcome"] == "succeeded", outcome.run.get("reason")
    attempt = outcome.attempt
    assert attempt["nudges"] == 1 and attempt["checks_passed"] is True
    assert git(outcome.repo, "show", f"{outcome.run['branch']}:calc.py") + "\n" == FIXED
    assert (outcome.repo / "calc.py").read_text() == BUGGY  # the person's checkout untouched

    # The session: one thread id, recorded; the nudge went to it with `resume`.
    session = attempt["session_id"]
    assert session and {e["session_id"] for e in stdout_events(outcome, "session")} == {session}
    first, second = process_starts(outcome.transcript())
    assert "resume" not in first and TASK in first[-1]  # the whole prompt, then the nudge
    assert assert_resumed_with(second, session).startswith(NUDGE)
    # The server saw the first session's history in the resumed request.
    resumed = next(t for t in turns if t.nudged)
    assert resumed.has_task(), "the resumed request lost the task"
    assert "call_fix_1" in resumed.call_ids(), "the resumed request lost the earlier call"
    assert "call_fix_1" in resumed.output_ids(), "the resumed request lost the earlier result"
    assert [t.body["model"] for t in turns] == [MODEL] * 4
    assert all(r["authorization"] == "Bearer" for r in requests)
    assert all(r["path"] == "/v1/responses" for r in requests), [r["path"] for r in requests]
    # The run's config.toml turned Codex's analytics off; it says so in every request.
    metadata = [json.loads(r["headers"]["x-codex-turn-metadata"]) for r in requests]
    assert {m["analytics_enabled"] for m in metadata} == {False}

    # Tool calls: codex reports an apply_patch as a file change; both went into the worktree.
    calls = stdout_events(outcome, "tool_call")
    assert [c["tool"] for c in calls] == ["file_change", "file_change"]
    results = stdout_events(outcome, "tool_result")
    assert [r["output"].split()[0] for r in results] == ["update", "update"]
    assert all(r["output"].endswith("calc.py") and not r.get("is_error") for r in results)

    # Tokens: four model calls of 1200 in and 30 out; codex's running thread total is counted
    # once (the resumed process reports the first session's calls again).
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (4 * 1200, 4 * 30)
    assert outcome.run["tokens"] == 4 * 1230
    assert attempt["summary"] == "Fixed add() in calc.py: it returns a + b now."

    # `loopd logs RUN` shows the agent's words and its tool calls, and no raw JSON.
    logs = loopd(outcome.home, "logs", outcome.run_id)
    assert logs.returncode == 0, logs.stderr
    assert "Changed add() in calc.py." in logs.stdout
    assert "Fixed add() in calc.py: it returns a + b now." in logs.stdout
    assert logs.stdout.count("▶ file_change") == 2
    assert f"no metadata for model `{MODEL}`" in logs.stdout
    assert '{"type"' not in logs.stdout, logs.stdout


def test_codex_silent_stream_is_a_silence_stall_and_the_nudge_resumes_its_thread(
    tmp_path: Path,
) -> None:
    def decide(turn: Turn) -> Spec:
        if not turn.nudged:
            # The model goes silent mid-stream; the stream stays open until the server stops.
            return {"hang": 600}
        if turn.answered == "call_fix_1":
            return say("Back again: add() in calc.py is fixed.")
        return shell("call_fix_1", patch("    return a - b", "    return a + b"))

    with ResponsesServer(agent_script(decide)) as server:
        outcome = run_once(tmp_path, server, stall_after=f"{STALL_AFTER}s")
        turns = agent_turns(server)

    assert outcome.exit_code == 0, outcome.explain()
    assert outcome.run["outcome"] == "succeeded", outcome.run.get("reason")
    attempt = outcome.attempt
    assert [s["kind"] for s in attempt["stalls"]] == ["silence"]
    assert [(e["n"], e["kind"]) for e in outcome.events("nudge")] == [(1, "silence")]
    exits = [
        e
        for e in outcome.transcript()
        if e["stream"] == "loopd" and e["type"] == "process" and e.get("event") == "exited"
    ]
    assert [e["reason"] for e in exits] == ["stall", "exited"]
    first, second = process_starts(outcome.transcript())
    assert assert_resumed_with(second, attempt["session_id"]).startswith(NUDGE)
    # The silence was the stream's: the first session's request came before it.
    assert turns and not turns[0].nudged, [t.nudged for t in turns]
    resumed = [t for t in turns if t.nudged]
    assert resumed and resumed[0].has_task()  # the thread held the task across the kill


def test_codex_usage_limit_parks_the_run_and_resumes_its_thread_after_the_reset(
    tmp_path: Path, daemons: list
) -> None:
    # The reset on a whole minute: codex prints it as a clock time ("try again at 5:39 AM.").
    reset = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    limited = {"on": True}

    def decide(turn: Turn) -> Spec:
        if turn.answered == "call_fix_1":
            if limited["on"]:
                return usage_limit_reached(reset, datetime.now(UTC))
            return say("Fixed add() in calc.py after the limit reset.")
        if "call_fix_1" in turn.call_ids():
            return say("Fixed add() in calc.py after the limit reset.")
        return shell("call_fix_1", patch("    return a - b", "    return a + b"))

    with ResponsesServer(agent_script(decide)) as server:
        home, repo, env = setup(tmp_path, server)
        daemon = start_daemon(home, env=env)
        daemons.append(daemon)
        assert loopd(home, "trigger", LOOP, env=env).returncode == 0
        record = wait_for(
            lambda: next((r for r in runs(home) if r.get("phase") == "waiting"), None),
            timeout=120,
            what="codex's usage limit to park the run",
        )
        park = record["park"]
        assert "hit your usage limit" in park["message"] and park["session_id"]
        assert record["resume_at"] == reset + timedelta(minutes=1)
        assert record["attempts"][0]["nudges"] == 0 and not record["attempts"][0].get("stalls")
        status = loopd(home, "status", env=env)
        assert "usage limit" in status.stdout.lower(), status.stdout
        assert stop_daemon(daemon) == 0, daemon_log(home)

        # The limit lifted: the server answers again, and the reset is in the past.
        limited["on"] = False
        run_id = record["id"]
        path = home / "state" / "runs" / run_id / "run.toml"
        data = tomllib.loads(path.read_text())
        data["resume_at"] = datetime.now(UTC) - timedelta(minutes=1)
        path.write_text(tomli_w.dumps(data))
        daemon = start_daemon(home, env=env)
        daemons.append(daemon)
        done = wait_for(
            lambda: next((r for r in runs(home) if r.get("outcome")), None),
            timeout=150,
            what="the resumed run's end",
        )
        assert stop_daemon(daemon) == 0
        turns = agent_turns(server)

    assert done["outcome"] == "succeeded", (done.get("reason"), daemon_log(home)[-3000:])
    (attempt,) = done["attempts"]
    assert attempt["session_id"] == park["session_id"] and attempt["nudges"] == 0
    assert git(repo, "show", f"{done['branch']}:calc.py") + "\n" == FIXED
    transcript = transcript_text(home / "state" / "runs" / run_id / "attempt-1")
    starts = process_starts([json.loads(line) for line in transcript.splitlines() if line])
    assert len(starts) == 2
    message = assert_resumed_with(starts[1], park["session_id"])
    assert "usage limit" in message
    # The resumed request carried the first session's work: the call made before the limit.
    after = turns[-1]
    assert "call_fix_1" in after.call_ids() and "call_fix_1" in after.output_ids()
    types = [e["type"] for e in events(home) if e.get("run") == run_id]
    assert types.count("quota_wait") == 1 and "quota_resumed" in types


def test_codex_refused_key_is_a_login_error_that_holds_its_profile(tmp_path: Path) -> None:
    with ResponsesServer(lambda body: invalid_api_key("sk-test")) as server:
        outcome = run_once(tmp_path, server)  # a nudge allowed, and not spent
        requests = server.responses_requests()

    assert_refused_login_held(outcome, "codex", LOOP)
    # Codex tries six times (its five reconnects), then fails the turn: one session.
    assert len(requests) == 6
    errors = stdout_events(outcome, "error")
    assert errors and all(e.get("login") for e in errors), errors
    assert all("401 Unauthorized" in e["text"] for e in errors)
    retries = [e for e in stdout_events(outcome, "raw") if "Reconnecting..." in e["text"]]
    assert len(retries) == 5 and not any(e.get("login") for e in retries)
    assert "401 Unauthorized" in outcome.run["reason"]


def run_codex_directly(tmp_path: Path, script: Any, *extra: str) -> tuple[Any, list[str]]:
    """Codex started as loopd starts it (its argv, env and the run's config.toml), outside
    loopd, against a server answering `script`: the process and its request paths."""
    from daemon.agents.registry import adapter_class
    from daemon.config import AgentProfile

    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY})
    with ResponsesServer(script) as server:
        profile = AgentProfile(adapter="codex", model=MODEL, base_url=server.base_url)
        adapter = adapter_class("codex")(profile, private_home=tmp_path / "home", environ={})
        invocation = adapter.invocation("Say nothing.")  # writes the run's config.toml
        argv = [str(CODEX), *invocation.argv[1:3], *extra, *invocation.argv[3:]]
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), **invocation.env}
        proc = subprocess.run(
            argv,
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        return proc, [r["path"] for r in server.requests]


def test_the_config_loopd_writes_is_one_codex_knows_every_key_of(tmp_path: Path) -> None:
    # `--strict-config` refuses a key this Codex does not know; the run's config must pass.
    proc, paths = run_codex_directly(tmp_path, [say("Nothing to change.")], "--strict-config")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert paths == ["/v1/responses"]
    assert '"agent_message","text":"Nothing to change."' in proc.stdout


@pytest.mark.parametrize(
    "answer",
    [insufficient_quota(), {"failed": {"code": "insufficient_quota", "message": "Out of quota."}}],
    ids=["http-429", "response-failed"],
)
def test_codex_ends_on_openais_quota_answers_as_loopd_reads_them(
    tmp_path: Path, answer: Spec
) -> None:
    # The API's 429 insufficient_quota, and the same code in a `response.failed` event: codex
    # does not retry either, and its words are a usage limit to loopd (no reset named).
    from daemon.agents.quota import is_quota_text
    from daemon.agents.registry import adapter_class
    from daemon.config import AgentProfile

    proc, paths = run_codex_directly(tmp_path, lambda body: answer)
    assert proc.returncode == 1 and paths == ["/v1/responses"]
    adapter = adapter_class("codex")(AgentProfile(adapter="codex"), environ={})
    events = [e for line in proc.stdout.splitlines() for e in adapter.parse_line(line)]
    errors = [e.text for e in events if e.type == "error"]
    assert errors == ["Quota exceeded. Check your plan and billing details."] * 2
    assert is_quota_text(errors[-1]) and not any(e.login for e in events)

"""End to end with the real Gemini CLI (`@google/gemini-cli@0.61.0`): `loopd once` under
bubblewrap, against a scripted Gemini API on 127.0.0.1 (tests/providers/gemini.py).

The profile is what a user writes for a Gemini-compatible server: `adapter = "gemini"`,
`base_url`, `api_key_env`. The loopd process runs with an empty HOME of the test's own whose
`~/.gemini/settings.json` turns usage statistics, telemetry and update checks off (the
person's settings, which loopd copies into the run's HOME and adds to); the profile's env
turns telemetry off too.

Gemini CLI is found at $LOOPD_GEMINI_BIN, `<repository>/node_modules/.bin/gemini` (where
`.ci/run` installs the pinned version), or on PATH.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tomllib
from collections.abc import Callable, Iterator
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
from tests.providers.gemini import (
    GeminiCall,
    ScriptedGeminiServer,
    Spec,
    permission_denied,
    resource_exhausted,
    unauthenticated,
)
from tests.sandboxing import require_bwrap
from tests.test_e2e_qwen import Outcome, loopd_lines, stdout_events
from tests.test_login_e2e import assert_refused_login_held

GEMINI_PACKAGE = "@google/gemini-cli@0.61.0"


def find_gemini() -> Path | None:
    """The gemini executable: $LOOPD_GEMINI_BIN, the repository's node_modules, or PATH."""
    return find_program("gemini", "LOOPD_GEMINI_BIN")


GEMINI = find_gemini()

pytestmark = pytest.mark.skipif(
    GEMINI is None or shutil.which("node") is None,
    reason=(
        f"the real Gemini CLI is needed: `npm install --no-save {GEMINI_PACKAGE}` in the "
        "repository root (as .ci/run does), or put `gemini` on PATH, or set "
        "LOOPD_GEMINI_BIN to it; node must be on PATH"
    ),
)

MODEL = "gemini-2.5-flash"
KEY_ENV = "LOOPD_TEST_GEMINI_KEY"
KEY = "AIza-loopd-test-key-0123456789"
LOOP = "fix"
TASK = "Fix add() in calc.py so that check.py passes. Do not change check.py."
NUDGE = "loopd nudge: continue the task. If something blocks you, say exactly what."
BUGGY = "def add(a, b):\n    return a - b\n"
WRONG = "def add(a, b):\n    return a * b\n"
FIXED = "def add(a, b):\n    return a + b\n"
CHECK = (
    "from calc import add\n\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\nprint('ok')\n"
)
FIRST_ANSWER = "I changed add() in calc.py; it should work now."
SECOND_ANSWER = "Fixed add() in calc.py: it returns a + b now, and check.py passes."
# The person's own Gemini CLI settings, as a careful user keeps them for unattended runs.
USER_SETTINGS = {
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "ui": {"theme": "GitHub"},  # a key of the person's that must survive loopd's additions
}
# Long enough that gemini's start is not a stall: 3-6 s of silence on a busy 2-core machine,
# 9.2 s at most in CI under the whole suite's load.
STALL_AFTER = 20


@pytest.fixture
def gemini_server() -> Iterator[ScriptedGeminiServer]:
    """A started scripted Gemini API on 127.0.0.1; give it a script with `.script`."""
    with ScriptedGeminiServer(models=[MODEL]) as server:
        yield server


# --- the agent's side of the conversation ---------------------------------------------------


def nudged(call: GeminiCall) -> bool:
    return any(NUDGE in text for text in call.user_texts())


def workdir(call: GeminiCall) -> str:
    """The run's worktree, as Gemini CLI tells the model in its first user message."""
    for text in call.user_texts():
        marker = "- **Workspace Directories:**\n  - "
        if marker in text:
            return text.split(marker, 1)[1].split("\n", 1)[0].strip()
    raise AssertionError("gemini did not say its workspace")


def write_calc(call: GeminiCall, content: str, text: str) -> Spec:
    """One write_file call on calc.py (Gemini CLI's write tool takes an absolute path)."""
    path = f"{workdir(call)}/calc.py"
    return {
        "text": text,
        "calls": [{"name": "write_file", "args": {"file_path": path, "content": content}}],
    }


def agent_script(decide: Callable[[GeminiCall], Spec]) -> Callable[[GeminiCall], Spec]:
    """The agent's turns (with tools) go to `decide`; any side request gets an empty JSON."""

    def reply(call: GeminiCall) -> Spec:
        return decide(call) if call.has_tools else "{}"

    return reply


def wrong_then_right(call: GeminiCall) -> Spec:
    """First a wrong edit and an answer; after the nudge, the right edit and an answer."""
    if not nudged(call):
        if call.answered == "write_file":
            return FIRST_ANSWER
        return write_calc(call, WRONG, "I will fix add() in calc.py.")
    if call.answered == "write_file" and call.function_calls()[-1]["args"]["content"] == FIXED:
        return SECOND_ANSWER
    return write_calc(call, FIXED, "The checks still fail: add() must add.")


# --- one run through `loopd once` -----------------------------------------------------------


@dataclass
class Setup:
    """A home with the `fix` loop on gemini, its repository, and the environment loopd runs in."""

    home: Path
    repo: Path
    env: dict[str, str]


def set_up(tmp_path: Path, server: ScriptedGeminiServer, **loop: Any) -> Setup:
    """A fresh repository whose add() is broken, a loop to fix it with gemini on `server`."""
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY, "check.py": CHECK})
    profile = {
        "adapter": "gemini",
        "model": MODEL,
        "base_url": server.base_url,
        "api_key_env": KEY_ENV,
        "env": {"GEMINI_TELEMETRY_ENABLED": "false"},
    }
    fields = {
        "repo": str(repo),
        "task": TASK,
        "agent": "gemini",
        "done_when": [f"{shlex.quote(sys.executable)} check.py"],
        "check_timeout": "60s",
        "protect": ["check.py"],
        "max_attempts": 1,
        "attempt_timeout": "240s",
        "stall_after": "120s",
        "max_nudges": 2,
        "nudge": NUDGE,
        "timezone": "UTC",
        "critic": "off",
        **loop,
    }
    home = make_home(
        tmp_path / "home",
        tomli_w.dumps({"agents": {"gemini": profile}}),
        {LOOP: tomli_w.dumps(fields)},
    )
    user_home = tmp_path / "user-home"  # empty but for the person's Gemini CLI settings
    (user_home / ".gemini").mkdir(parents=True)
    (user_home / ".gemini" / "settings.json").write_text(json.dumps(USER_SETTINGS))
    bin_dir = tmp_path / "bin"  # loopd starts `gemini` from PATH, as a user's daemon would
    bin_dir.mkdir()
    assert GEMINI is not None
    (bin_dir / "gemini").symlink_to(GEMINI.resolve())
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(user_home),
        KEY_ENV: KEY,
    }
    return Setup(home, repo, env)


def run_loop(tmp_path: Path, server: ScriptedGeminiServer, **loop: Any) -> Outcome:
    """`loopd once fix` with gemini on `server`."""
    setup = set_up(tmp_path, server, **loop)
    proc = loopd(setup.home, "once", LOOP, timeout=400, env=setup.env)
    lines = proc.stdout.splitlines()
    assert lines, f"loopd once printed no run id\n{proc.stderr[-3000:]}"
    run_id = lines[0].strip()
    run = tomllib.loads((setup.home / "state" / "runs" / run_id / "run.toml").read_text())
    return Outcome(proc.returncode, proc.stdout, proc.stderr, run_id, run, setup.home, setup.repo)


def logs_of(outcome: Outcome) -> str:
    proc = loopd(outcome.home, "logs", outcome.run_id, env={"HOME": str(outcome.home.parent)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def assert_resumed(outcome: Outcome, server: ScriptedGeminiServer, answered: bool = True) -> None:
    """The nudge went to the same session: `--resume ID`, and the server saw the history."""
    session = outcome.attempt["session_id"]
    assert session
    assert {e["session_id"] for e in stdout_events(outcome, "session")} == {session}
    starts = loopd_lines(outcome, "process", event="started")
    assert len(starts) == outcome.attempt["nudges"] + 1
    assert "--resume" not in shlex.split(starts[0]["argv"])
    for start in starts[1:]:
        argv = shlex.split(start["argv"])
        assert argv[argv.index("--resume") + 1] == session
    resumed = next(c for c in server.calls("streamGenerateContent") if nudged(c))
    assert any(TASK in text for text in resumed.user_texts()), "the resumed request lost the task"
    calls = resumed.function_calls()
    assert calls and calls[0]["name"] == "write_file" and calls[0]["args"]["content"] == WRONG
    responses = resumed.function_responses()
    assert responses and responses[0]["name"] == "write_file", "a tool result was lost"
    if answered:
        model_texts = [p.get("text", "") for p in resumed.parts("model")]
        assert FIRST_ANSWER in model_texts, "the resumed request lost the first answer"


# --- the scenarios --------------------------------------------------------------------------


def test_gemini_edits_the_checks_fail_the_nudge_resumes_the_session_and_it_fixes(
    tmp_path: Path, gemini_server: ScriptedGeminiServer
) -> None:
    require_bwrap()
    gemini_server.script(agent_script(wrong_then_right))
    outcome = run_loop(tmp_path, gemini_server)

    assert outcome.exit_code == 0, outcome.explain()
    assert outcome.run["outcome"] == "succeeded", outcome.run.get("reason")
    assert outcome.on_branch("calc.py") == FIXED and outcome.on_branch("check.py") == CHECK
    assert (outcome.repo / "calc.py").read_text() == BUGGY  # the user's checkout is untouched
    assert [e["in_force"] for e in outcome.events("sandbox")] == ["bwrap"]
    attempt = outcome.attempt
    assert attempt["nudges"] == 1
    assert [s["kind"] for s in attempt["stalls"]] == ["stopped_early"]
    assert attempt["summary"] == SECOND_ANSWER
    assert_resumed(outcome, gemini_server)
    # The write went through gemini's own tool, under the sandbox, and was answered.
    calls = stdout_events(outcome, "tool_call")
    assert [c["tool"] for c in calls] == ["write_file", "write_file"]
    assert [c["arguments"]["content"] for c in calls] == [WRONG, FIXED]
    results = stdout_events(outcome, "tool_result")
    assert [r["call_id"] for r in results] == [c["call_id"] for c in calls]
    assert not any(r.get("is_error") for r in results)
    # The key reached the server as Gemini CLI sends it, and nothing else of the host.
    streamed = [r for r in gemini_server.requests if "streamGenerateContent" in r["path"]]
    assert streamed and {r["key"] for r in streamed} == {KEY}
    assert {r["query"].get("alt") for r in streamed} == {"sse"}
    # Tokens, summed over both sessions from gemini's `result` stats; the session id.
    assert outcome.run["tokens"] > 0 and attempt["tokens"] == outcome.run["tokens"]
    usage = stdout_events(outcome, "usage")
    assert len(usage) == 2
    assert attempt["input_tokens"] == sum(u.get("input_tokens", 0) for u in usage)
    assert attempt["output_tokens"] == sum(u.get("output_tokens", 0) for u in usage)
    # What `loopd logs RUN` shows: the agent's words and tool calls; no echoed prompt as JSON.
    logs = logs_of(outcome)
    assert FIRST_ANSWER in logs and SECOND_ANSWER in logs
    assert "▶ write_file" in logs
    assert '"role":"user"' not in logs and '"type":"message"' not in logs


def test_a_spent_quota_parks_the_run_until_its_retry_delay_and_resumes_the_session(
    tmp_path: Path, gemini_server: ScriptedGeminiServer, daemons: list
) -> None:
    require_bwrap()
    quota = {"on": True}

    def decide(call: GeminiCall) -> Spec:
        if call.answered == "write_file" and quota["on"]:
            # Past 300 s Gemini CLI does not wait itself: it ends on the limit at once.
            return resource_exhausted(retry_delay="3600s")
        if call.answered == "write_file":
            return SECOND_ANSWER
        if any("usage limit" in text for text in call.user_texts()[-1:]):
            return "The edit is in place; add() in calc.py returns a + b."
        return write_calc(call, FIXED, "I will fix add() in calc.py.")

    gemini_server.script(agent_script(decide))
    setup = set_up(tmp_path, gemini_server, max_nudges=0)
    daemon = start_daemon(setup.home, env=setup.env)
    daemons.append(daemon)
    assert loopd(setup.home, "trigger", LOOP, env=setup.env).returncode == 0
    record = wait_for(
        lambda: next((r for r in runs(setup.home) if r.get("phase") == "waiting"), None),
        timeout=180,
        what="gemini's 429 to park the run",
    )
    park = record["park"]
    assert "You exceeded your current quota" in park["message"] and park["session_id"]
    assert park["reset_named"] is True
    # The reset is the retry delay gemini printed, counted from the park, plus loopd's minute.
    # (Both moments are read from the clock as the park is made: a second apart at most.)
    waited = record["resume_at"] - park["started"]
    assert abs(waited - timedelta(seconds=3600, minutes=1)) < timedelta(seconds=1), waited
    assert record["attempts"][0]["nudges"] == 0 and not record["attempts"][0].get("stalls")
    status = loopd(setup.home, "status", env=setup.env)
    assert "gemini" in status.stdout and "waiting" in status.stdout, status.stdout
    assert stop_daemon(daemon) == 0, daemon_log(setup.home)

    # The limit has lifted: the server answers again, and the reset is in the past.
    quota["on"] = False
    run_id = record["id"]
    path = setup.home / "state" / "runs" / run_id / "run.toml"
    data = tomllib.loads(path.read_text())
    data["resume_at"] = datetime.now(UTC) - timedelta(minutes=1)
    path.write_text(tomli_w.dumps(data))
    daemon = start_daemon(setup.home, env=setup.env)
    daemons.append(daemon)
    done = wait_for(
        lambda: next((r for r in runs(setup.home) if r.get("outcome")), None),
        timeout=240,
        what="the resumed run's end",
    )
    assert done["outcome"] == "succeeded", (done.get("reason"), daemon_log(setup.home)[-3000:])
    (attempt,) = done["attempts"]
    assert attempt["session_id"] == park["session_id"]
    assert git(setup.repo, "show", f"{done['branch']}:calc.py") + "\n" == FIXED
    starts = [
        e
        for e in map(
            json.loads,
            transcript_text(setup.home / "state" / "runs" / run_id / "attempt-1").splitlines(),
        )
        if e.get("stream") == "loopd" and e.get("type") == "process" and e.get("event") == "started"
    ]
    assert len(starts) == 2
    argv = shlex.split(starts[1]["argv"])
    assert argv[argv.index("--resume") + 1] == park["session_id"]
    # The resumed session's request carried the first one's history: the edit and its result.
    resumed = [
        c
        for c in gemini_server.calls("streamGenerateContent")
        if "usage limit" in " ".join(c.user_texts())
    ]
    assert resumed, "no request carried loopd's resume message"
    assert [f["name"] for f in resumed[0].function_calls()] == ["write_file"]
    assert resumed[0].function_responses()[0]["name"] == "write_file"
    kinds = [e["type"] for e in events(setup.home) if e["run"] == run_id]
    assert kinds.count("quota_wait") == 1 and "quota_resumed" in kinds
    assert stop_daemon(daemon) == 0


# A key the API rejects (400 API_KEY_INVALID) is read the same way: tests/test_adapter_gemini.py.
@pytest.mark.parametrize(
    ("refusal", "status"),
    [(unauthenticated, "UNAUTHENTICATED"), (permission_denied, "PERMISSION_DENIED")],
)
def test_refused_credentials_are_a_login_error_not_a_quota(
    tmp_path: Path, gemini_server: ScriptedGeminiServer, refusal: Callable[[], Spec], status: str
) -> None:
    require_bwrap()
    gemini_server.script(agent_script(lambda call: refusal()))
    outcome = run_loop(tmp_path, gemini_server)  # nudges allowed, and none spent

    assert_refused_login_held(outcome, "gemini", LOOP)
    assert outcome.run.get("phase") != "waiting" and not outcome.run.get("park")
    errors = stdout_events(outcome, "error")
    assert len(errors) == 1, errors
    assert errors[0].get("login") is True and not errors[0].get("quota")
    assert status in errors[0]["text"]
    assert errors[0]["text"][:80] in outcome.run["reason"]  # the reason quotes it, cut short
    exits = loopd_lines(outcome, "process", event="exited")
    assert [e["exit_code"] for e in exits] == [refusal()["status"] % 256]
    assert outcome.events("quota_wait") == []


def test_a_silent_stream_is_a_silence_stall_and_the_nudge_resumes_the_session(
    tmp_path: Path, gemini_server: ScriptedGeminiServer
) -> None:
    require_bwrap()

    def decide(call: GeminiCall) -> Spec:
        if nudged(call):
            return wrong_then_right(call)
        if call.answered == "write_file":
            # The answer starts, then the stream says nothing more with the connection open.
            return {"text": "Checking the result of the edit now, then " * 4, "silent_after": 1}
        return write_calc(call, WRONG, "I will fix add() in calc.py.")

    gemini_server.script(agent_script(decide))
    outcome = run_loop(tmp_path, gemini_server, stall_after=f"{STALL_AFTER}s", max_nudges=2)

    assert outcome.run["outcome"] == "succeeded", outcome.explain()
    attempt = outcome.attempt
    assert [s["kind"] for s in attempt["stalls"]] == ["silence"]
    assert [e["kind"] for e in outcome.events("stall")] == ["silence"]
    exits = loopd_lines(outcome, "process", event="exited")
    assert exits[0]["reason"] == "stall"
    silent = [s for s in loopd_lines(outcome, "stall", kind="silence") if "silent_seconds" in s]
    assert len(silent) == 1 and silent[0]["silent_seconds"] >= STALL_AFTER
    assert_resumed(outcome, gemini_server, answered=False)

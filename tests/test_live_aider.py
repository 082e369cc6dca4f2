"""End to end with the real aider (aider-chat 0.86.2): `loopd once` under bubblewrap.

A scripted OpenAI-compatible server (tests/model_server.py) answers aider's streamed chat
completions (litellm, `stream: true`). aider edits files through the edit format it asks the
model for in its system prompt (`whole` for a model litellm does not know), so the scripted
replies are text in that format, not tool calls. A profile `adapter = "aider"` with
`base_url` points aider at the server (`--openai-api-base`, the model as `openai/MODEL`).

aider is found at $LOOPD_AIDER_BIN, `<repository>/node_modules/.bin/aider` (where `.ci/run`
links the pinned aider of its own venv), `<repository>/.venv-aider/bin/aider`, or on PATH.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.agent_programs import find_program
from tests.helpers import (
    ROOT,
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
from tests.model_server import ScriptedModelServer, Spec
from tests.sandboxing import require_bwrap
from tests.test_e2e_qwen import Outcome, loopd_lines, stdout_events, text_of
from tests.test_login_e2e import assert_refused_login_held

AIDER_PACKAGE = "aider-chat==0.86.2"


def find_aider() -> Path | None:
    """The aider executable: $LOOPD_AIDER_BIN, the repository's links or venv, or PATH."""
    return find_program("aider", "LOOPD_AIDER_BIN", ROOT / ".venv-aider" / "bin" / "aider")


AIDER = find_aider()

pytestmark = pytest.mark.skipif(
    AIDER is None,
    reason=(
        f"the real aider is needed: `bash .ci/run --install` puts {AIDER_PACKAGE} in "
        ".venv-aider/ and links it as node_modules/.bin/aider; or set LOOPD_AIDER_BIN"
    ),
)

LOOP = "greet"
TASK = "Make hello.txt say hello, world."
NUDGE = "loopd nudge: continue the task. If something blocks you, say exactly what."
BEFORE = "hello\n"
EDITED = "hello, world\n"
# The checks want something the agent never writes: they still fail after its edit.
CHECK = (
    "import pathlib\n\ntext = pathlib.Path('hello.txt').read_text()\n"
    "assert text == 'hello, loopd\\n', f'hello.txt says {text!r}'\n"
)
FIRST_ANSWER = "hello.txt now says hello, world."
EDIT_REPLY = f"I will change the greeting.\n\nhello.txt\n```\nhello, world\n```\n\n{FIRST_ANSWER}"
# No file named: a name not in the chat would make aider add it and ask the model again.
SECOND_ANSWER = "The greeting reads hello, world now; the task asked for nothing more."
# aider's system prompt for its whole-file edit format opens with this.
SYSTEM = "Act as an expert software developer."


def messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body.get("messages") or [] if isinstance(m, dict)]


def nudged(body: dict[str, Any]) -> bool:
    return any(NUDGE in text_of(m) for m in messages(body) if m.get("role") == "user")


def carries_history(body: dict[str, Any]) -> bool:
    """The request holds the first session: its task, and the model's first answer."""
    said = [text_of(m) for m in messages(body)]
    asked = [text_of(m) for m in messages(body) if m.get("role") == "user"]
    return any(TASK in text for text in asked) and any(FIRST_ANSWER in text for text in said)


def run_loop(tmp_path: Path, server: ScriptedModelServer, **loop: Any) -> Outcome:
    """`loopd once greet` with aider on `server`, its key from the profile's `api_key_env`."""
    home, repo, env = setup(tmp_path, server, **loop)
    proc = loopd(home, "once", LOOP, timeout=400, env=env)
    lines = proc.stdout.splitlines()
    assert lines, f"loopd once printed no run id\n{proc.stderr[-3000:]}"
    run_id = lines[0].strip()
    run = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    return Outcome(proc.returncode, proc.stdout, proc.stderr, run_id, run, home, repo)


def setup(
    tmp_path: Path, server: ScriptedModelServer, **loop: Any
) -> tuple[Path, Path, dict[str, str]]:
    """A repository, a home with an aider profile and the loop, and the environment to start it."""
    repo = make_repo(tmp_path / "repo", {"hello.txt": BEFORE, "check.py": CHECK})
    profile = {
        "adapter": "aider",
        "model": "test-model",
        "base_url": server.base_url,
        "api_key_env": "LOOPD_TEST_AIDER_KEY",
    }
    fields = {
        "repo": str(repo),
        "task": TASK,
        "agent": "aider",
        "done_when": [f"{shlex.quote(sys.executable)} check.py"],
        "check_timeout": "60s",
        "protect": ["check.py"],
        "max_attempts": 1,
        "attempt_timeout": "300s",
        # aider's start on a loaded 2-core machine is silent for up to a minute (litellm's import).
        "stall_after": "120s",
        "max_nudges": 1,
        "nudge": NUDGE,
        "timezone": "UTC",
        **loop,
    }
    home = make_home(
        tmp_path / "home",
        tomli_w.dumps({"agents": {"aider": profile}}),
        {LOOP: tomli_w.dumps(fields)},
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    assert AIDER is not None
    (bin_dir / "aider").symlink_to(AIDER.resolve())
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "LOOPD_TEST_AIDER_KEY": "sk-aider-test",
    }
    return home, repo, env


def starts(outcome: Outcome) -> list[list[str]]:
    return [shlex.split(s["argv"]) for s in loopd_lines(outcome, "process", event="started")]


def edit_then_answer(body: dict[str, Any]) -> Spec:
    """The edit and an answer; after the nudge, an answer that edits nothing."""
    return SECOND_ANSWER if nudged(body) else EDIT_REPLY


def test_aider_edits_answers_and_the_nudge_carries_the_history(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.script(edit_then_answer)
    outcome = run_loop(tmp_path, model_server)

    assert outcome.run["outcome"] == "escalated", outcome.explain()
    attempt = outcome.attempt
    assert attempt["checks_passed"] is False
    assert [s["kind"] for s in attempt["stalls"]] == ["stopped_early"]
    assert attempt["nudges"] == 1 and attempt["exit_code"] == 0
    # The summary is the model's last answer, not aider's last line ("Applied edit to ...").
    assert attempt["summary"] == SECOND_ANSWER
    # The edit went through aider's whole-file format into the run's tree.
    assert outcome.on_branch("hello.txt") == EDITED
    assert (outcome.repo / "hello.txt").read_text() == BEFORE
    # aider's own files in the tree (its repo map's tags cache) are never the run's work.
    files = git(outcome.repo, "ls-tree", "-r", "--name-only", outcome.run["branch"]).split()
    assert sorted(files) == ["check.py", "hello.txt"], files
    # Two processes: the second restores the chat history, which the server sees.
    argvs = starts(outcome)
    assert len(argvs) == 2
    assert "--restore-chat-history" not in argvs[0] and "--restore-chat-history" in argvs[1]
    assert argvs[1][argvs[1].index("--message") + 1].startswith(NUDGE)
    assert argvs[0][argvs[0].index("--openai-api-base") + 1] == model_server.base_url
    assert argvs[0][argvs[0].index("--model") + 1] == "openai/test-model"
    requests = model_server.chat_requests()
    assert [nudged(r) for r in requests] == [False, True]
    first, second = requests
    assert first["stream"] is True and first["model"] == "test-model"
    assert text_of(messages(first)[0]).startswith(SYSTEM)
    assert not carries_history(first) and carries_history(second)
    # Tokens: aider's "Tokens: N sent, M received." lines, one per answer.
    usages = stdout_events(outcome, "usage")
    assert len(usages) == 2
    assert outcome.run["tokens"] == sum(u["input_tokens"] + u["output_tokens"] for u in usages) > 0
    finals = [e["text"] for e in stdout_events(outcome, "final")]
    assert finals == [EDIT_REPLY, SECOND_ANSWER]
    # Nothing reached for the network: no price list download, no update check.
    transcript = json.dumps(outcome.transcript())
    assert "raw.githubusercontent.com" not in transcript and "pypi.org" not in transcript
    assert "Unknown context window" not in transcript
    # `loopd logs RUN` shows the agent's words and its edit.
    logs = loopd(outcome.home, "logs", outcome.run_id)
    assert logs.returncode == 0, logs.stderr
    assert FIRST_ANSWER in logs.stdout and SECOND_ANSWER in logs.stdout
    assert "Applied edit to hello.txt" in logs.stdout
    require_bwrap()
    assert [e["in_force"] for e in outcome.events("sandbox")] == ["bwrap"]


def test_aider_refused_key_is_a_login_error_not_a_summary_url(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    body = {
        "error": {
            "message": "Incorrect API key provided: sk-aide***test. You can find your API key "
            "at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    model_server.script(lambda request: {"status": 401, "body": body})
    outcome = run_loop(tmp_path, model_server)  # a nudge allowed, and not spent

    assert_refused_login_held(outcome, "aider", LOOP)
    assert "Incorrect API key" in outcome.run["reason"]
    attempt = outcome.attempt
    assert attempt["exit_code"] == 0  # aider exits 0 on a refused key
    errors = stdout_events(outcome, "error")
    assert len(errors) == 1 and errors[0]["login"] is True
    assert errors[0]["text"].startswith("litellm.AuthenticationError")
    # The summary says what happened, not the URL aider offered last.
    assert attempt["summary"].startswith("litellm.AuthenticationError")
    assert "Incorrect API key" in attempt["summary"]
    assert len(model_server.chat_requests()) == 1  # aider does not retry a refused key


SILENT_STALL_AFTER = 30  # seconds


def test_aider_silent_stream_is_a_silence_stall_and_the_nudge_resumes(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    def reply(body: dict[str, Any]) -> Spec:
        if nudged(body):
            return SECOND_ANSWER
        # The answer starts, then the stream goes silent with aider alive (until the server stops).
        return {"text": EDIT_REPLY, "chunk_chars": 8, "stream_pause": {"after": 2, "seconds": 600}}

    model_server.script(reply)
    # About three times the silence of aider's start (litellm's import: 4-11 s on a busy
    # 2-core machine, load 4-8); a start taken for a stall fails below (no first request).
    outcome = run_loop(tmp_path, model_server, stall_after=f"{SILENT_STALL_AFTER}s")

    attempt = outcome.attempt
    assert [s["kind"] for s in attempt["stalls"]][:1] == ["silence"], outcome.explain()
    # The silence was the stream's: the first session's request came before it, the nudge after.
    flags = [nudged(r) for r in model_server.chat_requests()]
    assert flags[:1] == [False] and True in flags[1:], (flags, outcome.explain())
    assert attempt["nudges"] == 1
    exits = loopd_lines(outcome, "process", event="exited")
    assert [e["reason"] for e in exits] == ["stall", "exited"]
    silent = [s for s in loopd_lines(outcome, "stall", kind="silence") if "silent_seconds" in s]
    assert len(silent) == 1 and silent[0]["silent_seconds"] >= SILENT_STALL_AFTER
    assert "--restore-chat-history" in starts(outcome)[1]
    assert attempt["summary"] == SECOND_ANSWER


def test_aider_rate_limit_parks_the_run_and_resumes_with_the_history(
    tmp_path: Path, model_server: ScriptedModelServer, daemons: list
) -> None:
    # "first": answers; "limited": the nudge and all after it get 429; "open": answers again.
    phase = {"now": "first"}
    body = {
        "error": {
            "message": "You exceeded your current quota, please check your plan and billing "
            "details.",
            "type": "insufficient_quota",
            "param": None,
            "code": "insufficient_quota",
        }
    }
    limit: Spec = {"status": 429, "body": body, "headers": {"retry-after": "1"}}

    def reply(request: dict[str, Any]) -> Spec:
        if phase["now"] == "first" and nudged(request):
            phase["now"] = "limited"
        if phase["now"] == "limited":
            return limit
        if not request.get("stream"):
            # aider's summary of a long restored chat (its weak model, not streamed).
            return "The user asked to change hello.txt; it now says hello, world."
        return SECOND_ANSWER if nudged(request) else EDIT_REPLY

    model_server.script(reply)
    home, repo, env = setup(tmp_path, model_server)
    daemon = start_daemon(home, env=env)
    daemons.append(daemon)
    assert loopd(home, "trigger", LOOP).returncode == 0
    record = wait_for(
        lambda: next((r for r in runs(home) if r.get("phase") == "waiting"), None),
        timeout=400,
        what="aider's rate limit to park the run",
    )
    park = record["park"]
    assert "RateLimitError" in park["message"] and "exceeded your current quota" in park["message"]
    # loopd ended aider's own retries early: a handful of requests, not its minute of them.
    limited = len(model_server.chat_requests()) - 1
    assert 1 <= limited <= 5
    assert stop_daemon(daemon) == 0, daemon_log(home)

    phase["now"] = "open"
    run_id = record["id"]
    path = home / "state" / "runs" / run_id / "run.toml"
    data = tomllib.loads(path.read_text())
    data["resume_at"] = datetime.now(UTC) - timedelta(minutes=1)
    path.write_text(tomli_w.dumps(data))
    daemon = start_daemon(home, env=env)
    daemons.append(daemon)
    done = wait_for(
        lambda: next((r for r in runs(home) if r.get("outcome")), None),
        timeout=400,
        what="the resumed run's end",
    )
    (attempt,) = done["attempts"]
    assert attempt["summary"] == SECOND_ANSWER, (done.get("reason"), daemon_log(home)[-3000:])
    assert git(repo, "show", f"{done['branch']}:hello.txt") + "\n" == EDITED
    # The resumed aider sent the chat again: the first session's task and answer (whole, or
    # through aider's summary request when the restored chat is long), then the turn itself.
    after = model_server.chat_requests()[1 + limited :]
    assert any(TASK in json.dumps(r) and FIRST_ANSWER in json.dumps(r) for r in after)
    assert any(r.get("stream") and RESUMED in json.dumps(r) for r in after)
    types = [e["type"] for e in events(home) if e["run"] == run_id]
    assert types.count("quota_wait") == 1 and "quota_resumed" in types
    assert stop_daemon(daemon) == 0


# What parking's resume says before the task (daemon/runs/parking.py RESUME_NOTE).
RESUMED = "usage limit"

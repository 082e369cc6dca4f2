"""Each adapter recognises its agent's refused login; tool output and finished sessions never
count; a program that fails before its stream begins is told apart from one that ran.

Lines (tests/data/logins/README.md) are played by a real process through the real supervisor
and the adapter, so the check sees what a run sees: the error and result events, the final
event's success, the last lines of output, the exit code.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from daemon.agents.base import Invocation
from daemon.agents.logins import failed_at_start, is_login_text, login_of
from daemon.agents.quota import is_quota_text
from daemon.agents.registry import adapter_class
from daemon.agents.results import ProcessResult
from daemon.agents.supervisor import Supervisor
from daemon.agents.transcript import Transcript
from daemon.config import AgentProfile

DATA = Path(__file__).parent / "data" / "logins"


def adapter_of(name: str):
    profile = AgentProfile(adapter=name, command=["agent"]) if name == "command" else None
    return adapter_class(name)(profile or AgentProfile(adapter=name), environ={})


def play(tmp_path: Path, name: str, data: str, exit_code: int, stream: str = "stdout"):
    """A real process prints the lines on `stream` and exits; the supervisor reads it."""
    program = (
        "import sys; out = getattr(sys, sys.argv[3]); "
        "out.write(open(sys.argv[1], encoding='utf-8').read()); out.flush(); "
        "sys.exit(int(sys.argv[2]))"
    )
    argv = [sys.executable, "-c", program, str(DATA / data), str(exit_code), stream]
    transcript = Transcript(tmp_path / f"{data}.transcript.jsonl", 10_000_000)
    adapter = adapter_of(name)
    try:
        supervisor = Supervisor(adapter, transcript, tmp_path, {"PATH": "/usr/bin:/bin"})
        return adapter, supervisor.run(Invocation(argv=argv), timeout=60, stall_after=0)
    finally:
        transcript.close()


@pytest.mark.parametrize(
    "name, data, exit_code, stream, words",
    [
        ("qwen", "qwen-401.real.jsonl", 1, "stdout", "Incorrect API key"),
        ("opencode", "opencode-401.real.jsonl", 1, "stdout", "Incorrect API key"),
        ("claude", "claude-401.jsonl", 1, "stdout", "Invalid API key"),
        ("codex", "codex-401.jsonl", 1, "stdout", "401 Unauthorized"),
        ("gemini", "gemini-401.jsonl", 42, "stdout", "UNAUTHENTICATED"),
        # No JSON line at all: the words on stderr are what it said.
        ("gemini", "gemini-41.txt", 41, "stderr", "Invalid auth method"),
        # aider exits 0 after litellm's AuthenticationError.
        ("aider", "aider-401.txt", 0, "stdout", "AuthenticationError"),
        ("command", "command-401.txt", 1, "stdout", "401 Unauthorized"),
    ],
)
def test_each_adapter_recognises_its_refused_login(
    tmp_path: Path, name: str, data: str, exit_code: int, stream: str, words: str
) -> None:
    adapter, result = play(tmp_path, name, data, exit_code, stream)
    refused = login_of(adapter, result)
    assert refused is not None, f"{name}: {data} is a refused login"
    assert words in refused.message
    assert not is_quota_text(refused.message), "a refused login is no usage limit"


@pytest.mark.parametrize(
    "name, data, exit_code",
    [
        # A tool printed a 401 and "please log in"; the session itself succeeded (recorded).
        ("qwen", "qwen-tool-says-401.jsonl", 0),
        # A command agent that finished and talks about a 401 in its summary.
        ("command", "command-done-mentions-login.txt", 0),
    ],
)
def test_login_words_elsewhere_are_not_a_refused_login(
    tmp_path: Path, name: str, data: str, exit_code: int
) -> None:
    adapter, result = play(tmp_path, name, data, exit_code)
    assert login_of(adapter, result) is None


def test_an_adapter_that_marks_the_refusal_by_structure_needs_no_words() -> None:
    result = ProcessResult(exit_code=1, login_hint=True, last_error="API Error", stream_events=3)
    refused = login_of(adapter_of("claude"), result)
    assert refused is not None and refused.message == "API Error"


def test_a_session_loopd_killed_is_not_a_refused_login() -> None:
    killed = ProcessResult(exit_code=-15, killed=True, tail=["HTTP 401 Unauthorized"])
    assert login_of(adapter_of("command"), killed) is None
    assert login_of(adapter_of("aider"), killed) is None


@pytest.mark.parametrize(
    "text",
    [
        "Invalid API key · Please run /login",
        "Not logged in · Please run /login",
        "OAuth token has expired. Please obtain a new token or refresh your existing token.",
        'Error: 401 {"type":"error","error":{"type":"authentication_error",'
        '"message":"invalid x-api-key"}}',
        "exceeded retry limit, last status: 401 Unauthorized, request id: 9a5793386e39fede-SIN",
        "API key not valid. Please pass a valid API key.",
        '{"error":{"code":403,"message":"The caller does not have permission",'
        '"status":"PERMISSION_DENIED"}}',
        "litellm.AuthenticationError: AnthropicException - invalid x-api-key",
        "HTTP 403 Forbidden",
    ],
)
def test_the_providers_words_for_a_refused_login(text: str) -> None:
    assert is_login_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "You've hit your usage limit. try again at 12:16 PM.",
        "HTTP 429 Too Many Requests",
        "Fixed the login page: the form posts to /api/login now.",
        "All 401 tests pass.",
        "error: 404 Not Found",
    ],
)
def test_other_words_are_not_a_refused_login(text: str) -> None:
    assert not is_login_text(text)


def test_a_program_that_fails_before_its_stream_begins(tmp_path: Path) -> None:
    adapter, result = play(tmp_path, "gemini", "gemini-41.txt", 41, "stderr")
    why = failed_at_start(adapter, result)
    assert why.startswith("its program exited 41 before its stream began")
    assert "Invalid auth method selected." in why
    # One that printed its stream and failed inside it is not one.
    adapter, result = play(tmp_path, "qwen", "qwen-401.real.jsonl", 1)
    assert failed_at_start(adapter, result) == ""
    # Nor one that ended well.
    adapter, result = play(tmp_path, "gemini", "gemini-41.txt", 0, "stderr")
    assert failed_at_start(adapter, result) == ""

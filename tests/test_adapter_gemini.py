"""The gemini adapter on lines the real Gemini CLI 0.61.0 printed (tests/data/streams/gemini*,
tests/data/quota/gemini-*.real.jsonl; how they were recorded: tests/data/streams/README.md),
and the settings it writes into the run's HOME."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from daemon.agents.base import AgentEvent, Resume
from daemon.agents.deskconfig import DeskAccess
from daemon.agents.endings import ended_on_question, final_text
from daemon.agents.gemini import GeminiAdapter
from daemon.agents.quota import quota_of
from daemon.agents.results import ProcessResult
from daemon.agents.transcript import Transcript
from daemon.config import AgentProfile
from daemon.model.evidence import build_evidence
from daemon.people.transcript_text import render_lines

DATA = Path(__file__).parent / "data"
NOW = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
SESSION = "d0390a5b-8999-4524-8190-a97dbcfd5b12"


def adapter(**profile: str) -> GeminiAdapter:
    return GeminiAdapter(AgentProfile(adapter="gemini", **profile), environ={"K": "key-1"})


def parsed(name: str) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    gemini = adapter()
    for line in (DATA / name).read_text().splitlines():
        events += gemini.parse_line(line)
    return events


def result_of(events: list[AgentEvent]) -> ProcessResult:
    """What the supervisor keeps of a session's events (agents/supervised.py `_account`)."""
    result = ProcessResult(exit_code=173)
    for event in events:
        if event.type == "error":
            result.last_error, result.final_ok = event.text, None
            result.quota_hint = result.quota_hint or event.quota
            result.login_hint = result.login_hint or event.login
        elif event.type == "final":
            result.final_ok = not event.is_error
            if event.is_error and event.text:
                result.last_error = event.text
    return result


# --- the stream ------------------------------------------------------------------------------


def test_the_echoed_prompt_is_a_prompt_event_and_streamed_text_is_marked_as_pieces() -> None:
    events = parsed("streams/gemini.jsonl")
    prompts = [e for e in events if e.type == "prompt"]
    assert [e.text for e in prompts] == ["Make the failing test pass without weakening it."]
    texts = [e for e in events if e.type == "text"]
    assert texts and all(e.delta for e in texts)
    assert not [e for e in events[:-1] if e.type == "raw"]  # the last line is the garbage one


def test_a_tool_result_is_named_after_its_call() -> None:
    events = parsed("streams/gemini.jsonl")
    pairs = [(e.type, e.tool) for e in events if e.type in ("tool_call", "tool_result")]
    assert pairs == [
        ("tool_call", "run_shell_command"),
        ("tool_result", "run_shell_command"),
        ("tool_call", "replace"),
        ("tool_result", "replace"),
    ]


def test_the_resumed_session_keeps_its_id_and_ends_on_a_question() -> None:
    events = parsed("streams/gemini-resume.real.jsonl")
    assert [e.session_id for e in events if e.type == "session"] == [SESSION]
    assert [e.text for e in events if e.type == "prompt"] == ["Continue the task."]
    assert ended_on_question(final_text(events))
    assert not ended_on_question(final_text(parsed("streams/gemini.jsonl")))


def test_logs_show_the_words_whole_the_tool_calls_and_no_echoed_prompt(tmp_path: Path) -> None:
    gemini = adapter()
    transcript = Transcript(tmp_path / "transcript.jsonl", 10_000_000)
    for line in (DATA / "streams" / "gemini.jsonl").read_text().splitlines():
        transcript.write_line(NOW, "stdout", line, gemini.parse_line(line))
    transcript.close()
    lines = (tmp_path / "transcript.jsonl").read_text().splitlines()
    shown = "\n".join(line.text for line in render_lines(lines))
    assert "I'll run the tests first." in shown
    assert "The test fails: first() drops the first item. I will fix it." in shown
    assert "▶ run_shell_command" in shown and "▶ replace" in shown
    assert "◀ run_shell_command: 16 lines" in shown
    assert "Make the failing test pass" not in shown and '"type":"message"' not in shown
    full = "\n".join(line.text for line in render_lines(lines, full=True))
    assert "<< asked: Make the failing test pass without weakening it." in full


def test_the_critic_reads_the_echoed_prompt_once_not_as_the_agents_output(tmp_path: Path) -> None:
    attempt = tmp_path / "attempt-1"
    attempt.mkdir()
    gemini = adapter()
    transcript = Transcript(attempt / "transcript.jsonl", 10_000_000)
    for line in (DATA / "streams" / "gemini.jsonl").read_text().splitlines():
        transcript.write_line(NOW, "stdout", line, gemini.parse_line(line))
    transcript.close()
    task = "Make the failing test pass without weakening it."
    evidence = build_evidence(attempt, task, "Fixed the off-by-one.", 20_000)
    transcript_parts = [p for p in evidence.parts if p.title.startswith("line")]
    assert transcript_parts and not any("line 2:" in p.title for p in transcript_parts)
    assert evidence.render().count(task) == 1  # in the task's own part only
    said = "Fixed the off-by-one in app.py: first() returns the whole list now, and the test"
    assert said in evidence.render()  # the streamed pieces read as the message they make


# --- failures, by the structure of gemini's `result` -----------------------------------------


def test_a_429_with_a_retry_delay_is_a_quota_that_resets_after_it() -> None:
    events = parsed("quota/gemini-quota.real.jsonl")
    (error,) = [e for e in events if e.type == "error"]
    assert error.quota and not error.login
    assert "RESOURCE_EXHAUSTED" not in error.text  # gemini keeps the words, not the status
    hit = quota_of(adapter(), result_of(events), NOW, UTC)
    assert hit is not None and hit.reset_at == NOW + timedelta(seconds=3600)


def test_the_quota_flag_comes_from_the_structure_not_the_word() -> None:
    # The real error type is "unknown"; a 429's words need not say "quota" either.
    line = json.loads((DATA / "quota" / "gemini-quota.real.jsonl").read_text().splitlines()[2])
    assert line["error"]["type"] == "unknown"
    suffix = line["error"]["message"].split("]\n", 1)[1]
    line["error"]["message"] = "[API Error: Resource has been exhausted.]\n" + suffix
    (error,) = [e for e in adapter().parse_line(json.dumps(line)) if e.type == "error"]
    assert error.quota
    line["error"]["message"] = "[API Error: The model is overloaded, quota aside.]"
    (error,) = [e for e in adapter().parse_line(json.dumps(line)) if e.type == "error"]
    assert not error.quota


def test_a_spent_daily_quota_is_a_quota_without_a_reset() -> None:
    events = parsed("quota/gemini-daily.real.jsonl")
    (error,) = [e for e in events if e.type == "error"]
    assert error.quota and "exhausted your daily quota" in error.text
    hit = quota_of(adapter(), result_of(events), NOW, UTC)
    assert hit is not None and hit.reset_at is None  # loopd's own wait applies


@pytest.mark.parametrize(
    ("name", "word"),
    [("401", "UNAUTHENTICATED"), ("403", "PERMISSION_DENIED"), ("badkey", "API_KEY_INVALID")],
)
def test_refused_credentials_are_a_login_error(name: str, word: str) -> None:
    events = parsed(f"streams/gemini-{name}.real.jsonl")
    (error,) = [e for e in events if e.type == "error"]
    assert error.login and not error.quota
    assert word in error.text
    assert [e.is_error for e in events if e.type == "final"] == [True]
    assert quota_of(adapter(), result_of(events), NOW, UTC) is None


# --- what it starts, and the settings it writes into the run's HOME ---------------------------


def test_a_local_server_gets_the_api_key_login_selected_and_the_persons_settings_kept(
    tmp_path: Path,
) -> None:
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    person = {
        "ui": {"theme": "GitHub"},
        "security": {"auth": {"selectedType": "oauth-personal"}},
        "tools": {"sandbox": "docker", "core": ["run_shell_command"]},
    }
    settings.write_text(json.dumps(person))
    gemini = adapter(base_url="http://127.0.0.1:9/", api_key_env="K")
    gemini.desk = DeskAccess(["/venv/bin/python", "-m", "daemon.cli.main", "mcp"], {"T": "t"})
    gemini.write_tool_config(tmp_path)
    data = json.loads(settings.read_text())
    assert data["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    assert data["ui"] == {"theme": "GitHub"}
    assert data["general"]["enableAutoUpdate"] is False
    assert data["tools"] == {"sandbox": False, "core": ["run_shell_command"]}
    assert data["mcpServers"]["loopd"]["args"][-1] == "mcp"
    env = gemini.invocation("go").env
    assert (
        env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:9/" and env["GEMINI_API_KEY"] == "key-1"
    )


def test_without_a_key_or_endpoint_the_persons_login_method_stays(tmp_path: Path) -> None:
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "oauth-personal"}}}))
    gemini = adapter()
    gemini.write_tool_config(tmp_path)
    data = json.loads(settings.read_text())
    assert data["security"]["auth"]["selectedType"] == "oauth-personal"
    assert "GEMINI_API_KEY" not in gemini.invocation("go").env


def test_a_keyless_local_server_gets_a_placeholder_key() -> None:
    env = adapter(base_url="http://127.0.0.1:9").invocation("go", Resume("s", "go")).env
    assert env["GEMINI_API_KEY"] and env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:9"


def test_an_absurd_error_message_is_read_in_bounded_work() -> None:
    deep = "[API Error: " + '{"error":' * 50_000 + "]"
    line = json.dumps({"type": "result", "status": "error", "error": {"message": deep}})
    (error,) = [e for e in adapter().parse_line(line) if e.type == "error"]
    assert not error.login and not error.quota
    braces = "{" * 100_000
    line = json.dumps({"type": "result", "status": "error", "error": {"message": braces}})
    assert [e.type for e in adapter().parse_line(line)] == ["usage", "error", "final"]


def test_a_start_without_the_tools_has_the_settings_too(tmp_path: Path) -> None:
    # `loopd check`'s login try seeds a HOME and starts the agent without a desk.
    gemini = GeminiAdapter(
        AgentProfile(adapter="gemini", base_url="http://127.0.0.1:9"), private_home=tmp_path
    )
    gemini.invocation("Reply OK.")
    data = json.loads((tmp_path / ".gemini" / "settings.json").read_text())
    assert data["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert "mcpServers" not in data
    # A desk's tools written first stay when a later start writes the settings again.
    gemini.desk = DeskAccess(["/venv/bin/python", "-m", "daemon.cli.main", "mcp"], {"T": "t"})
    gemini.write_tool_config(tmp_path)
    gemini.invocation("go on", Resume("s", "go on"))
    data = json.loads((tmp_path / ".gemini" / "settings.json").read_text())
    assert data["mcpServers"]["loopd"]["env"] == {"T": "t"}
    assert GeminiAdapter(AgentProfile(adapter="gemini")).invocation("x").home is None

"""Each adapter recognises its agent's usage-limit ending, and when the limit resets.

Recorded lines (tests/data/quota/README.md) are played by a real process through the real
supervisor and the adapter, so the check sees what a run sees: the error and result events,
the final event's success, the last lines of output, the exit code. Quota words inside a
tool's output, in a warning the agent recovered from, or in a finished agent's summary
never count.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from daemon.agents.base import Invocation
from daemon.agents.quota import QuotaHit, is_quota_text, quota_of
from daemon.agents.registry import adapter_class
from daemon.agents.resets import parse_reset
from daemon.agents.results import ProcessResult
from daemon.agents.supervisor import Supervisor
from daemon.agents.transcript import Transcript
from daemon.config import AgentProfile
from daemon.runs.parking import resume_time

DATA = Path(__file__).parent / "data" / "quota"
NOW = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")


def play(tmp_path: Path, adapter_name: str, stream: str, exit_code: int) -> ProcessResult:
    """A real process prints the recorded stream and exits; the supervisor reads it."""
    profile = {"adapter": adapter_name}
    if adapter_name == "command":
        profile["command"] = ["agent"]
    adapter = adapter_class(adapter_name)(AgentProfile(**profile), environ={})
    program = (
        "import sys; sys.stdout.write(open(sys.argv[1], encoding='utf-8').read()); "
        "sys.stdout.flush(); sys.exit(int(sys.argv[2]))"
    )
    argv = [sys.executable, "-c", program, str(DATA / stream), str(exit_code)]
    transcript = Transcript(tmp_path / f"{stream}.transcript.jsonl", 10_000_000)
    try:
        supervisor = Supervisor(adapter, transcript, tmp_path, {"PATH": "/usr/bin:/bin"})
        return supervisor.run(Invocation(argv=argv), timeout=60, stall_after=0)
    finally:
        transcript.close()


def hit_of(tmp_path: Path, adapter_name: str, stream: str, exit_code: int = 1) -> QuotaHit | None:
    result = play(tmp_path, adapter_name, stream, exit_code)
    adapter = adapter_class(adapter_name)
    profile = AgentProfile(adapter=adapter_name, command=["agent"])
    return quota_of(adapter(profile, environ={}), result, NOW, BERLIN, ZoneInfo("UTC"))


# -- the agents' own endings --------------------------------------------------------------------
@pytest.mark.parametrize(
    "adapter, stream, reset",
    [
        # Recorded from Qwen Code 0.24.4 against a server answering 429 "Quota exceeded ...".
        ("qwen", "qwen-quota.real.jsonl", datetime(2026, 12, 1, 9, tzinfo=UTC)),
        # Recorded: a plain 429 "Rate limit reached ... try again in 20s", retries used up.
        ("qwen", "qwen-429.real.jsonl", NOW + timedelta(seconds=20)),
        # Claude Code: the rejected rate_limit_event's resetsAt wins over the words.
        ("claude", "claude-quota.jsonl", datetime.fromtimestamp(2_000_000_000, UTC)),
        # Recorded from Claude Code 2.1.332 with an API key: the API's 429 rate_limit_error
        # (its reset headers never reach the stream), the synthetic assistant line and the
        # result marked api_error_status 429: no reset named.
        ("claude", "claude-429.real.jsonl", None),
        # A build without that event: "resets 2:50am (UTC)" is the next 2:50 in UTC.
        ("claude", "claude-quota-text.jsonl", datetime(2026, 12, 1, 2, 50, tzinfo=UTC)),
        # Codex: "try again at 12:16 PM", in the agent's own (here UTC) zone, tomorrow.
        ("codex", "codex-quota.jsonl", datetime(2026, 12, 1, 12, 16, tzinfo=UTC)),
        # Recorded: Codex 0.171 on the ChatGPT backend's 429 `usage_limit_reached` ("try again
        # at 5:47 AM.", its zone UTC), and on the API's 429 `insufficient_quota` (no reset).
        ("codex", "codex-usage-limit.real.jsonl", datetime(2026, 12, 1, 5, 47, tzinfo=UTC)),
        ("codex", "codex-insufficient-quota.real.jsonl", None),
        ("gemini", "gemini-quota.jsonl", NOW + timedelta(hours=2, minutes=52, seconds=39)),
        # Recorded from Gemini CLI 0.61.0: a 429 RESOURCE_EXHAUSTED whose RetryInfo says 3600s.
        ("gemini", "gemini-quota.real.jsonl", NOW + timedelta(seconds=3600)),
        # Recorded: a spent daily quota (QuotaFailure ...PerDay...): no reset named.
        ("gemini", "gemini-daily.real.jsonl", None),
        # opencode's 429 says so by its status; the server's Retry-After is kept in the text.
        ("opencode", "opencode-quota.jsonl", NOW + timedelta(seconds=3600)),
        # A step finished, then the next request hit the limit: the error is the last word.
        ("opencode", "opencode-quota-after-step.jsonl", NOW + timedelta(seconds=3600)),
        # aider prints litellm's RateLimitError with the body, retries, gives up (recorded,
        # exit 0): no reset named ("Retrying in 0.2 seconds" is aider's wait, not a reset).
        ("aider", "aider-quota.txt", None),
        # A command agent's last lines: HTTP 429 with a Retry-After.
        ("command", "command-quota.txt", NOW + timedelta(seconds=120)),
    ],
)
def test_each_adapter_recognises_its_quota_ending_and_the_reset(
    tmp_path: Path, adapter: str, stream: str, reset: datetime | None
) -> None:
    hit = hit_of(tmp_path, adapter, stream)
    assert hit is not None, f"{adapter}: {stream} is a usage-limit ending"
    assert hit.reset_at == reset
    assert hit.message


@pytest.mark.parametrize(
    "adapter, stream, exit_code",
    [
        # A tool printed Claude's quota words and a 429; the session itself succeeded.
        ("qwen", "qwen-tool-says-quota.jsonl", 0),
        # The session resumed after a quota and succeeded (recorded).
        ("qwen", "qwen-fine.real.jsonl", 0),
        # Only retry notices, no result (recorded; a stall or the timeout ends such a run).
        ("qwen", "qwen-retrying.real.jsonl", 0),
        # Claude retried a transient 429 by itself and finished.
        ("claude", "claude-retry.jsonl", 0),
        # The same, recorded from Claude Code 2.1.332.
        ("claude", "../streams/claude-retry.real.jsonl", 0),
        # A refused key is no usage limit (recorded).
        ("claude", "../streams/claude-401.real.jsonl", 1),
        # Codex's plan does not include it: waiting does not help.
        ("codex", "codex-plan.jsonl", 1),
        # Codex could not reach its endpoint (recorded): "Reconnecting..." then a 404.
        ("codex", "../streams/codex-noroute.real.jsonl", 1),
        # Codex's key was refused (recorded): a login to fix, not a limit to wait out.
        ("codex", "../streams/codex-401.real.jsonl", 1),
        # Gemini warned of a short quota, retried by itself, and finished.
        ("gemini", "gemini-warning.jsonl", 0),
        # Gemini's refused credentials (recorded: 401, 403, a key the API rejects).
        ("gemini", "../streams/gemini-401.real.jsonl", 145),
        ("gemini", "../streams/gemini-403.real.jsonl", 147),
        ("gemini", "../streams/gemini-badkey.real.jsonl", 144),
        # A command agent that finished (exit 0) and talks about quotas in its summary.
        ("command", "command-done-mentions-quota.txt", 0),
        # aider got past a rate limit on its first retry and answered (recorded lines).
        ("aider", "aider-429-answered.txt", 0),
        # The same words with exit 1 are the agent failing on the quota: see the next test.
    ],
)
def test_quota_words_elsewhere_are_not_a_quota_ending(
    tmp_path: Path, adapter: str, stream: str, exit_code: int
) -> None:
    assert hit_of(tmp_path, adapter, stream, exit_code) is None


def test_a_command_agent_failing_on_a_quota_in_its_last_lines_is_one(tmp_path: Path) -> None:
    assert hit_of(tmp_path, "command", "command-done-mentions-quota.txt", 1) is not None
    assert hit_of(tmp_path, "command", "command-quota.txt", 0) is None


def test_a_session_loopd_killed_is_not_a_quota_ending(tmp_path: Path) -> None:
    adapter = adapter_class("command")(AgentProfile(adapter="command", command=["a"]), environ={})
    killed = ProcessResult(exit_code=-15, killed=True, tail=["HTTP 429 Too Many Requests"])
    assert quota_of(adapter, killed, NOW, BERLIN) is None
    failed = ProcessResult(exit_code=1, tail=["HTTP 429 Too Many Requests"])
    assert quota_of(adapter, failed, NOW, BERLIN) is not None


def test_disk_quota_is_not_a_usage_limit() -> None:
    assert not is_quota_text("OSError: [Errno 122] Disk quota exceeded: 'out.bin'")
    assert is_quota_text("insufficient_quota: You exceeded your current quota")


# -- reset times --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        # "resets 9am" is the next 9:00 in the zone named...
        (
            "You've hit your limit · resets 9am (Europe/Berlin)",
            datetime(2026, 12, 1, 8, tzinfo=UTC),
        ),
        # ...else in the loop's zone (Berlin here); 6:20pm today has not come yet there.
        ("You've hit your limit · resets 7pm", datetime(2026, 12, 1, 18, tzinfo=UTC)),
        ("Session limit reached ∙ resets 2am", datetime(2026, 12, 1, 1, tzinfo=UTC)),
        (
            "You've hit your limit · resets Apr 23 at 4pm (America/Recife)",
            datetime(2027, 4, 23, 19, tzinfo=UTC),
        ),
        ("Claude AI usage limit reached|1762952400", datetime(2025, 11, 12, 13, tzinfo=UTC)),
        (
            "You have hit your usage limit. Try again in 2 days 17 hours 14 minutes.",
            NOW + timedelta(days=2, hours=17, minutes=14),
        ),
        (
            "You have reached your specified API usage limits. You will regain access on "
            "2026-04-01 at 00:00 UTC.",
            datetime(2026, 4, 1, tzinfo=UTC),
        ),
        (
            "HTTP 429; retry-after: Wed, 02 Dec 2026 07:28:00 GMT",
            datetime(2026, 12, 2, 7, 28, tzinfo=UTC),
        ),
        ("You've hit your usage limit. Try again later.", None),
    ],
)
def test_reset_times_are_read_in_the_zone_they_name_else_the_loops(
    text: str, expected: datetime | None
) -> None:
    assert parse_reset(text, NOW, BERLIN) == expected


def test_the_wait_is_the_reset_plus_a_minute_else_30_minutes_doubling_to_4_hours() -> None:
    reset = NOW + timedelta(hours=1)
    assert resume_time(reset, 1, NOW) == (reset + timedelta(minutes=1), True)
    # A reset already past counts as none named.
    waits = [resume_time(NOW - timedelta(minutes=5), n, NOW)[0] - NOW for n in range(1, 7)]
    minutes = [int(w.total_seconds() // 60) for w in waits]
    assert minutes == [30, 60, 120, 240, 240, 240]
    assert resume_time(None, 1, NOW)[1] is False


def test_aider_retrying_its_rate_limit_is_ended_at_the_cap_and_parks(tmp_path: Path) -> None:
    """aider would retry a 429 for a minute (no flag or variable shortens it): the supervisor
    ends it at the adapter's usage-limit event, as its own ending, and the limit is read."""
    lines = (DATA / "aider-quota.txt").read_text().splitlines()
    cap = lines.index("Retrying in 2.0 seconds...")
    adapter = adapter_class("aider")(AgentProfile(adapter="aider"), environ={})
    program = "import sys, time; sys.stdout.write(sys.argv[1]); sys.stdout.flush(); time.sleep(600)"
    text = "\n".join(lines[: cap + 1]) + "\n"
    transcript = Transcript(tmp_path / "transcript.jsonl", 10_000_000)
    try:
        supervisor = Supervisor(adapter, transcript, tmp_path, {"PATH": "/usr/bin:/bin"})
        argv = [sys.executable, "-c", program, text]
        result = supervisor.run(Invocation(argv=argv), timeout=300, stall_after=0)
    finally:
        transcript.close()
    assert not result.timed_out and not result.killed and result.stall is None
    assert result.exit_code is not None and result.exit_code < 0  # ended by loopd's signal
    assert result.quota_hint and result.final_ok is False
    assert result.final_text.startswith("litellm.RateLimitError")
    hit = quota_of(adapter, result, NOW, BERLIN, ZoneInfo("UTC"))
    assert hit is not None and "exceeded your current quota" in hit.message
    assert hit.reset_at is None
    records = [
        json.loads(line) for line in (tmp_path / "transcript.jsonl").read_text().splitlines()
    ]
    exits = [r for r in records if r.get("type") == "process" and r.get("event") == "exited"]
    assert [e["reason"] for e in exits] == ["usage limit"]

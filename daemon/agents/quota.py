"""Usage limits: whether an agent session ended on its quota, and when the quota resets.

Where the words count, per adapter (never inside a tool's output, which an agent fills with
whatever it read):
- agents with a structured stream: the session's error or result event only (`last_error`),
  and only when the session did not end with a successful result afterwards; Claude Code's
  `rate_limit_event` with status `rejected` and opencode's `statusCode` 429 say so by
  their structure (`quota_hint`);
- aider and `command` agents, which print plain text: the last lines of their output
  (`tail`); a `command` agent must also have exited non-zero, so a run whose agent finishes
  and mentions a quota in its summary is not mistaken for one that hit it, and an aider that
  answered after its rate limit (its `final`) got past it.
A session loopd itself ended (timeout, stall, stop) is not a quota ending.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from daemon.agents.base import AgentAdapter
from daemon.agents.resets import parse_reset
from daemon.agents.results import ProcessResult

TAIL_LINES = 12  # the last lines of a plain-text agent's output that are read

# The agents' own words for a usage limit (recorded from the real CLIs, their source, and
# their users' reports): Claude Code, Codex, Gemini CLI, Qwen Code, opencode, aider/litellm,
# and OpenAI-compatible servers' 429 bodies.
_QUOTA = re.compile(
    r"\bhit your (?:[\w-]+ ){0,2}limit\b"  # Claude Code, Codex: "You've hit your (usage) limit"
    r"|\b(?:usage|session|weekly|daily|monthly|opus|sonnet|\d+-hour) limit "
    r"(?:reached|exceeded)"
    r"|\busage limits?\b[^\n]{0,60}\b(?:reached|exceeded|regain access)"
    r"|\blimit (?:will )?resets?\b"
    r"|(?<!disk )\bquota\b"  # Gemini, Qwen, OpenAI's insufficient_quota; not EDQUOT
    r"|\bresource[ _]exhausted\b|\bexhausted your (?:capacity|quota)"
    r"|\brate[ -]?limit(?:ed| reached| exceeded|error)"
    r"|\bRateLimitError\b"
    r"|\btoo many requests\b"
    r"|(?:HTTP|status(?:Code)?|API Error|error)[\s\"':=]{0,3}429\b"
    r"|\b429 (?:Too Many|Rate)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class QuotaHit:
    """A session that ended on a usage limit: the agent's words, and the reset they name."""

    message: str
    reset_at: datetime | None  # None: no reset time named


def is_quota_text(text: str) -> bool:
    """Whether `text` (an error event's message or a plain agent's last lines) names a quota."""
    return bool(_QUOTA.search(text))


def _words(adapter: AgentAdapter, result: ProcessResult) -> str:
    """The text that may say the session hit a quota, by where each adapter puts it."""
    if result.killed or result.error:
        return ""
    if result.final_ok:
        return ""  # a successful result (aider: an answer) came after any error: it went on
    if adapter.structured_stream:
        if result.quota_hint:
            return result.last_error or "usage limit reached"
        return result.last_error
    if adapter.name == "command" and not result.exit_code:
        return ""
    return "\n".join(result.tail[-TAIL_LINES:])


def quota_of(
    adapter: AgentAdapter,
    result: ProcessResult,
    now: datetime,
    zone: tzinfo,
    agent_zone: tzinfo | None = None,
) -> QuotaHit | None:
    """The usage limit `result` ended on, or None; see the module's docstring for where."""
    words = _words(adapter, result)
    if not words or not (result.quota_hint or is_quota_text(words)):
        return None
    reset = None
    if result.reset_at > 0:
        reset = datetime.fromtimestamp(result.reset_at, UTC)
    if reset is None:
        reset = parse_reset(words, now, zone, agent_zone)
    message = words.strip()
    if len(message) > 2000:
        message = message[-2000:]
    return QuotaHit(message=message, reset_at=reset)

"""Refused logins: whether an agent session ended on credentials its provider refused.

Where the words count, per adapter (never inside a tool's output, which an agent fills with
whatever it read), as for usage limits (agents/quota.py):
- agents with a structured stream: the session's error or result event only (`last_error`),
  and only when no successful result came after it; an adapter that marks the refusal by its
  stream's structure (an error event with `login`, such as Claude Code's
  `"error":"authentication_failed"`) says so without words (`login_hint`);
- a program that printed no event of its stream before it ended (it failed at its start, as
  Gemini CLI's exit 41 or a 401 before any output): the last lines of what it printed;
- aider and `command` agents, which print plain text: the last lines of their output
  (`tail`); a `command` agent must also have exited non-zero. aider exits 0 after a
  `litellm.AuthenticationError`, so its words count whatever its exit.
A session loopd itself ended (timeout, stall, stop) is not a refused login.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from daemon.agents.base import AgentAdapter
from daemon.agents.results import ProcessResult

TAIL_LINES = 12  # the last lines of a plain-text agent's output that are read
MESSAGE_MAX = 2000

# The programs' and the providers' own words for refused credentials (recorded from the real
# CLIs, their source, and their users' reports): HTTP 401/403, Anthropic's
# authentication_error, OpenAI's invalid_api_key, Google's UNAUTHENTICATED/PERMISSION_DENIED
# and API_KEY_INVALID, Claude Code's "Please run /login", litellm's AuthenticationError.
_LOGIN = re.compile(
    r"\b401\b[\s:\"',]{0,3}(?:Unauthori[sz]ed|\{)"
    r"|\b403\b[\s:\"',]{0,3}(?:Forbidden|\{)"
    r"|(?:HTTP|status(?:Code)?|API Error|error|Error)[\s\"':=(]{0,3}40[13]\b"
    r"|\blast status: 40[13]\b"
    r"|\bUnauthori[sz]ed\b"
    r"|\b(?:invalid|incorrect|missing)[ _-](?:x-)?api[ _-]?key\b"
    r"|\bAPI[ _-]?key (?:not valid|is invalid|invalid|expired)\b"
    r"|\bAPI_KEY_INVALID\b"
    r"|\bauthentication[_ ](?:error|failed)\b|\bAuthenticationError\b"
    r"|\bUNAUTHENTICATED\b|\bPERMISSION_DENIED\b"
    r"|\bplease (?:run /login|log ?in|login)\b|\brun /login\b|\bnot logged in\b"
    r"|\b(?:OAuth|access|auth) token (?:has )?(?:expired|was revoked|is invalid)\b"
    r"|\bInvalid auth method\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class LoginRefused:
    """A session that ended on refused credentials: the agent's words."""

    message: str


def is_login_text(text: str) -> bool:
    """Whether `text` (an error event's message or a plain agent's last lines) says the
    credentials were refused."""
    return bool(_LOGIN.search(text))


def started_stream(result: ProcessResult) -> bool:
    """Whether the program printed at least one event of its stream (not a raw line)."""
    return result.stream_events > 0


def _tail(result: ProcessResult) -> str:
    return "\n".join(result.tail[-TAIL_LINES:])


def _words(adapter: AgentAdapter, result: ProcessResult) -> str:
    """The text that may say the login was refused, by where each adapter puts it."""
    if result.killed or result.error:
        return ""
    if adapter.structured_stream:
        if result.final_ok:
            return ""  # a successful result came after any error: the session went on
        if result.login_hint:
            return result.last_error or "the provider refused the login"
        if not started_stream(result) and result.exit_code:
            return _tail(result)  # it failed before its stream began
        return result.last_error
    if adapter.name == "command" and not result.exit_code:
        return ""
    return _tail(result)


def login_of(adapter: AgentAdapter, result: ProcessResult) -> LoginRefused | None:
    """The refused login `result` ended on, or None; see the module's docstring for where."""
    words = _words(adapter, result)
    if not words or not (result.login_hint or is_login_text(words)):
        return None
    message = words.strip()
    if len(message) > MESSAGE_MAX:
        message = message[-MESSAGE_MAX:]
    return LoginRefused(message=message)


def failed_at_start(adapter: AgentAdapter, result: ProcessResult) -> str:
    """Why a program that ended non-zero before its stream began failed: the tail of what it
    printed (its stderr, mostly), or "" when it started its stream or ended otherwise."""
    if result.killed or result.error or result.stopped or result.timed_out:
        return ""
    if not result.exit_code or started_stream(result):
        return ""
    tail = _tail(result).strip()
    code = result.exit_code
    said = f": {tail[-1000:]}" if tail else " and printed nothing"
    return f"its program exited {code} before its stream began{said}"

"""How an agent session ended: its final summary, and the signs that it stopped early.

Pure functions over normalized events, called by the attempt logic once a session is over (and
`repeated_tool_call` also while it runs); `classify_ending` turns what is known at the end of a
session into the stall the attempt nudges, or `none`. The heuristics are conservative: a false
"it asked a question" costs a needless nudge, while a missed one costs only what the checks
catch anyway.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from daemon.agents.base import AgentEvent

# A text-only agent has no final event: its summary is its trailing text, within these bounds.
_TAIL_LINES = 40
_TAIL_CHARS = 4000

# Requests for a decision that end without a question mark.
_ASKS = re.compile(
    r"^(?:please\s+)?(?:confirm|advise|clarify|tell me"
    r"|let me know (?:which|whether|how|what|if you(?:'d| would)? (?:like|want|prefer)))\b"
    r"|\b(?:waiting for|awaiting) your (?:confirmation|input|decision|approval|answer)\b",
    re.IGNORECASE,
)

# Closing courtesies that end in "?" after the work is done: not a question about the task.
_COURTESY = re.compile(
    r"\b(?:anything else|any(?:thing)? (?:other|more|further)|further (?:help|assistance|questions)"
    r"|any questions|something else)\b",
    re.IGNORECASE,
)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def final_text(events: Sequence[AgentEvent]) -> str:
    """The agent's final summary: its last `final` event, else its trailing text."""
    for event in reversed(events):
        if event.type == "final" and event.text.strip():
            return event.text.strip()
    tail: list[str] = []
    size = 0
    for event in reversed(events):
        if event.type != "text":
            if tail:
                break
            continue
        tail.append(event.text)
        size += len(event.text)
        if len(tail) >= _TAIL_LINES or size >= _TAIL_CHARS:
            break
    return "\n".join(reversed(tail)).strip()


def ended_on_question(final_text: str) -> bool:
    """Whether the agent ended by asking the user something instead of finishing.

    Looks only at the last paragraph outside code blocks: its last sentence ends with "?"
    (closing courtesies such as "Anything else?" excepted), or it opens with a request for a
    decision ("Please confirm ...", "Let me know which ...").
    """
    paragraph = _last_paragraph(final_text)
    if not paragraph:
        return False
    sentences = [part for part in _SENTENCE_END.split(paragraph) if part.strip()]
    last = sentences[-1].strip().rstrip("*_ )\"'")
    if last.endswith("?"):
        return not _COURTESY.search(last)
    return any(_ASKS.search(sentence.strip().lstrip("*_ ")) for sentence in sentences[-2:])


def _last_paragraph(text: str) -> str:
    without_code = re.sub(r"```.*?(?:```|\Z)", "", text, flags=re.DOTALL)
    paragraphs = [part.strip() for part in re.split(r"\n\s*\n", without_code) if part.strip()]
    if not paragraphs:
        return ""
    # A list item or a heading ends a paragraph as well: the last line block is what was said last.
    return " ".join(line.strip().lstrip("-*> ").strip() for line in paragraphs[-1].splitlines())


def permission_denied(events: Sequence[AgentEvent]) -> bool:
    """Whether a tool was refused a permission during the session."""
    return any(event.type == "tool_result" and event.denied for event in events)


def repeated_tool_call(events: Sequence[AgentEvent], times: int = 3) -> bool:
    """Whether the same tool with the same arguments was called `times` times in a row.

    "In a row" counts tool calls only (text and results between them do not break a run). Pass
    the events since the last nudge to ask whether the agent is looping now.
    """
    run = 0
    previous: tuple[str, str] | None = None
    for event in events:
        if event.type != "tool_call":
            continue
        key = (event.tool, _canonical(event.arguments))
        run = run + 1 if key == previous else 1
        previous = key
        if run >= times:
            return True
    return False


def _canonical(arguments: Any) -> str:
    try:
        return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(arguments)


# An agent that says, in the last paragraph of its final message, that it cannot go on. Narrow
# on purpose (docs/behaviour.md, "An agent that gives up"): the words must say the agent
# itself stops ("I give up", "...; giving up", "I cannot continue"), not that something else
# failed or that it will not give up.
_GIVES_UP = re.compile(
    r"(?:^|[;:,.!\u2014-]\s*|\bso\s+)giving up\s*[.!]?\s*$"
    r"|\bI(?:'m| am) giving up(?: on (?:this|it|the task))?\s*[.!]?\s*$"
    r"|\bI (?:give up|have to give up|must give up)(?: on (?:this|it|the task))?\s*[.!]?\s*$"
    r"|\bI (?:cannot|can't|can ?not|am unable to|am not able to) "
    r"(?:go on|continue|proceed|make (?:any )?(?:further )?progress)(?: with (?:this|the task))?"
    r"\s*[.!]?\s*$",
    re.IGNORECASE,
)
_NEGATED = re.compile(r"\b(?:not|never|won't|instead of|rather than|without)\s+giving up\b", re.I)


def says_it_gave_up(final_text: str) -> bool:
    """Whether the agent's last paragraph says it stops: a sentence that ends with "giving
    up", says "I give up", or "I cannot continue/go on/proceed" (the sentence's end)."""
    paragraph = _last_paragraph(final_text)
    if not paragraph or _NEGATED.search(paragraph):
        return False
    clauses = [part.strip().strip("*_ )\"'") for part in _SENTENCE_END.split(paragraph)]
    return any(_GIVES_UP.search(clause) for clause in clauses if clause)


def gave_up_how(exit_code: int | None, killed: bool, final_text: str) -> str:
    """How the agent gave up, with its last words ("" when it did not): it exited non-zero
    by itself (126 and 127 aside: a program missing is `agent-failed`) or said it stops."""
    exited = exit_code not in (None, 0, 126, 127) and not killed
    if not (exited or says_it_gave_up(final_text)):
        return ""
    words = " ".join(final_text.split()[-60:])
    how = f"exit {exit_code}" if exited else "said it cannot go on"
    return f"{how}: {words}" if words else how


# -- how a session ended, as the attempt acts on it ----------------------------------------

StallKind = Literal[
    "silence",
    "repeated_tool_call",
    "question",
    "stopped_early",
    "permission_denied",
    "gave_up",
    "none",
]
DETAIL_CHARS = 500


@dataclass(frozen=True)
class SessionEnd:
    """What is known when one agent session is over (no process of it is left)."""

    stall: str | None = None  # the supervisor's: silence | repeated_tool_call
    denied: bool = False  # a tool call was refused a permission
    final_text: str = ""
    last_tool_call: str = ""  # tool and arguments of the last call, for the detail
    stall_after: str = ""  # the loop's stall_after, as the person wrote it
    checks_failed: bool | None = None  # None: the checks were not run after the session
    checks_tail: str = ""


@dataclass(frozen=True)
class Ending:
    """Whether the session stalled (and so earns a nudge), of which kind, and why."""

    kind: StallKind
    detail: str = ""

    @property
    def stalled(self) -> bool:
        return self.kind != "none"


def classify_ending(end: SessionEnd) -> Ending:
    """How a session ended: the supervisor's stall first, then a refusal, a question, and
    stopping while the checks fail; `none` when it simply finished."""
    if end.stall == "silence":
        return Ending("silence", f"no output and no file change for {end.stall_after}")
    if end.stall == "repeated_tool_call":
        detail = f"{end.last_tool_call[:300]} repeated" if end.last_tool_call else ""
        return Ending("repeated_tool_call", detail)
    if end.denied:
        return Ending("permission_denied", "a tool call was refused")
    if ended_on_question(end.final_text):
        return Ending("question", end.final_text[-300:])
    if end.checks_failed:
        return Ending("stopped_early", "the session ended; checks still fail")
    return Ending("none")

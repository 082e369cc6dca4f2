"""How a session ended, as the attempt acts on it: one table, one pure function."""

from __future__ import annotations

import pytest

from daemon.agents.endings import Ending, SessionEnd, classify_ending

DONE = "Fixed add() in calc.py; python3 check.py passes."
ASKS = "I found two ways to fix it. Which one do you prefer?"


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        (SessionEnd(final_text=DONE), Ending("none")),
        (SessionEnd(final_text=DONE, checks_failed=False), Ending("none")),
        (
            SessionEnd(stall="silence", stall_after="5m", final_text=DONE),
            Ending("silence", "no output and no file change for 5m"),
        ),
        (
            SessionEnd(stall="repeated_tool_call", last_tool_call="bash {'cmd': 'ls'}"),
            Ending("repeated_tool_call", "bash {'cmd': 'ls'} repeated"),
        ),
        (SessionEnd(stall="repeated_tool_call"), Ending("repeated_tool_call", "")),
        (
            SessionEnd(denied=True, final_text=ASKS),
            Ending("permission_denied", "a tool call was refused"),
        ),
        (SessionEnd(final_text=ASKS), Ending("question", ASKS)),
        (SessionEnd(final_text="Done. Anything else?"), Ending("none")),
        (
            SessionEnd(final_text=DONE, checks_failed=True, checks_tail="FAILED"),
            Ending("stopped_early", "the session ended; checks still fail"),
        ),
        # The supervisor's stall wins over what the session said at its end.
        (
            SessionEnd(stall="silence", stall_after="1m", final_text=ASKS, checks_failed=True),
            Ending("silence", "no output and no file change for 1m"),
        ),
        # A question wins over failing checks: it is answered by a nudge, not by the checks.
        (SessionEnd(final_text=ASKS, checks_failed=True), Ending("question", ASKS)),
    ],
)
def test_classify_ending(end: SessionEnd, expected: Ending) -> None:
    ending = classify_ending(end)
    assert ending == expected
    assert ending.stalled == (expected.kind != "none")

"""The shared adapter suite, for loopd's adapters and a plugin's: checks over recorded streams.

A plugin's tests subclass `AdapterSuite` (pytest collects it) with its own recordings:

    class TestMyAgent(AdapterSuite):
        recordings = [Recording("my-agent", Path(__file__).parent / "my-agent.jsonl",
                                session="s-1", final="Done.", usage=(120, 30, 0.0))]

Each check reads what the adapter declares (`structured_stream`, `session_resume`,
`tool_calls`, `usage`) and holds it to the recorded lines; docs/adapters.md explains them.
Needs pytest, which loopd itself does not: import this module from tests only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from daemon.agents.base import AgentAdapter, AgentEvent
from daemon.agents.endings import final_text
from daemon.agents.registry import adapter_class
from daemon.config import AgentProfile

GARBAGE = "this is not json {"
# Lines no agent writes, which no adapter may raise on: every shape a JSON line can take.
ODD_LINES = [
    "",
    "   ",
    "[]",
    "null",
    '"a string"',
    "{}",
    '{"type": null}',
    '{"type": "assistant", "message": null}',
    '{"type": "assistant", "message": {"content": "not a list"}}',
    '{"type": "assistant", "message": {"content": [1, null, {"type": "tool_use"}]}}',
    '{"type": "user", "message": {"content": [{"type": "tool_result", "content": [{"x": 1}]}]}}',
    '{"type": "result", "usage": "lots", "total_cost_usd": "free", "is_error": true}',
    '{"type": "system", "subtype": "init", "session_id": 42}',
    '{"type": "item.completed", "item": {"type": "command_execution", "exit_code": "x"}}',
    '{"type": "item.completed", "item": "oops"}',
    '{"type": "turn.completed", "usage": [1, 2]}',
    '{"type": "turn.failed", "error": "boom"}',
    '{"type": "tool_use", "part": {"state": "done"}, "sessionID": 7}',
    '{"type": "step_finish", "part": {"tokens": {"input": "1", "cache": 5}}}',
    '{"type": "error", "error": {"data": {"message": 3}}}',
    '{"type": "message", "role": "assistant", "content": ["a", {"text": "b"}]}',
    '{"type": "tool_result", "status": "error", "error": "no"}',
    '{"type": "result", "status": "error", "stats": {"input_tokens": true}}',
    '{"type": "result", "usage": {"input_tokens": Infinity}, "total_cost_usd": NaN}',
    '{"type": "turn.completed", "usage": {"input_tokens": -Infinity}}',
    '{"type": "step_finish", "part": {"tokens": {"input": NaN}, "cost": Infinity}}',
    '{"type": "result", "stats": {"input_tokens": 1e400}}',
    "Tokens: lots sent, none received.",
    "Tokens: 1.2.3k sent, 5 received. Cost: $1.2.3 message, $0 session.",
    '{"type": "text"' + "x" * 10_000,
    "[" * 100_000,
]


@dataclass(frozen=True)
class Recording:
    """One recorded stream of an adapter's agent, and what a correct reading finds in it."""

    adapter: str  # the name the adapter is registered under
    path: Path  # the lines as the agent wrote them, one a line
    session: str = ""  # the session id (for adapters with session_resume and resume_needs_id)
    final: str = ""  # the final answer, exactly; or
    final_contains: str = ""  # a piece of it, for agents whose answer is their whole output
    usage: tuple[int, int, float] | None = None  # summed input, output tokens and cost
    profile: dict[str, Any] = field(default_factory=dict)  # extra AgentProfile keys

    def adapter_object(self) -> AgentAdapter:
        """A fresh adapter, as loopd makes one, with no environment of the host's."""
        profile = AgentProfile(adapter=self.adapter, **self.profile)
        return adapter_class(self.adapter)(profile, environ={})

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines()

    def events(self) -> tuple[AgentAdapter, list[AgentEvent]]:
        adapter = self.adapter_object()
        return adapter, [event for line in self.lines() for event in adapter.parse_line(line)]


def check_every_line_gives_an_event(rec: Recording) -> None:
    """No line is dropped: each gives at least one event."""
    adapter = rec.adapter_object()
    for line in rec.lines():
        assert adapter.parse_line(line), f"{rec.adapter} dropped the line {line[:80]!r}"


def check_unparsable_line_kept(rec: Recording) -> None:
    """A line the adapter cannot read is kept verbatim: raw for JSON agents, text otherwise."""
    adapter = rec.adapter_object()
    for line in rec.lines()[:-1]:  # stateful adapters mid-stream
        adapter.parse_line(line)
    expected = "raw" if adapter.structured_stream else "text"
    assert [(e.type, e.text) for e in adapter.parse_line(GARBAGE)] == [(expected, GARBAGE)]


def check_structured_stream(rec: Recording) -> None:
    """`structured_stream` is declared truthfully."""
    adapter, events = rec.events()
    if adapter.structured_stream:
        assert {"session", "final"} <= {e.type for e in events if e.type != "raw"}
    else:
        assert not [e for e in events if e.type == "raw"]
        # A plain agent's `final` is the answer it found among its lines (aider).
        assert {e.type for e in events} <= {"text", "usage", "error", "final"}


def check_session(rec: Recording) -> None:
    """The session id is found when the adapter resumes by id, and none is made up otherwise."""
    adapter, events = rec.events()
    sessions = {e.session_id for e in events if e.type == "session"}
    if adapter.session_resume and adapter.resume_needs_id:
        assert sessions == {rec.session}, sessions
    else:
        assert sessions == set(), sessions


def check_tool_calls(rec: Recording) -> None:
    """Tool calls and their results are paired by call id, each result after its call."""
    adapter, events = rec.events()
    calls = [e for e in events if e.type == "tool_call"]
    results = [e for e in events if e.type == "tool_result"]
    if not adapter.tool_calls:
        assert calls == [] and results == []
        return
    assert calls, f"{rec.adapter}: no tool call in the recorded lines"
    assert all(call.tool and call.call_id for call in calls)
    assert sorted(c.call_id for c in calls) == sorted(r.call_id for r in results)
    for call in calls:
        result_at = next(
            i for i, e in enumerate(events) if e.type == "tool_result" and e.call_id == call.call_id
        )
        assert events.index(call) < result_at, "a result came before its call"
    assert all(isinstance(call.arguments, dict) for call in calls)


def check_final(rec: Recording) -> None:
    """The final answer is found: the last `final` event, and what loopd's endings read."""
    _, events = rec.events()
    if rec.final:
        finals = [e for e in events if e.type == "final"]
        assert finals and finals[-1].text == rec.final, finals
        assert not finals[-1].is_error
        assert final_text(events) == rec.final
    else:
        assert rec.final_contains and rec.final_contains in final_text(events)


def check_usage(rec: Recording) -> None:
    """Usage events sum to the recorded totals; an adapter without `usage` reports none."""
    adapter, events = rec.events()
    usages = [e for e in events if e.type == "usage"]
    if not adapter.usage:
        assert usages == []
        return
    assert rec.usage is not None, f"{rec.adapter} declares usage: give the recording's totals"
    input_tokens, output_tokens, cost = rec.usage
    assert sum(e.input_tokens for e in usages) == input_tokens
    assert sum(e.output_tokens for e in usages) == output_tokens
    assert sum(e.cost_usd for e in usages) == pytest.approx(cost)


def check_odd_lines(rec: Recording) -> None:
    """No line, however odd, makes the adapter raise; each gives events."""
    adapter = rec.adapter_object()
    for line in ODD_LINES:
        events = adapter.parse_line(line)
        assert events and all(isinstance(event, AgentEvent) for event in events)


CHECKS = (
    check_every_line_gives_an_event,
    check_unparsable_line_kept,
    check_structured_stream,
    check_session,
    check_tool_calls,
    check_final,
    check_usage,
    check_odd_lines,
)


class AdapterSuite:
    """The shared checks as a pytest class: subclass it as `Test...` and set `recordings`."""

    recordings: ClassVar[Sequence[Recording]] = ()

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "recording" in metafunc.fixturenames:
            assert self.recordings, f"{type(self).__name__}: set `recordings`"
            ids = [rec.path.name for rec in self.recordings]
            metafunc.parametrize("recording", list(self.recordings), ids=ids)

    def test_every_line_gives_an_event(self, recording: Recording) -> None:
        check_every_line_gives_an_event(recording)

    def test_unparsable_line_kept(self, recording: Recording) -> None:
        check_unparsable_line_kept(recording)

    def test_structured_stream_declared_truthfully(self, recording: Recording) -> None:
        check_structured_stream(recording)

    def test_session_id_found(self, recording: Recording) -> None:
        check_session(recording)

    def test_tool_calls_paired_by_call_id(self, recording: Recording) -> None:
        check_tool_calls(recording)

    def test_final_text_found(self, recording: Recording) -> None:
        check_final(recording)

    def test_usage_summed(self, recording: Recording) -> None:
        check_usage(recording)

    def test_odd_lines_never_raise(self, recording: Recording) -> None:
        check_odd_lines(recording)

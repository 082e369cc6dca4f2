"""What one supervised agent process did: how it ended and what it reported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemon.agents.stalls import StallKind


@dataclass
class ToolCall:
    """One tool call as the agent made it (arguments redacted, large ones shortened)."""

    tool: str
    arguments: Any


@dataclass
class ProcessResult:
    """How one agent process ended and what it reported. Every string in it is redacted."""

    exit_code: int | None = None  # negative: killed by that signal; None: never started
    timed_out: bool = False
    stopped: bool = False  # stop() was called during (or before) this run
    stop_reason: str = ""
    stall: StallKind | None = None
    session_id: str = ""  # the last one seen
    final_text: str = ""  # the last `final` event's text, else the last `text` event's
    events: int = 0  # events parsed from stdout plus stderr lines
    stream_events: int = 0  # events parsed from stdout, raw lines not counted
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    denied: bool = False  # a tool_result said a permission was refused
    killed: bool = False  # loopd ended the process (timeout, stall, stop), not the agent
    last_error: str = ""  # the last `error` event's text
    final_ok: bool | None = None  # the last `final` event's success (None: none since an error)
    quota_hint: bool = False  # an error event said by its structure that a usage limit hit
    reset_at: float = 0.0  # epoch seconds of the limit's reset, where the stream gives it
    login_hint: bool = False  # an error event said by its structure that the login was refused
    tail: list[str] = field(default_factory=list)  # the last lines of output (both streams)
    error: str = ""  # why the process could not be started
    limit_hit: str = ""  # the run limit its processes ran into: "processes", "memory"
    pid: int = 0
    output_bytes: int = 0
    started: float = 0.0  # time.monotonic()
    finished: float = 0.0  # time.monotonic()

    @property
    def duration(self) -> float:
        return max(0.0, self.finished - self.started)

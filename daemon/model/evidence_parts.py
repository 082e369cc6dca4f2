"""The parts of an attempt folder the evidence is made of: indexed in one streamed pass, each
loaded again (whole or trimmed at both ends) only when it gets a share of the budget."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.excerpt import excerpt
from daemon.model.citations import Citation, weigh
from daemon.redact import redact
from daemon.state.stored import open_stored

GROUP_BYTES = 64_000  # consecutive output lines are grouped into parts of about this size
ARGUMENTS_PREVIEW = 300  # characters of a tool call's arguments shown in its heading


def cut_marker(n: int) -> str:
    """The explicit marker left where `n` characters were cut."""
    return f"[... {n} characters cut ...]"


@dataclass
class Source:
    """A part of the attempt folder, indexed but not loaded."""

    section: str  # checks | diff | transcript | prompt
    label: str
    path: Path
    order: int  # position among all parts, for rendering in file order
    ranges: list[tuple[int, int]] = field(default_factory=list)  # byte (offset, length)
    size: int = 0  # characters of its text, before redaction
    first_line: int = 0
    last_line: int = 0
    head_share: float = 0.5  # of a trimmed body, how much is kept from the start
    json_lines: bool = False  # transcript: lines are JSON events, rendered by _event_text
    group: str = ""  # transcript output lines: the (stream, type) they share
    hits: set[int] = field(default_factory=set)
    score: float = 0.0
    tier: int = 3  # 0 cited, 1 checks and diff, 2 loopd's own events, 3 the rest, 4 prompt

    @property
    def title(self) -> str:
        if self.section != "transcript":
            return self.label
        span = (
            f"line {self.first_line}"
            if self.first_line == self.last_line
            else f"lines {self.first_line}-{self.last_line}"
        )
        return f"{span}: {self.label}"

    def add(self, number: int, offset: int, raw: bytes, chars: int) -> None:
        if self.ranges and sum(self.ranges[-1]) == offset:
            start, length = self.ranges[-1]
            self.ranges[-1] = (start, length + len(raw))
        else:
            self.ranges.append((offset, len(raw)))
        self.first_line = self.first_line or number
        self.last_line = number
        self.size += chars

    def load(self) -> str:
        """The part's full text, read again from its file."""
        chunks = []
        with open_stored(self.path) as handle:
            for offset, length in self.ranges:
                handle.seek(offset)
                chunks.append(handle.read(length))
        data = b"".join(chunks)
        if not self.json_lines:
            return data.decode("utf-8", "replace")
        return "".join(_event_text(_loads(line)) for line in data.splitlines())

    def load_trimmed(self, allot: int) -> tuple[str, int]:
        """At most about `allot` characters of the part, redacted, with the cut marked.

        The checks' output is cut as everywhere it is shown (daemon/excerpt.py): the lines
        naming failures, the first failure and the end; other parts keep their two ends.
        """
        if self.section == "checks":
            whole = redact(self.load())
            kept = excerpt(whole, allot)
            return kept, max(0, len(whole) - len(kept))
        if not self.json_lines and len(self.ranges) == 1 and self.size > 4 * allot + 4096:
            # A huge plain file: read only its two ends, with a margin for redaction.
            offset, length = self.ranges[0]
            room = max(0, allot - len(cut_marker(self.size)) - 2)
            head_n = int(room * self.head_share)
            tail_n = room - head_n
            with open_stored(self.path) as handle:
                handle.seek(offset)
                head = redact(handle.read(head_n + 256).decode("utf-8", "replace"))[:head_n]
                handle.seek(offset + length - tail_n - 256)
                tail = redact(handle.read(tail_n + 256).decode("utf-8", "replace"))
            tail = tail[len(tail) - tail_n :] if tail_n else ""
            cut = self.size - len(head) - len(tail)
            return f"{head}\n{cut_marker(cut)}\n{tail}", cut
        return trim(redact(self.load()), allot, self.head_share)


def trim(text: str, allot: int, head_share: float = 0.5) -> tuple[str, int]:
    """`text` within `allot` characters: its two ends kept, the middle cut and marked."""
    if len(text) <= allot:
        return text, 0
    room = max(0, allot - len(cut_marker(len(text))) - 2)
    head_n = int(room * head_share)
    tail_n = room - head_n
    cut = len(text) - head_n - tail_n
    tail = text[len(text) - tail_n :] if tail_n else ""
    return f"{text[:head_n]}\n{cut_marker(cut)}\n{tail}", cut


def _loads(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {"type": "raw", "text": raw.decode("utf-8", "replace").rstrip("\n")}
    return value if isinstance(value, dict) else {"type": "raw", "text": str(value)}


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def _event_text(event: dict[str, Any]) -> str:
    """How one transcript event reads inside the evidence."""
    kind = event.get("type", "raw")
    if kind == "tool_call":
        return f"$ {event.get('tool', '')} {_arguments_text(event.get('arguments'))}\n"
    if kind == "tool_result":
        flags = [f for f in ("is_error", "denied") if event.get(f)]
        mark = f"[{', '.join(flags)}]\n" if flags else ""
        output = str(event.get("output") or event.get("text") or "")
        return f"{mark}{output}" + ("" if output.endswith("\n") else "\n")
    text = str(event.get("text") or event.get("detail") or event.get("raw") or "")
    if kind == "text" and event.get("delta") is True:
        return text  # a piece of a message streamed in pieces: the next piece goes on its line
    if not text:
        extra = {k: v for k, v in event.items() if k not in ("ts", "stream", "type", "raw")}
        text = f"{kind} {json.dumps(extra, ensure_ascii=False)}" if extra else kind
    return text if text.endswith("\n") else text + "\n"


def _lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(line number from 1, byte offset, raw line) of a file, streamed."""
    offset = 0
    with open_stored(path) as handle:
        for number, raw in enumerate(handle, 1):
            yield number, offset, raw
            offset += len(raw)


def _preview(arguments: str) -> str:
    one_line = " ".join(arguments.split())
    if len(one_line) <= ARGUMENTS_PREVIEW:
        return one_line
    return one_line[:ARGUMENTS_PREVIEW] + " ..."


def index_transcript(path: Path, cites: list[Citation], order: int) -> list[Source]:
    """One part per tool call with its result, per run of output lines, per loopd event."""
    parts: list[Source] = []
    pending: dict[str, Source] = {}  # call id ("" for agents without ids) -> waiting call
    group: Source | None = None  # consecutive text/raw lines of one stream

    def new(label: str, tier: int = 3) -> Source:
        part = Source("transcript", label, path, order + len(parts), json_lines=True, tier=tier)
        parts.append(part)
        return part

    for number, offset, raw in _lines(path):
        event = _loads(raw)
        kind = str(event.get("type", "raw"))
        stream = str(event.get("stream", ""))
        if kind in ("session", "usage", "prompt"):  # prompt: the task echoed, in its own part
            continue
        text = _event_text(event)
        if kind == "tool_call":
            group = None
            arguments = _arguments_text(event.get("arguments"))
            part = new(f"tool call `{event.get('tool', '')}` {_preview(arguments)}")
            pending[str(event.get("call_id") or "")] = part
        elif kind == "tool_result":
            group = None
            call = str(event.get("call_id") or "")
            found = pending.pop(call) if call in pending else None
            part = found or new(
                f"tool result `{event.get('tool', '')}` (its call is not in the transcript)"
            )
            if event.get("is_error") or event.get("denied"):
                part.label += " (denied)" if event.get("denied") else " (error)"
        elif stream == "loopd" or kind in ("nudge", "stall", "truncated", "error", "final"):
            group = None
            label = "the agent's final message" if kind == "final" else f"{stream} {kind}"
            part = new(label.strip(), tier=2 if stream == "loopd" else 3)
        else:
            key = f"{stream} {kind}".strip()
            if group is None or group.group != key or group.size > GROUP_BYTES:
                group = new(f"output ({key})")
                group.group = key
            part = group
        part.add(number, offset, raw, len(text))
        weigh(text, cites, part.hits)
    return parts


def index_diff(path: Path, cites: list[Citation], order: int) -> list[Source]:
    """One part per file of the diff."""
    parts: list[Source] = []
    current: Source | None = None
    for number, offset, raw in _lines(path):
        line = raw.decode("utf-8", "replace")
        if current is None or line.startswith("diff --git "):
            name = line.strip().split(" b/", 1)[-1] if line.startswith("diff --git ") else "diff"
            current = Source(
                "diff",
                f"{name} (diff.patch line {number})",
                path,
                order + len(parts),
                head_share=0.7,
                tier=1,
            )
            parts.append(current)
        current.add(number, offset, raw, len(line))
        weigh(line, cites, current.hits)
    return parts


def index_whole(
    path: Path, section: str, tier: int, head_share: float, cites: list[Citation], order: int
) -> list[Source]:
    """A file as one part (checks.log, prompt.md)."""
    part = Source(section, path.name, path, order, head_share=head_share, tier=tier)
    for number, offset, raw in _lines(path):
        line = raw.decode("utf-8", "replace")
        part.add(number, offset, raw, len(line))
        weigh(line, cites, part.hits)
    return [part] if part.size else []

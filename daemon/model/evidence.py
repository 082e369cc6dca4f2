"""The evidence bundle of an attempt: what the agent really saw and did, within a budget.

The attempt folder is read in two passes. The first streams `transcript.jsonl` and
`diff.patch` line by line and keeps only an index (line numbers, byte offsets, sizes, which
of the summary's citations each part holds); the second re-reads just the parts that fit the
budget. Memory stays bounded by the budget and the longest single line, not by the files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.redact import redact

CHARS_PER_TOKEN = 4
GROUP_BYTES = 64_000  # consecutive output lines are grouped into parts of about this size
ARGUMENTS_PREVIEW = 300  # characters of a tool call's arguments shown in its heading
_SAFETY = 0.97  # room for redaction markers longer than what they replace


def cut_marker(n: int) -> str:
    """The explicit marker left where `n` characters were cut."""
    return f"[... {n} characters cut ...]"


# -- citations --------------------------------------------------------------------------


@dataclass(frozen=True)
class Citation:
    """Something the summary names that the evidence should show: a path, command, test..."""

    text: str
    weight: float
    pattern: re.Pattern[str] | None = None  # numbers match as whole words only

    def found_in(self, haystack: str) -> bool:
        if self.pattern is not None:
            return self.pattern.search(haystack) is not None
        return self.text in haystack


CITED = 2.0  # a part whose citations weigh this much is one the summary cites
_COMMANDS = (
    "pytest|python3?|pip|npm|npx|yarn|pnpm|node|make|cargo|go|ruff|mypy|tox|uv|git|grep|rg|"
    "sed|awk|cat|head|tail|ls|find|bash|sh|jest|vitest|mvn|gradle|dotnet|rspec|bundle|deno"
)
_CITATION_PATTERNS: list[tuple[re.Pattern[str], float]] = [
    (re.compile(r"`([^`\n]{2,200})`"), 3.0),  # code spans
    (re.compile(r"\"([^\"\n]{4,200})\""), 2.0),  # quoted strings
    (re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+)"), 3.0),  # paths with a folder
    (re.compile(r"(?<![\w/.-])([\w-]+\.[A-Za-z][A-Za-z0-9]{0,7})\b"), 3.0),  # file.ext
    (re.compile(r"\b(\w+::\w+(?:::\w+)*)"), 3.0),  # test ids, Rust paths
    (re.compile(r"\b(test_\w+|Test\w+|\w+_test)\b"), 3.0),  # test names
    (re.compile(r"\b([A-Za-z]\w*_\w+)\b"), 2.0),  # snake_case identifiers
    (re.compile(r"\b([a-z]+[A-Z]\w*|[A-Z][a-z0-9]+[A-Z]\w*)\b"), 2.0),  # inner capitals
    (re.compile(r"\b([A-Za-z_]\w*\()"), 2.0),  # called functions, with their parenthesis
    (re.compile(rf"\b((?:{_COMMANDS})(?: +(?:-{{1,2}}[\w=.-]+|[\w.-]*[/.][\w./:-]*))*)"), 1.0),
]
_NUMBER_PATTERNS = [
    re.compile(r"\blines?\s+(\d+)(?:\s*(?:-|to|and)\s*(\d+))?", re.IGNORECASE),
    re.compile(r"\bL(\d+)\b"),
    re.compile(r"[\w.]:(\d+)\b"),
    re.compile(r"\b(\d+) (?:passed|failed|errors?|tests?|skipped)\b"),
]
_STOP = {"e.g", "i.e", "etc", "vs", "the", "and"}


def citations(summary: str) -> list[Citation]:
    """What the agent's summary cites: files, line numbers, commands, test names, identifiers."""
    found: dict[str, Citation] = {}
    for pattern, weight in _CITATION_PATTERNS:
        for match in pattern.finditer(summary):
            text = match.group(1).strip().rstrip(".,:;")
            if len(text) < 3 or text.lower() in _STOP:
                continue
            if text not in found or found[text].weight < weight:
                found[text] = Citation(text, weight)
            if "/" in text and not text.endswith("/") and not any(c.isspace() for c in text):
                base = text.rsplit("/", 1)[1]
                if len(base) >= 3 and base not in found:
                    found[base] = Citation(base, 2.0)
    for pattern in _NUMBER_PATTERNS:
        for match in pattern.finditer(summary):
            for number in match.groups():
                if number and number not in found:
                    found[number] = Citation(
                        number, 0.5, re.compile(rf"(?<![\d.]){number}(?![\d.])")
                    )
    return list(found.values())


def _weigh(text: str, cites: list[Citation], hits: set[int]) -> None:
    for index, citation in enumerate(cites):
        if index not in hits and citation.found_in(text):
            hits.add(index)


# -- parts ----------------------------------------------------------------------------


@dataclass
class _Source:
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
        with self.path.open("rb") as handle:
            for offset, length in self.ranges:
                handle.seek(offset)
                chunks.append(handle.read(length))
        data = b"".join(chunks)
        if not self.json_lines:
            return data.decode("utf-8", "replace")
        return "".join(_event_text(_loads(line)) for line in data.splitlines())

    def load_trimmed(self, allot: int) -> tuple[str, int]:
        """At most about `allot` characters of the part, redacted, with the cut marked."""
        if not self.json_lines and len(self.ranges) == 1 and self.size > 4 * allot + 4096:
            # A huge plain file: read only its two ends, with a margin for redaction.
            offset, length = self.ranges[0]
            room = max(0, allot - len(cut_marker(self.size)) - 2)
            head_n = int(room * self.head_share)
            tail_n = room - head_n
            with self.path.open("rb") as handle:
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
    if not text:
        extra = {k: v for k, v in event.items() if k not in ("ts", "stream", "type", "raw")}
        text = f"{kind} {json.dumps(extra, ensure_ascii=False)}" if extra else kind
    return text if text.endswith("\n") else text + "\n"


def _lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(line number from 1, byte offset, raw line) of a file, streamed."""
    offset = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            yield number, offset, raw
            offset += len(raw)


def _preview(arguments: str) -> str:
    one_line = " ".join(arguments.split())
    if len(one_line) <= ARGUMENTS_PREVIEW:
        return one_line
    return one_line[:ARGUMENTS_PREVIEW] + " ..."


def _index_transcript(path: Path, cites: list[Citation], order: int) -> list[_Source]:
    """One part per tool call with its result, per run of output lines, per loopd event."""
    parts: list[_Source] = []
    pending: dict[str, _Source] = {}  # call id ("" for agents without ids) -> waiting call
    group: _Source | None = None  # consecutive text/raw lines of one stream

    def new(label: str, tier: int = 3) -> _Source:
        part = _Source("transcript", label, path, order + len(parts), json_lines=True, tier=tier)
        parts.append(part)
        return part

    for number, offset, raw in _lines(path):
        event = _loads(raw)
        kind = str(event.get("type", "raw"))
        stream = str(event.get("stream", ""))
        if kind in ("session", "usage"):
            continue
        text = _event_text(event)
        if kind == "tool_call":
            group = None
            arguments = _arguments_text(event.get("arguments"))
            part = new(f"tool call `{event.get('tool', '')}` {_preview(arguments)}")
            pending[str(event.get("call_id") or "")] = part
        elif kind == "tool_result":
            group = None
            part = pending.pop(str(event.get("call_id") or ""), None) or new(
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
        _weigh(text, cites, part.hits)
    return parts


def _index_diff(path: Path, cites: list[Citation], order: int) -> list[_Source]:
    """One part per file of the diff."""
    parts: list[_Source] = []
    current: _Source | None = None
    for number, offset, raw in _lines(path):
        line = raw.decode("utf-8", "replace")
        if current is None or line.startswith("diff --git "):
            name = line.strip().split(" b/", 1)[-1] if line.startswith("diff --git ") else "diff"
            current = _Source(
                "diff",
                f"{name} (diff.patch line {number})",
                path,
                order + len(parts),
                head_share=0.7,
                tier=1,
            )
            parts.append(current)
        current.add(number, offset, raw, len(line))
        _weigh(line, cites, current.hits)
    return parts


def _index_whole(
    path: Path, section: str, tier: int, head_share: float, cites: list[Citation], order: int
) -> list[_Source]:
    """A file as one part (checks.log, prompt.md)."""
    part = _Source(section, path.name, path, order, head_share=head_share, tier=tier)
    for number, offset, raw in _lines(path):
        line = raw.decode("utf-8", "replace")
        part.add(number, offset, raw, len(line))
        _weigh(line, cites, part.hits)
    return [part] if part.size else []


# -- the bundle ---------------------------------------------------------------------------


@dataclass
class EvidencePart:
    """One rendered part of the evidence; a part without a title marks what was left out."""

    section: str
    title: str
    body: str
    cited: bool = False  # the summary cites it
    cut: int = 0  # characters cut from it (or left out, for a gap); 0: kept whole


_HEADINGS = {
    "checks": "# Checks run by loopd after the attempt (checks.log)",
    "diff": "# The attempt's diff (diff.patch)",
    "transcript": "# What the agent did: tool calls with their verbatim outputs (transcript.jsonl)",
    "prompt": "# The prompt the agent received (prompt.md)",
}


@dataclass
class Evidence:
    """What the critic (and the post-mortem) read about one attempt, within a budget."""

    task: str
    summary: str
    violations: list[str]
    parts: list[EvidencePart]
    budget_tokens: int
    citations: list[str]  # what the summary cites, as found in it

    def render(self) -> str:
        """The evidence as Markdown for the prompt; never longer than the budget."""
        out = [
            f"# Task\n{self.task.strip()}\n",
            "\n# The agent's final summary\n"
            f"{self.summary.strip() or '(the agent gave no final summary)'}\n",
            "\n# Violations found by loopd (protected paths, moved refs)\n"
            + ("\n".join(f"- {v}" for v in self.violations) or "none")
            + "\n",
        ]
        for section, heading in _HEADINGS.items():
            parts = [p for p in self.parts if p.section == section]
            if not parts:
                continue
            out.append(f"\n{heading}\n")
            for part in parts:
                if part.title:
                    out.append(f"\n## {part.title}\n{part.body.rstrip(chr(10))}\n")
                else:
                    out.append(f"\n{part.body}\n")
        text = "".join(out)
        limit = self.budget_tokens * CHARS_PER_TOKEN
        if len(text) > limit:  # only when redaction lengthened text beyond the margin
            text, _ = trim(text, limit, 0.9)
        return text

    def cited_parts(self) -> list[EvidencePart]:
        """The parts the summary cites."""
        return [p for p in self.parts if p.cited]


def build_evidence(
    attempt_dir: Path,
    task: str,
    summary: str,
    budget_tokens: int,
    violations: list[str] | None = None,
) -> Evidence:
    """The evidence bundle of an attempt folder, within `budget_tokens` (4 characters each)."""
    violations = [redact(v) for v in (violations or [])]
    budget = int(budget_tokens * CHARS_PER_TOKEN * _SAFETY)
    cites = citations(summary)

    task_text, _ = trim(redact(task), max(200, budget // 8))
    summary_text, _ = trim(redact(summary), max(400, budget // 4))
    fixed = len(task_text) + len(summary_text) + sum(len(v) + 3 for v in violations)
    fixed += sum(len(h) + 2 for h in _HEADINGS.values()) + 200
    remaining = max(0, budget - fixed)

    sources: list[_Source] = []
    checks, diff = attempt_dir / "checks.log", attempt_dir / "diff.patch"
    transcript, prompt = attempt_dir / "transcript.jsonl", attempt_dir / "prompt.md"
    if checks.is_file():
        sources += _index_whole(checks, "checks", 1, 0.3, cites, len(sources))
    if diff.is_file():
        sources += _index_diff(diff, cites, len(sources))
    if transcript.is_file():
        sources += _index_transcript(transcript, cites, len(sources))
    if prompt.is_file():
        sources += _index_whole(prompt, "prompt", 4, 0.5, cites, len(sources))
    for source in sources:
        source.score = sum(cites[i].weight for i in source.hits)
        # The prompt restates the task, so it names the same files: it is no evidence of them.
        if source.score >= CITED and source.section != "prompt":
            source.tier = 0

    allot = _allocate(sources, remaining)
    parts: list[EvidencePart] = []
    gap: EvidencePart | None = None
    for source in sources:
        share = allot.get(id(source), 0)
        if share <= 0:
            if gap is None or gap.section != source.section:
                gap = EvidencePart(source.section, "", "")
                parts.append(gap)
            gap.cut += source.size
            gap.body = f"[... {gap.cut} characters cut: parts left out here ...]"
            continue
        gap = None
        body, cut = source.load_trimmed(share)
        parts.append(EvidencePart(source.section, source.title, body, source.tier == 0, cut))
    return Evidence(
        task=task_text,
        summary=summary_text,
        violations=violations,
        parts=parts,
        budget_tokens=budget_tokens,
        citations=[c.text for c in cites],
    )


def _overhead(source: _Source) -> int:
    """Characters a part costs besides its body: heading, newlines, a possible cut marker."""
    return len(source.title) + 8 + len(cut_marker(source.size)) + 2 + 60  # 60: a gap marker


def _allocate(sources: list[_Source], budget: int) -> dict[int, int]:
    """Characters of body for each part (by id); parts not in the result are left out.

    Cited parts first and whole, the strongest citations first, keeping a floor for the
    checks and the diff; then the checks, the diff and loopd's own events share what is left
    in equal shares; then the rest of the transcript from its end backwards, where the
    attempt concluded; the prompt last.
    """
    allot: dict[int, int] = {}
    left = budget
    min_slice = 200

    floor_parts = [s for s in sources if s.tier == 1]
    floor = min(sum(s.size + _overhead(s) for s in floor_parts), budget // 5)
    for source in sorted((s for s in sources if s.tier == 0), key=lambda s: (-s.score, s.order)):
        cost = source.size + _overhead(source)
        room = left - floor
        if cost <= room:
            allot[id(source)] = source.size
            left -= cost
        elif room > _overhead(source) + min_slice:
            allot[id(source)] = room - _overhead(source)
            left -= room

    def water_fill(group: list[_Source], pool: int) -> int:
        """Equal shares, parts smaller than a share kept whole; returns what was spent."""
        spent = 0
        waiting = sorted(group, key=lambda s: s.size)
        while waiting:
            share = pool // len(waiting)
            source = waiting.pop(0)
            want = source.size + _overhead(source)
            give = min(want, share)
            if give < want and give - _overhead(source) < min_slice:
                continue
            allot[id(source)] = give - _overhead(source)
            pool -= give
            spent += give
        return spent

    rest = [s for s in sources if s.tier == 3]
    shared = [s for s in sources if s.tier in (1, 2)]
    left -= water_fill(shared, left if not rest else left * 2 // 3)

    for source in sorted(rest, key=lambda s: -s.order):
        if left < min_slice + _overhead(source):
            break
        give = min(source.size + _overhead(source), max(left // 4, 2_000), left)
        allot[id(source)] = give - _overhead(source)
        left -= give

    for source in (s for s in sources if s.tier == 4):
        if left > min_slice + _overhead(source):
            give = min(source.size + _overhead(source), left)
            allot[id(source)] = give - _overhead(source)
            left -= give
    return allot

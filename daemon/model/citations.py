"""What an agent's summary cites (files, lines, commands, tests), and where the evidence has it."""

from __future__ import annotations

import re
from dataclasses import dataclass


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


def weigh(text: str, cites: list[Citation], hits: set[int]) -> None:
    for index, citation in enumerate(cites):
        if index not in hits and citation.found_in(text):
            hits.add(index)

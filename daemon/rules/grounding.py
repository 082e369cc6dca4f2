"""Grounding without a model: whether the evidence holds each claim a rule makes.

The claims are found by daemon/rules/claims.py. How they are matched, choices written down
here because the design leaves them open:
- The evidence of an attempt folder is transcript.jsonl, checks.log, diff.patch and
  prompt.md (verdict.toml is the critic's opinion, not evidence). For `loopd rules verify
  --evidence DIR`, every file under DIR but verdict.toml. JSON string values of the
  transcript are searched decoded, so a quote need not carry JSON escapes, and without the
  transcript's bookkeeping (times, ids, process numbers, token counts): a number a rule
  states must be in what the agent saw or did, not in a timestamp.
- Before matching, runs of whitespace (line breaks included) count as one space, on both
  sides: a quote that differs only in whitespace, or a claim split over a line break, is
  found.
- A word claim (an identifier, or a code span of one word) without digits or underscores
  is found with or without a plural -s/-es or a possessive 's: `HTTPErrors` is found where
  the evidence says `HTTPError`. Numbers, paths, and identifiers holding a digit or an
  underscore match exactly; numbers and identifiers as whole tokens (`17` is not found in
  `2017`), code spans, quoted strings and paths as substrings.
- A line location (`fetch.py:22`, `line 22 of fetch.py`) holds when the evidence shows that
  file at that line: the same words in the evidence (`fetch.py:22` in a traceback or grep
  output, `File "fetch.py", line 22`, `fetch.py line 22`), a line of a diff hunk of that
  file, or a numbered listing of it (`cat -n`, `grep -n`, `nl` output of a command naming
  the file). The file is compared by its name.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.rules.claims import Claim, claims_of, is_path, locations_in
from daemon.rules.rulefile import Evidence

__all__ = [
    "ATTEMPT_FILES",
    "Claim",
    "EvidenceSet",
    "claims_of",
    "normalize",
    "quote_in_file",
    "ungrounded",
]

ATTEMPT_FILES = ("transcript.jsonl", "checks.log", "diff.patch", "prompt.md")
NOT_EVIDENCE = {"verdict.toml"}
MAX_FILE_BYTES = 64 * 1024 * 1024
# Transcript keys that hold bookkeeping, not what the agent saw or did; `raw` repeats the
# agent's own line, ids and all, whose content the other keys already hold.
METADATA = frozenset(
    "ts stream type subtype pid argv stdin event reason seconds exit_code session_id call_id "
    "uuid id parent_tool_use_id input_tokens output_tokens cost_usd duration_ms "
    "duration_api_ms num_turns raw model cwd tools mcp_servers slash_commands agents "
    "permission_mode qwen_code_version".split()
)
_SPACE = re.compile(r"\s+")
_WORD_CLAIM = re.compile(r"^[A-Za-z][A-Za-z.]*(?:'s|\u2019s)?$")
_SUFFIXES = ("'s", "\u2019s", "es", "s")
_TRACEBACK = re.compile(r'File "(?P<path>[^"\n]+)", line (?P<n>\d+)')
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_LISTED = re.compile(r"^(?:Output: )?\s*(\d+)(?:\t|:)", re.MULTILINE)


def normalize(text: str) -> str:
    """Runs of whitespace, line breaks included, as one space."""
    return _SPACE.sub(" ", text).strip()


def word_pattern(word: str) -> str:
    """A regex for `word` as a whole token with or without a plural or possessive ending."""
    stems = {word}
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) > len(suffix) + 1:
            stems.add(word[: -len(suffix)])
    alternatives = "|".join(re.escape(s) for s in sorted(stems, key=len, reverse=True))
    return rf"(?<![\w])(?:{alternatives})(?:'s|\u2019s|es|s)?(?![\w])"


def inflectable(text: str) -> bool:
    """A word claim that may take a plural or possessive: no digit, no underscore."""
    return _WORD_CLAIM.match(text) is not None


def _strings(
    value: Any, out: list[str], depth: int = 0, skip: frozenset[str] = frozenset()
) -> None:
    """The string values of a JSON value, JSON held in strings decoded; `skip`: keys left out."""
    if isinstance(value, str):
        inner: Any = None
        if depth < 2 and value[:1] in "{[":
            try:
                inner = json.loads(value)
            except ValueError:
                pass
        if not isinstance(inner, dict):  # a record is searched by its values alone
            out.append(value)
        if inner is not None:
            _strings(inner, out, depth + 1, skip)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in skip:
                _strings(item, out, depth, skip)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out, depth, skip)


def _parsed(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _joined(value: Any, skip: frozenset[str] = frozenset()) -> str:
    """The string values of a parsed line, one a line; '' for a line that did not parse."""
    out: list[str] = []
    if value is not None:
        _strings(value, out, skip=skip)
    return "\n".join(out)


def _decoded(line: str) -> str:
    return _joined(_parsed(line))


@dataclass
class EvidenceFile:
    name: str
    lines: list[str]  # as written
    decoded: list[str]  # per line: the JSON string values, for .jsonl files
    content: str = ""  # what claims are searched in: the decoded content, or the text

    def find(self, quote: str) -> int | None:
        """The first line (1-based) holding `quote`, raw or decoded, whitespace aside."""
        for i, line in enumerate(self.lines):
            if quote in line or (i < len(self.decoded) and quote in self.decoded[i]):
                return i + 1
        wanted = normalize(quote)
        if not wanted:
            return None
        for rows in (self.lines, self.decoded):
            starts, joined = [], []
            at = 0
            for row in rows:
                starts.append(at)
                piece = normalize(row)
                joined.append(piece)
                at += len(piece) + 1
            index = " ".join(joined).find(wanted)
            if index >= 0:
                return bisect_right(starts, index)
        return None


@dataclass
class EvidenceSet:
    """The evidence files of an attempt, searchable for claims."""

    root: Path
    files: dict[str, EvidenceFile] = field(default_factory=dict)
    _text: str = ""  # the content of every file, whitespace normalized
    locations: set[tuple[str, int]] = field(default_factory=set)  # (file name, line)

    @classmethod
    def from_dir(cls, root: Path) -> EvidenceSet:
        """The attempt files of `root`; when it holds none of them, every file under it."""
        evidence = cls(root)
        named = [root / name for name in ATTEMPT_FILES if (root / name).is_file()]
        paths = named or sorted(
            p for p in root.rglob("*") if p.is_file() and p.name not in NOT_EVIDENCE
        )
        for path in paths:
            try:
                with path.open("rb") as fh:
                    raw = fh.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")
            except OSError:
                continue
            lines = raw.split("\n")
            decoded: list[str] = []
            content = raw
            if path.suffix == ".jsonl":
                parsed = [_parsed(line) for line in lines]  # each line parsed once
                decoded = [_joined(value) for value in parsed]
                content = "\n".join(_joined(value, METADATA) for value in parsed)
                evidence.locations |= _listed_locations(parsed)
            if path.name == "diff.patch" or path.suffix in (".patch", ".diff"):
                evidence.locations |= _hunk_locations(lines)
            name = path.relative_to(root).as_posix()
            evidence.files[name] = EvidenceFile(name, lines, decoded, content)
        whole = "\n".join(item.content for item in evidence.files.values())
        evidence.locations |= _written_locations(whole)
        evidence._text = normalize(whole)
        return evidence

    @property
    def text(self) -> str:
        return self._text

    def holds(self, claim: Claim) -> bool:
        """Whether the evidence holds the claim (see the module docstring)."""
        needle = normalize(claim.text)
        if claim.kind == "line":
            path, _, number = claim.text.rpartition(":")
            if (Path(path).name, int(number)) in self.locations:
                return True
            # "line 24 in REVIEW.md" may also mean the words "line 24" written in that file.
            return (
                bool(claim.alt)
                and re.search(rf"\b{re.escape(claim.alt)}(?!\d)", self._text, re.IGNORECASE)
                is not None
            )
        if claim.kind == "number":
            pattern = rf"(?<!\d)(?<!\d\.){re.escape(needle)}(?!\d)(?!\.\d)"
            return re.search(pattern, self._text) is not None
        if claim.kind in ("identifier", "code") and inflectable(needle):
            return re.search(word_pattern(needle), self._text) is not None
        if claim.kind == "identifier":
            return re.search(rf"(?<![\w]){re.escape(needle)}(?![\w])", self._text) is not None
        return needle in self._text

    def file_for(self, path: str) -> EvidenceFile | None:
        """The evidence file an entry's path names (relative to state/, or a bare name)."""
        path = path.replace("\\", "/")
        for name, item in self.files.items():
            if path == name or path.endswith("/" + name):
                return item
        return None

    def check_entry(self, entry: Evidence) -> tuple[Evidence, str | None]:
        """The entry with its line corrected to where the quote is, or why it does not hold."""
        item = self.file_for(entry.path)
        if item is None:
            return entry, f"evidence path {entry.path!r} is not one of the attempt's files"
        if not entry.quote.strip():
            return entry, f"evidence entry for {entry.path!r} has no quote"
        line = item.find(entry.quote)
        if line is None:
            return entry, f"evidence quote {entry.quote!r} is not in {item.name}"
        return entry.model_copy(update={"line": line}), None


def _written_locations(text: str) -> set[tuple[str, int]]:
    """Line locations the evidence states in words: tracebacks, grep output, messages."""
    found = {(Path(path).name, number) for path, number, _, _ in locations_in(text)}
    for match in _TRACEBACK.finditer(text):
        found.add((Path(match.group("path")).name, int(match.group("n"))))
    return found


def _hunk_locations(lines: list[str]) -> set[tuple[str, int]]:
    """Each line a diff shows, by its number in the old and in the new file."""
    found: set[tuple[str, int]] = set()
    old = new = ""
    for line in lines:
        if line.startswith("--- "):
            old = line[4:].strip().removeprefix("a/")
        elif line.startswith("+++ "):
            new = line[4:].strip().removeprefix("b/")
        else:
            hunk = _HUNK.match(line)
            if hunk is None:
                continue
            for path, start, count in (
                (old, hunk.group(1), hunk.group(2)),
                (new, hunk.group(3), hunk.group(4)),
            ):
                if path and path != "/dev/null":
                    first, many = int(start), int(count if count is not None else 1)
                    found.update((Path(path).name, n) for n in range(first, first + many))
    return found


def _listed_locations(parsed: list[Any]) -> set[tuple[str, int]]:
    """Numbered lines of a file that a command naming it printed (`cat -n`, `grep -n`)."""
    named: dict[str, list[str]] = {}  # call id -> the files its command names
    found: set[tuple[str, int]] = set()
    last: list[str] = []
    for event in parsed:
        if not isinstance(event, dict):
            continue
        if event.get("type") == "tool_call":
            args = event.get("arguments") or event.get("input") or {}
            command = args.get("command", "") if isinstance(args, dict) else ""
            files = [w.strip("'\"") for w in str(command).split() if is_path(w.strip("'\""))]
            named[str(event.get("call_id", ""))] = last = files
        elif event.get("type") == "tool_result":
            files = named.get(str(event.get("call_id", "")), last)
            output = str(event.get("output", ""))
            for number in _LISTED.findall(output):
                found.update((Path(f).name, int(number)) for f in files)
    return found


def ungrounded(
    rule_text: str, why: str, evidence: EvidenceSet, entries: list[Evidence]
) -> tuple[list[str], list[Evidence]]:
    """The claims the evidence does not hold (as readable strings), and the checked entries."""
    missing: list[str] = []
    for claim in claims_of(rule_text, "Rule", facts_only=True) + claims_of(why, "Why"):
        if not evidence.holds(claim):
            missing.append(str(claim))
    checked: list[Evidence] = []
    for entry in entries:
        fixed, problem = evidence.check_entry(entry)
        if problem:
            missing.append(problem)
        else:
            checked.append(fixed)
    return missing, checked


def quote_in_file(path: Path, quote: str) -> bool:
    """The file exists and holds `quote` (decoded in a .jsonl file; whitespace aside)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    if not quote or quote in raw:
        return True
    lines = raw.split("\n")
    decoded = [_decoded(line) for line in lines] if path.suffix == ".jsonl" else []
    return EvidenceFile(path.name, lines, decoded).find(quote) is not None

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
  underscore match exactly; numbers, versions and identifiers as whole tokens (`17` is not
  found in `2017`, `0.3` not in `0.3.0`), code spans and quoted strings as substrings.
- A duration, size or percentage is found with its unit, a space between them or not
  (`36.845s` in `36.845 s`, not in `36.845 ms`). A hex id is found as written, case aside;
  an abbreviated commit also where a longer hash begins with it.
- A path is found where it starts a path of the evidence or one of its parts (after `/`,
  `.` or a space: `modinfo.rs` is not in `explorer_modinfo.rs`), with `\\` read as `/` and
  without a leading `./`.
- A line location (`fetch.py:22`, `line 22 of fetch.py`) holds when the evidence shows that
  file at that line: the same words in the evidence (`fetch.py:22:5` from a compiler,
  `File "fetch.py", line 22`, `Program.cs(22,5)`), a line of a diff hunk of that file, or a
  numbered listing of it (`cat -n`, `grep -n`, `nl` output of a command naming the file).
  Which file: daemon/rules/locations.py.
- Sizes and counts as tools print them (daemon/rules/measures.py): `31 bytes` also where
  `wc -c`, `ls -l`, `stat` or `du -b` printed 31 as a size; `30 lines` where `wc -l` or
  `grep -c` printed 30; the units of bytes (`B`, `byte`, `bytes`) are one, and a bare
  letter is binary, as du -h prints it (`132M` is `132 MiB`, not `132 MB`). A line location
  also holds where `cat`, `head` or `sed -n` printed that file's line; a count's output
  (`grep -c`'s `app.py:3`) is never a line location.
- A test runner's summary (`"=== 1 failed, 3 passed in 0.12s ==="`) holds where the
  evidence has the same words, counts and duration in that order, the `=` around it aside:
  the evidence is the run the lesson was learned from. A terminal's colour codes are not
  text: they are left out of the evidence before matching.
- A claim not found is named with its kind and the evidence files looked in.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.rules import locations as where
from daemon.rules import measures
from daemon.rules.claims import COUNT, QUANTITY, Claim, claims_of
from daemon.rules.measures import Where
from daemon.rules.rulefile import Evidence
from daemon.state.stored import is_stored, open_stored

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
_COLOUR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # a terminal's colour and style codes
_WORD_CLAIM = re.compile(r"^[A-Za-z][A-Za-z.]*(?:'s|\u2019s)?$")
_SUFFIXES = ("'s", "\u2019s", "es", "s")


def normalize(text: str) -> str:
    """Runs of whitespace, line breaks included, as one space; colour codes left out."""
    return _SPACE.sub(" ", _COLOUR.sub("", text)).strip()


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


def claim_pattern(kind: str, needle: str) -> str:
    """The regex that finds a claim of that kind in the evidence (see the module docstring)."""
    if kind in ("number", "version"):
        return rf"(?<!\d)(?<!\d\.){re.escape(needle)}(?!\d)(?!\.\d)"
    if kind in ("duration", "size", "percent"):
        found = QUANTITY.fullmatch(needle)
        if found is not None:
            number, unit = re.escape(found.group("n")), _units(kind, found.group("unit"))
            return rf"(?<![\w.]){number} ?{unit}(?![\w%])"
    if kind == "count":
        found = COUNT.fullmatch(needle)
        if found is not None:
            noun = found.group("noun").rstrip("s")
            return rf"(?<![\w.]){found.group('n')} (?:matching )?{noun}s?\b"
    if kind == "summary":
        return summary_pattern(needle)
    if kind == "hex":
        if needle.lower().startswith("0x"):
            return rf"(?i)(?<![\w]){re.escape(needle)}(?![0-9a-f])"
        return rf"(?i)(?<![0-9a-z]){re.escape(needle)}[0-9a-f]*(?![0-9a-z])"
    if kind in ("identifier", "code") and inflectable(needle):
        return word_pattern(needle)
    if kind == "identifier":
        return rf"(?<![\w]){re.escape(needle)}(?![\w])"
    if kind == "path":
        needle = where.file_key(needle) if "://" not in needle else needle
        end = r"(?![\w])" if needle[-1:].isalnum() or needle[-1:] == "_" else ""
        return rf"(?<![\w-]){re.escape(needle)}{end}"
    return re.escape(needle)


def _units(kind: str, unit: str) -> str:
    """A unit and the ways of writing the same one: bytes as B, byte or bytes; a bare letter
    (du -h's `132M`, powers of 1024) as that letter with iB (`132 MiB`), not with B alone."""
    if kind != "size":
        return re.escape(unit)
    if unit in ("B", "byte", "bytes"):
        return "(?:bytes?|B)"
    if unit[0] in "KMGT" and unit[1:] in ("", "iB"):
        return rf"{unit[0]}(?:iB)?"
    return re.escape(unit)


def summary_pattern(quoted: str) -> str:
    """A runner's summary as quoted, its words, counts and duration, the `=` around it aside."""
    return rf"(?<![\w.]){re.escape(normalize(quoted).strip('= '))}(?![\w.])"


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


def _read_text(path: Path) -> str | None:
    try:
        with open_stored(path) as fh:
            return fh.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


# What of a parsed .jsonl line of the named file counts as evidence; None: none of it.
Select = Callable[[str, Any], Any]


@dataclass
class EvidenceFile:
    name: str
    lines: list[str]  # as written
    decoded: list[str]  # per line: the JSON string values, for .jsonl files
    content: str = ""  # what claims are searched in: the decoded content, or the text
    searched: bool = True  # False: an entry may cite it, a claim is not looked for in it

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
    _paths: str = ""  # the same with `\\` as `/`, where paths are looked for
    locations: where.Locations = field(default_factory=where.Locations)
    measures: measures.Measures = field(default_factory=measures.Measures)

    @classmethod
    def from_dir(cls, root: Path) -> EvidenceSet:
        """The attempt files of `root`; when it holds none of them, every file under it."""
        named = [root / name for name in ATTEMPT_FILES if is_stored(root / name)]
        paths = named or sorted(
            p for p in root.rglob("*") if p.is_file() and p.name not in NOT_EVIDENCE
        )
        return cls.from_paths(root, paths)

    @classmethod
    def from_paths(
        cls,
        root: Path,
        paths: list[Path],
        *,
        select: Select | None = None,
        cited: tuple[Path, ...] = (),
    ) -> EvidenceSet:
        """The files `paths` (named relative to `root`), searched for claims.

        `select(name, value)`: what of a parsed .jsonl line counts as evidence (None: none
        of it; the line keeps its number). `cited`: files an evidence entry may cite whose
        text is not searched for claims (what the agent said, not what it saw).
        """
        evidence = cls(root)
        for path, searched in [(p, True) for p in paths] + [(p, False) for p in cited]:
            raw = _read_text(path)
            if raw is not None:
                evidence._add(path.relative_to(root).as_posix(), raw, searched, select)
        whole = "\n".join(item.content for item in evidence.files.values() if item.searched)
        counted = evidence.measures.counted
        # A count's output (`grep -c`'s `app.py:3`) is not a line location.
        shown = "\n".join(row for row in whole.split("\n") if row.strip() not in counted)
        where.written(shown, evidence.locations)
        for name, lines, _ in evidence.measures.shown:
            evidence.locations.add(name, lines)
        evidence._text = normalize(whole)
        return evidence

    def _add(self, name: str, raw: str, searched: bool, select: Select | None) -> None:
        lines = raw.split("\n")
        decoded: list[str] = []
        content = raw
        if name.endswith(".jsonl"):
            parsed = [_parsed(line) for line in lines]  # each line parsed once
            if select is not None:
                kept = [select(name, value) for value in parsed]
                # A line left out is blank: no entry's line and no excerpt points into it.
                lines = [line if k is not None else "" for line, k in zip(lines, kept, strict=True)]
                parsed = kept
            decoded = [_joined(value) for value in parsed]
            content = "\n".join(_joined(value, METADATA) for value in parsed)
            if searched:
                where.listed(parsed, self.locations)
                measures.read_transcript(parsed, name, self.measures)
        elif searched:
            measures.read_session(raw, name, self.measures)
        if searched and name.endswith((".patch", ".diff")):
            where.hunks(lines, self.locations)
        self.files[name] = EvidenceFile(name, lines, decoded, content, searched)

    @property
    def text(self) -> str:
        return self._text

    def holds(self, claim: Claim) -> bool:
        """Whether the evidence holds the claim (see the module docstring)."""
        needle = normalize(claim.text)
        if claim.kind == "line":
            path, _, number = claim.text.rpartition(":")
            if self.locations.holds(path, int(number)):
                return True
            # "line 24 in REVIEW.md" may also mean the words "line 24" written in that file.
            return (
                bool(claim.alt)
                and re.search(rf"\b{re.escape(claim.alt)}(?!\d)", self._text, re.IGNORECASE)
                is not None
            )
        found = re.search(claim_pattern(claim.kind, needle), self._search_in(claim))
        return found is not None or self.measured(claim) is not None

    def measured(self, claim: Claim) -> Where | None:
        """Where a tool printed the size or count `claim` states, or the line it locates."""
        if claim.kind == "size":
            found = QUANTITY.fullmatch(normalize(claim.text))
            return self.measures.size(found["n"], found["unit"]) if found else None
        if claim.kind == "count":
            found = COUNT.fullmatch(normalize(claim.text))
            return self.measures.count(int(found["n"]), found["noun"]) if found else None
        if claim.kind == "line":
            path, _, number = claim.text.rpartition(":")
            key = where.file_key(path)
            for shown, lines, at in self.measures.shown:
                named = where.file_key(shown)
                if int(number) in lines and (named == key or named.endswith("/" + key)):
                    return at
        return None

    def _search_in(self, claim: Claim) -> str:
        if claim.kind != "path":
            return self._text
        if not self._paths:  # a set built from text alone (the Temporal lessons)
            self._paths = self._text.replace("\\", "/")
        return self._paths

    def looked_in(self) -> str:
        """The evidence files, as a rejection names them."""
        return ", ".join(self.files) or "no files"

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


def ungrounded(
    rule_text: str, why: str, evidence: EvidenceSet, entries: list[Evidence]
) -> tuple[list[str], list[Evidence]]:
    """The claims the evidence does not hold (as readable strings), and the checked entries."""
    missing: list[str] = []
    for claim in claims_of(rule_text, "Rule", facts_only=True) + claims_of(why, "Why"):
        if not evidence.holds(claim):
            missing.append(f"{claim}, looked in {evidence.looked_in()}")
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
        with open_stored(path) as fh:
            raw = fh.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    if not quote or quote in raw:
        return True
    lines = raw.split("\n")
    decoded = [_decoded(line) for line in lines] if path.suffix == ".jsonl" else []
    return EvidenceFile(path.name, lines, decoded).find(quote) is not None

"""Grounding without a model: the claims a rule makes, and whether the evidence holds them verbatim.

Claims (the rule verifier's first step, docs/rules.md): numbers, `code spans`, quoted
strings, paths (containing `/` or ending in `.ext`) and identifiers (containing `_`, `::`, an
inner capital, or followed by `(`). Every claim in **Why** is checked; in **Rule** only paths,
identifiers and numbers.

Choices written down here because the design leaves them open:
- "Inner capital" means a capital after a lower-case letter (`getUser`) or a capital run
  followed by a lower-case letter (`HTTPServer`); all-capital words (`TODO`, `JSON`) are
  ordinary words, not identifiers.
- Numbers and identifiers must occur as whole tokens (`17` is not found in `2017`); code
  spans, quoted strings and paths as plain substrings.
- A command that the Rule prescribes may be new: a code span in **Rule** whose first word is
  a program (a known developer tool, or a name found on PATH) is a command. Its program
  name, its options (`-n`, `--stat`), its numbers and its placeholders (`FILE`, `<path>`,
  `{name}`, `$VAR`) are not claims; a path or identifier among its arguments still is,
  because a command about a file the agent never saw is not grounded.
- The evidence of an attempt folder is transcript.jsonl, checks.log, diff.patch and
  prompt.md (verdict.toml is the critic's opinion, not evidence). For `loopd rules verify
  --evidence DIR`, every file under DIR but verdict.toml. JSON string values of the
  transcript are searched decoded too, so a quote need not carry JSON escapes.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from daemon.rules.rulefile import Evidence

ATTEMPT_FILES = ("transcript.jsonl", "checks.log", "diff.patch", "prompt.md")
NOT_EVIDENCE = {"verdict.toml"}
MAX_FILE_BYTES = 64 * 1024 * 1024

ClaimKind = Literal["number", "code", "quoted", "path", "identifier", "evidence"]

_CODE = re.compile(r"`([^`\n]+)`")
_QUOTED = re.compile(
    r"\"([^\"\n]{1,400})\"|\u201c([^\u201d\n]{1,400})\u201d|(?<![\w])'([^'\n]{1,400})'(?![\w])"
)
_URL = re.compile(r"\bhttps?://[^\s`'\"<>)]+")
_PATH_TOKEN = re.compile(r"(?<![\w./~-])[\w.~/-]*[\w/]")
_EXT = re.compile(r"^\.?[\w-]+(?:\.[\w-]+)*\.[A-Za-z][A-Za-z0-9]{0,7}$")
_IDENT = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:(?:::|\.)[A-Za-z_]\w*)*(\s*\()?")
_NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")
_SLASH_WORDS = {
    "and/or",
    "either/or",
    "input/output",
    "read/write",
    "yes/no",
    "true/false",
    "pass/fail",
    "on/off",
    "i/o",
}
_ABBREVIATIONS = {"e.g", "i.e", "etc", "vs", "a.m", "p.m", "u.s"}
_PROGRAMS = set(
    "grep rg ag sed awk cat head tail nl wc ls find fd git python python3 pytest pip pip3 uv "
    "poetry tox nox npm npx node yarn pnpm bun deno tsc eslint prettier jest vitest mocha "
    "cargo rustc go gofmt make cmake ctest gcc clang ruff mypy black flake8 pylint isort "
    "jq yq diff sort uniq cut tr curl wget docker kubectl bash sh zsh java javac mvn gradle "
    "dotnet bundle rake rspec ruby php composer perl echo printf test stat file xargs tree "
    "less more cd pwd mkdir rm cp mv touch chmod tar unzip sqlite3 psql mysql".split()
)
_PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*|<[^>]*>|\{[^}]*\}|\$\{?\w+\}?)$")


@dataclass(frozen=True)
class Claim:
    """One thing a rule states as fact, to be found verbatim in the evidence."""

    kind: ClaimKind
    text: str
    where: str  # "rule", "why" or the evidence entry

    def __str__(self) -> str:
        return f"{self.kind} {self.text!r} ({self.where})"


def _blank(text: str, span: tuple[int, int]) -> str:
    return text[: span[0]] + " " * (span[1] - span[0]) + text[span[1] :]


def is_identifier(token: str, followed_by_paren: bool = False) -> bool:
    name = token.rstrip("(").strip()
    return (
        followed_by_paren
        or "_" in name
        or "::" in name
        or re.search(r"[a-z][A-Z]|[A-Z]{2}[a-z]", name) is not None
    )


def is_path(token: str) -> bool:
    token = token.strip()
    low = token.lower()
    if low in _SLASH_WORDS or low.rstrip(".") in _ABBREVIATIONS:
        return False
    if "/" in token:
        return any(c.isalnum() for c in token)
    return _EXT.match(token) is not None or re.match(r"^\.[A-Za-z][\w-]{2,}$", token) is not None


def _paths_and_identifiers(text: str, where: str) -> tuple[list[Claim], str]:
    """Paths and identifiers of `text`, and the text with them blanked out."""
    claims: list[Claim] = []
    for match in list(_URL.finditer(text)):
        claims.append(Claim("path", match.group(0).rstrip(".,;:"), where))
        text = _blank(text, match.span())
    for match in list(_PATH_TOKEN.finditer(text)):
        token = match.group(0).rstrip(".-")
        if is_path(token):
            claims.append(Claim("path", token, where))
            text = _blank(text, (match.start(), match.start() + len(token)))
    for match in list(_IDENT.finditer(text)):
        paren = bool(match.group(1))
        name = match.group(0).rstrip("( \t")
        if is_identifier(name, paren):
            claims.append(Claim("identifier", name, where))
            text = _blank(text, match.span())
    return claims, text


def _numbers(text: str, where: str) -> list[Claim]:
    return [Claim("number", m.group(0), where) for m in _NUMBER.finditer(text)]


def is_command(span: str) -> bool:
    """A code span that runs a program (see the module docstring)."""
    words = span.split()
    if not words:
        return False
    program = words[0]
    if not re.match(r"^[a-z][a-z0-9+._-]*$", program) or is_identifier(program):
        return False
    return program in _PROGRAMS or shutil.which(program) is not None


def command_claims(span: str, where: str) -> list[Claim]:
    """Paths and identifiers among a prescribed command's arguments."""
    claims: list[Claim] = []
    for word in span.split()[1:]:
        word = word.strip("'\"")
        if not word or word.startswith("-") or _PLACEHOLDER.match(word):
            continue
        found, _ = _paths_and_identifiers(word, where)
        claims.extend(found)
    return claims


def claims_of(text: str, where: str, facts_only: bool = False) -> list[Claim]:
    """The claims of a paragraph; `facts_only` (the Rule) keeps paths, identifiers, numbers."""
    claims: list[Claim] = []
    for match in list(_CODE.finditer(text)):
        span = match.group(1)
        if facts_only and is_command(span):
            claims.extend(command_claims(span, where))
        elif facts_only:
            inner, rest = _paths_and_identifiers(span, where)
            claims.extend(inner + _numbers(rest, where))
        else:
            claims.append(Claim("code", span, where))
        text = _blank(text, match.span())
    for match in list(_QUOTED.finditer(text)):
        quoted = next(g for g in match.groups() if g is not None)
        if facts_only:
            inner, rest = _paths_and_identifiers(quoted, where)
            claims.extend(inner + _numbers(rest, where))
        else:
            claims.append(Claim("quoted", quoted, where))
        text = _blank(text, match.span())
    found, text = _paths_and_identifiers(text, where)
    claims.extend(found)
    claims.extend(_numbers(text, where))
    unique: dict[tuple[str, str], Claim] = {}
    for claim in claims:
        unique.setdefault((claim.kind, claim.text), claim)
    return list(unique.values())


def _strings(value: Any, out: list[str], depth: int = 0) -> None:
    if isinstance(value, str):
        out.append(value)
        if depth < 2 and value[:1] in "{[":
            try:
                _strings(json.loads(value), out, depth + 1)
            except ValueError:
                pass
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, out, depth)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out, depth)


@dataclass
class EvidenceFile:
    name: str
    lines: list[str]  # as written
    decoded: list[str]  # per line: the JSON string values, for .jsonl files

    def find(self, quote: str) -> int | None:
        """The first line (1-based) holding `quote`, raw or decoded."""
        for i, line in enumerate(self.lines):
            if quote in line or (i < len(self.decoded) and quote in self.decoded[i]):
                return i + 1
        return None


@dataclass
class EvidenceSet:
    """The evidence files of an attempt, searchable verbatim."""

    root: Path
    files: dict[str, EvidenceFile] = field(default_factory=dict)
    _text: str = ""

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
            if path.suffix == ".jsonl":
                for line in lines:
                    out: list[str] = []
                    try:
                        _strings(json.loads(line), out)
                    except ValueError:
                        pass
                    decoded.append("\n".join(out))
            name = path.relative_to(root).as_posix()
            evidence.files[name] = EvidenceFile(name, lines, decoded)
        parts = []
        for item in evidence.files.values():
            parts.append("\n".join(item.lines))
            parts.append("\n".join(item.decoded))
        evidence._text = "\n".join(parts)
        return evidence

    @property
    def text(self) -> str:
        return self._text

    def holds(self, claim: Claim) -> bool:
        """The claim occurs verbatim: whole tokens for numbers and identifiers."""
        needle = claim.text
        if claim.kind == "number":
            pattern = rf"(?<!\d)(?<!\d\.){re.escape(needle)}(?!\d)(?!\.\d)"
            return re.search(pattern, self._text) is not None
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
    """The file exists and holds `quote` (in a .jsonl file, also in its decoded strings)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    if not quote or quote in raw:
        return True
    if path.suffix == ".jsonl":
        for line in raw.split("\n"):
            out: list[str] = []
            try:
                _strings(json.loads(line), out)
            except ValueError:
                continue
            if quote in "\n".join(out):
                return True
    return False

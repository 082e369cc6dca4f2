"""The claims a rule makes: what the grounding check must find in the evidence.

Claims (the rule verifier's first step, docs/rules.md): numbers, `code spans`, quoted
strings, paths (containing `/` or ending in `.ext`), identifiers (containing `_`, `::`, an
inner capital, or followed by `(`), and line locations (a number said to be a line of a
file: `app.py:17`, `app.py line 17`, `line 17 of app.py`). Every claim in **Why** is
checked; in **Rule** only paths, identifiers, numbers and line locations.

Choices written down here because the design leaves them open:
- "Inner capital" means a capital after a lower-case letter (`getUser`) or a capital run
  followed by a lower-case letter (`HTTPServer`); all-capital words (`TODO`, `JSON`) are
  ordinary words, not identifiers. "Followed by `(`" means directly: `add()` is a call,
  "the one check.py imports (./calc.py)" is a word before a remark.
- A line location is checked as a location, not as a number that may occur anywhere: the
  evidence must show that file at that line (see daemon/rules/grounding.py).
- Numbers as tools print them (docs/rules.md#grounding): a version is one number whatever
  its count of dots, with its pre-release and build parts (`1.2.3-rc.1+build5`), and a name
  glued on with `-`, `@`, `:` or `/` or a leading `v` is not part of it; a number glued to a
  unit is a duration, size or percentage (`1.5s`, `512MiB`, `93%`); a hex id is `0x...` or a
  run of seven or more hex digits holding a digit and a letter (a commit).
- A quoted string holding a code span is one quoted claim, backticks and all.
- A number followed by "lines" or "words" (`30 lines`, `3 matching lines`) is a count, and a
  quoted string holding counts of a test runner's outcomes and a duration
  (`"1 failed, 3 passed in 0.12s"`) is a summary: one claim, in Rule and in Why.
- A command that the Rule prescribes may be new: a code span in **Rule** whose first word is
  a program (a known developer tool, or a name found on PATH) is a command. Its program
  name, its options (`-n`, `--stat`), its numbers and its placeholders (`FILE`, `<path>`,
  `{name}`, `$VAR`) are not claims; a path or identifier among its arguments still is,
  because a command about a file the agent never saw is not grounded.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from typing import Literal

ClaimKind = Literal[
    "number",
    "count",
    "summary",
    "version",
    "duration",
    "size",
    "percent",
    "hex",
    "code",
    "quoted",
    "path",
    "identifier",
    "line",
    "evidence",
]

_CODE = re.compile(r"`([^`\n]+)`")
_QUOTED = re.compile(
    r"\"([^\"\n]{1,400})\"|\u201c([^\u201d\n]{1,400})\u201d|(?<![\w])'([^'\n]{1,400})'(?![\w])"
)
_QUOTED_CODE = re.compile(r"\"([^\"\n]*`[^\"\n]*)\"|\u201c([^\u201d\n]*`[^\u201d\n]*)\u201d")
_URL = re.compile(r"\bhttps?://[^\s`'\"<>)]+")
PATH_TOKEN = re.compile(r"(?<![\w./~-])[\w.~/-]*[\w/]")
_EXT = re.compile(r"^\.?[\w-]+(?:\.[\w-]+)*\.[A-Za-z][A-Za-z0-9]{0,7}$")
# A turbofish (`of::<Placeholder>`) is part of the path it qualifies.
_IDENT = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:(?:::|\.)[A-Za-z_]\w*|::<[\w:, ]+>)*(\()?")
# A version is one number however many dots it has; x.y.z may carry -pre and +build parts.
_NUMBER = re.compile(
    r"(?<![\w.])v?(?P<n>\d+\.\d+\.\d+(?:\.\d+)*"
    r"(?:-[0-9A-Za-z]+(?:[.-][0-9A-Za-z]+)*|[a-z]+\d*)?(?:\+[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?"
    r"|\d+(?:\.\d+)?)(?![\w])(?!\.\d)"
)
_DURATION_UNITS = "ns|us|µs|ms|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|d|days?"
_SIZE_UNITS = "B|bytes?|[kKMGT]i?B|[kKMGT]"
QUANTITY = re.compile(
    rf"(?<![\w.])(?P<n>\d+(?:\.\d+)?)(?: ?(?P<unit>{_DURATION_UNITS}|{_SIZE_UNITS}|%)(?![\w%]))"
)
# A count of lines or words, as wc and grep -c print them: never a line number.
COUNT = re.compile(r"(?<![\w.])(?P<n>\d+) (?:matching )?(?P<noun>lines?|words?)\b")
# A test runner's summary: a count of what passed or failed, and how long the run took.
_RUNNER_COUNT = re.compile(
    r"\b\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?|tests?"
    r"|examples?|failures?|passing|failing|pending|ignored)\b"
)
_HEX = re.compile(
    r"(?<![\w.])(?:0x[0-9a-fA-F]+|(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}"
    r"|(?=[0-9A-F]*[A-F])(?=[0-9A-F]*\d)[0-9A-F]{7,64})(?![\w])"
)
_P = r"(?P<path>(?<![\w./~-])[\w.~/-]*[\w/])"
# A number said to be a line of a file, in the words rules and tools use.
LOCATIONS = (
    re.compile(_P + r":(?P<n>\d+)\b"),
    re.compile(_P + r",?\s+(?:(?:at|on)\s+)?line\s+(?P<n>\d+)\b", re.IGNORECASE),
    re.compile(r"\blines?\s+(?P<n>\d+)\s+(?:of|in)\s+(?:the\s+file\s+)?" + _P, re.IGNORECASE),
    re.compile(_P + r"\s+\(line\s+(?P<n>\d+)\)", re.IGNORECASE),
    re.compile(_P + r"\((?P<n>\d+),\d+\)"),  # the compilers of .NET: Program.cs(4,7)
)
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
    """One thing a rule states as fact, to be found in the evidence."""

    kind: ClaimKind
    text: str  # for a line location: "PATH:N"
    where: str  # "Rule", "Why" or the evidence entry
    alt: str = ""  # a line location's other reading: the words "line N" written in the file

    def __str__(self) -> str:
        if self.kind == "line":
            path, _, number = self.text.rpartition(":")
            return f"line {number!r} of {path} ({self.where})"
        return f"{self.kind} {self.text!r} ({self.where})"


def _blank(text: str, span: tuple[int, int]) -> str:
    return text[: span[0]] + " " * (span[1] - span[0]) + text[span[1] :]


def is_identifier(token: str, followed_by_paren: bool = False) -> bool:
    name = token.rstrip("(").strip()
    if re.fullmatch(r"[kKMGT]i?B", name):
        return False  # a unit of size (MiB), not a name
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


def locations_in(text: str) -> list[tuple[str, int, tuple[int, int], bool]]:
    """(path, line, span of the number, ambiguous) for each line location in `text`.

    Ambiguous: "line N in PATH", which may also mean the words "line N" written in PATH.
    """
    found = []
    for pattern in LOCATIONS:
        for match in pattern.finditer(text):
            path = match.group("path").rstrip(".-")
            if "://" in text[max(0, match.start("path") - 8) : match.end("path")]:
                continue  # a URL's port, not a line
            if is_path(path):
                ambiguous = pattern is LOCATIONS[2] and " in " in f" {match.group(0).lower()} "
                found.append((path, int(match.group("n")), match.span("n"), ambiguous))
    return found


def _locations(text: str, where: str) -> tuple[list[Claim], str]:
    """The line locations of `text`, and the text with their numbers blanked out."""
    claims = []
    for path, number, span, ambiguous in locations_in(text):
        alt = f"line {number}" if ambiguous else ""
        claims.append(Claim("line", f"{path}:{number}", where, alt))
        text = _blank(text, span)
    return claims, text


def _paths_and_identifiers(text: str, where: str) -> tuple[list[Claim], str]:
    """Paths and identifiers of `text`, and the text with them blanked out."""
    claims: list[Claim] = []
    for match in list(_URL.finditer(text)):
        claims.append(Claim("path", match.group(0).rstrip(".,;:"), where))
        text = _blank(text, match.span())
    for match in list(PATH_TOKEN.finditer(text)):
        token = match.group(0).rstrip(".-")
        if is_path(token):
            claims.append(Claim("path", token, where))
            text = _blank(text, (match.start(), match.start() + len(token)))
    for match in list(_IDENT.finditer(text)):
        paren = bool(match.group(1))
        name = match.group(0).rstrip("(")
        if is_identifier(name, paren):
            claims.append(Claim("identifier", name, where))
            text = _blank(text, match.span())
    return claims, text


def is_summary(quoted: str) -> bool:
    """A quoted line of a test runner's summary: counts of outcomes and a duration."""
    durations = [
        m for m in QUANTITY.finditer(quoted) if quantity_kind(m.group("unit")) == "duration"
    ]
    return bool(durations) and _RUNNER_COUNT.search(quoted) is not None


def quantity_kind(unit: str) -> ClaimKind:
    """What a number's unit makes of it: a duration, a size or a percentage."""
    if unit == "%":
        return "percent"
    return "duration" if re.fullmatch(_DURATION_UNITS, unit) else "size"


def _numbers(text: str, where: str) -> list[Claim]:
    """Hex ids, quantities (a number and its unit), versions and plain numbers of `text`."""
    claims = []
    for match in list(_HEX.finditer(text)):
        claims.append(Claim("hex", match.group(0), where))
        text = _blank(text, match.span())
    for match in list(COUNT.finditer(text)):
        claims.append(Claim("count", match.group(0), where))
        text = _blank(text, match.span())
    for match in list(QUANTITY.finditer(text)):
        unit = match.group("unit")
        if " " in match.group(0) and len(unit) == 1 and unit not in "s%":
            continue  # "2 M" is too loose to be a size; "2" stays a number
        claims.append(Claim(quantity_kind(unit), match.group(0), where))
        text = _blank(text, match.span())
    for match in _NUMBER.finditer(text):
        number = match.group("n")
        kind: ClaimKind = "version" if number.count(".") >= 2 else "number"
        claims.append(Claim(kind, number, where))
    return claims


def _facts(text: str, where: str) -> list[Claim]:
    """Line locations, paths, identifiers, ids and numbers of a piece of text."""
    located, text = _locations(text, where)
    found, text = _paths_and_identifiers(text, where)
    return located + found + _numbers(text, where)


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
    """The claims of a paragraph; `facts_only` (the Rule) keeps the facts, not the wording."""
    claims: list[Claim] = []
    # Code spans and quotes may run over a line break; a claim is the same text on one line.
    text = re.sub(r"`[^`]+`", lambda m: " ".join(m.group(0).split()), text)
    # A quote holding code spans is one claim, backticks and all, as tools print such text.
    for match in list(_QUOTED_CODE.finditer(text)):
        quoted = next(g for g in match.groups() if g is not None)
        claims.extend(_facts(quoted, where) if facts_only else [Claim("quoted", quoted, where)])
        text = _blank(text, match.span())
    for match in list(_CODE.finditer(text)):
        span = match.group(1)
        if facts_only and is_command(span):
            claims.extend(command_claims(span, where))
        elif facts_only:
            claims.extend(_facts(span, where))
        else:
            claims.append(Claim("code", span, where))
        text = _blank(text, match.span())
    text = re.sub(
        r"\"[^\"`]+\"|\u201c[^\u201d`]+\u201d", lambda m: " ".join(m.group(0).split()), text
    )
    for match in list(_QUOTED.finditer(text)):
        quoted = next(g for g in match.groups() if g is not None)
        if is_summary(quoted):
            claims.append(Claim("summary", quoted, where))
        elif facts_only:
            claims.extend(_facts(quoted, where))
        else:
            claims.append(Claim("quoted", quoted, where))
        text = _blank(text, match.span())
    claims.extend(_facts(text, where))
    unique: dict[tuple[str, str], Claim] = {}
    for claim in claims:
        unique.setdefault((claim.kind, claim.text), claim)
    return list(unique.values())

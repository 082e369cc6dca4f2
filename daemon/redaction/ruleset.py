"""Provider secrets found the way gitleaks finds them: keywords first, then each rule's RE2 pattern.

The rules come from the package's data files: `gitleaks.toml` (gitleaks' own rule set, MIT)
and `providers.toml` (loopd's rules for tokens an agent prints bare, and allowlists it adds
to gitleaks' rules). A text is lower-cased once and searched for every rule's keywords in
one pass of an RE2 set; only the rules whose keyword occurs run their pattern. A match
counts as gitleaks counts it: its secret (the rule's secret group, else the first non-empty
group) must have more Shannon entropy than the rule's floor and must not be allowed by the
global or the rule's allowlists (regexes on the secret, the match or the line; stopwords).
Allowlists that name file paths never apply: output has no path. One change to gitleaks'
patterns: a token may also end at prose punctuation (PROSE_SUFFIX). Patterns compile
lazily, on a rule's first keyword hit.
"""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Literal

import re2
from pydantic import BaseModel, ConfigDict, Field

FILES = ("gitleaks.toml", "providers.toml")
MAX_MEM = 64 << 20  # bytes for one compiled pattern: gitleaks' generic rule is large
# gitleaks ends a token at a quote, a space, `;`, an escaped newline or the end of the text,
# as in configuration files; an agent's prose also ends one with `.`, `,`, `)`, `:`, `>`...
SUFFIX = r"""(?:[\x60'"\s;]|\\[nr]|$)"""
PROSE_SUFFIX = r"""(?:[\x60'"\s;.,:!?)\]}>|&<]|\\[nr]|$)"""


class Allowlist(BaseModel):
    """One allowlist of a rule file: what is not a secret although a pattern matched."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    condition: Literal["OR", "AND"] = "OR"
    target: Literal["secret", "match", "line"] = Field("secret", alias="regexTarget")
    regexes: list[str] = []
    stopwords: list[str] = []
    paths: list[str] = []


class RuleSpec(BaseModel):
    """One rule of a rule file, in gitleaks' format."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str
    regex: str = ""
    keywords: list[str] = []
    entropy: float = 0.0
    secret_group: int = Field(0, alias="secretGroup")
    allowlists: list[Allowlist] = []


class RuleAllowlist(Allowlist):
    """An allowlist one file adds to rules of another (loopd's to gitleaks' rules)."""

    rules: list[str]


class RuleFile(BaseModel):
    """A rule file: its rules, the allowlist applying to all of them, ones added to others."""

    model_config = ConfigDict(extra="ignore")

    allowlist: Allowlist | None = None
    rules: list[RuleSpec] = []
    allow: list[RuleAllowlist] = []


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_MEM
    return options


def _alternation(patterns: list[str]) -> re2._Regexp | None:
    return re2.compile("|".join(f"(?:{p})" for p in patterns), _options()) if patterns else None


def entropy(text: str) -> float:
    """Shannon entropy of `text` in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


class _Allow:
    """An allowlist compiled: per target one alternation, and the stopwords."""

    def __init__(self, spec: Allowlist) -> None:
        # An allowlist that needs a path (AND) never holds: output has no path.
        self.off = spec.condition == "AND" and bool(spec.paths)
        self.regex = _alternation(spec.regexes)
        self.target = spec.target
        self.stopwords = tuple(word.lower() for word in spec.stopwords)

    def allows(self, secret: str, match: str, line: str) -> bool:
        if self.off:
            return False
        if self.regex is not None:
            subject = {"secret": secret, "match": match, "line": line}[self.target]
            if self.regex.search(subject):
                return True
        if self.stopwords:
            low = secret.lower()
            return any(word in low for word in self.stopwords)
        return False


class Rule:
    """One rule, compiled on first use."""

    def __init__(self, spec: RuleSpec, common: list[_Allow]) -> None:
        self.spec = spec
        self.id = spec.id
        self._allows = common
        self._regex: re2._Regexp | None = None

    def regex(self) -> re2._Regexp:
        if self._regex is None:
            self._regex = re2.compile(self.spec.regex.replace(SUFFIX, PROSE_SUFFIX), _options())
            self._allows = self._allows + [_Allow(a) for a in self.spec.allowlists]
        return self._regex

    def find(self, subject: str | bytes) -> Iterator[tuple[int, int]]:
        """The spans of this rule's secrets in `subject` (bytes only for ASCII text)."""
        for match in self.regex().finditer(subject):
            group = self.spec.secret_group
            if not group:
                group = next((g for g in range(1, match.re.groups + 1) if match.group(g)), 0)
            secret = _text(match.group(group) or "")
            if not secret or entropy(secret) <= self.spec.entropy and self.spec.entropy:
                continue
            start, end = match.span(group)
            if self._allowed(secret, _text(match.group(0)), subject, start, end):
                continue
            yield start, end

    def _allowed(self, secret: str, whole: str, subject: str | bytes, start: int, end: int) -> bool:
        newline = b"\n" if isinstance(subject, bytes) else "\n"
        # The type: ignore below: subject and newline are both bytes or both str; the checker cannot
        # pair them.
        line_start = subject.rfind(newline, 0, start) + 1  # type: ignore[arg-type]
        line_end = subject.find(newline, end)  # type: ignore[arg-type]
        line = _text(subject[line_start : line_end if line_end >= 0 else len(subject)])
        return any(allow.allows(secret, whole, line) for allow in self._allows)


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class RuleSet:
    """Every rule of the rule files, and the keyword search choosing which run on a text."""

    def __init__(self, files: list[RuleFile], extra: tuple[str, ...] = ()) -> None:
        self.rules: list[Rule] = []
        by_keyword: dict[str, list[Rule]] = {word: [] for word in extra}
        for file in files:
            common = [_Allow(file.allowlist)] if file.allowlist else []
            for spec in file.rules:
                if not spec.regex:
                    continue  # a rule on file names only (gitleaks' pkcs12-file)
                rule = Rule(spec, common)
                self.rules.append(rule)
                for word in spec.keywords:
                    by_keyword.setdefault(word.lower(), []).append(rule)
        by_id = {rule.id: rule for rule in self.rules}
        for file in files:
            for allow in file.allow:
                for rid in allow.rules:
                    by_id[rid].spec.allowlists.append(allow)
        self.words = sorted(by_keyword)
        self._rules_of = by_keyword
        # An RE2 set reports every keyword that occurs, overlapping ones too (`sk` and
        # `k.eyj` in `sk.eyJ`), in one pass: the literals' automaton is small, so its DFA
        # stays far inside the memory bound (beyond it a set would report nothing).
        self._set = re2.Set.SearchSet(_options())
        for word in self.words:
            self._set.Add(re2.escape(word))
        self._set.Compile()
        # A set whose automaton outgrew its memory would report nothing, silently: prove
        # once that every keyword is reported.
        every = self._set.Match(" ".join(self.words).encode())
        if sorted(every or []) != list(range(len(self.words))):
            raise RuntimeError("the redaction keyword set does not report every keyword")

    def found(self, low: str) -> list[str]:
        """The keywords (and extra words) that occur in `low`, the text lower-cased."""
        # ASCII as bytes: RE2's wrapper skips its offset bookkeeping for str.
        hits = self._set.Match(low.encode() if low.isascii() else low)
        return [self.words[i] for i in hits] if hits else []

    def candidates(self, low: str, found: list[str] | None = None) -> list[Rule]:
        """The rules whose keywords occur in `low` (the text lower-cased)."""
        words = self.found(low) if found is None else found
        if len(words) == 1:
            return self._rules_of[words[0]]
        return list(dict.fromkeys(r for word in words for r in self._rules_of[word]))

    def spans(
        self, text: str, low: str | None = None, found: list[str] | None = None
    ) -> list[tuple[int, int, str]]:
        """(start, end, rule id) of each secret in `text`, sorted, overlaps merged."""
        rules = self.candidates(text.lower() if low is None else low, found)
        if not rules:
            return []
        subject = text.encode() if text.isascii() else text  # ASCII: the same offsets
        hits = [(s, e, rule.id) for rule in rules for s, e in rule.find(subject)]
        if len(hits) < 2:
            return hits
        hits.sort()
        merged = hits[:1]
        for start, end, rid in hits[1:]:
            last = merged[-1]
            if start < last[1]:
                merged[-1] = (last[0], max(last[1], end), last[2])
            else:
                merged.append((start, end, rid))
        return merged


def load(name: str) -> RuleFile:
    """One of the package's rule files, validated."""
    text = resources.files("daemon.redaction").joinpath(name).read_text(encoding="utf-8")
    return RuleFile.model_validate(tomllib.loads(text))


@cache
def ruleset(extra: tuple[str, ...] = ()) -> RuleSet:
    """The rule set of the package's rule files, built once; `extra` words are reported too."""
    return RuleSet([load(name) for name in FILES], extra)

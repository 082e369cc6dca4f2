"""Provider secrets found the way gitleaks finds them: keywords first, then each rule's RE2 pattern.

The rules come from the package's data files: `gitleaks.toml` (gitleaks' own rule set, MIT)
and `providers.toml` (loopd's rules for tokens an agent prints bare). A text is lower-cased
once and searched for every rule's keywords with one RE2 alternation; only the rules whose
keyword occurs run their pattern. A match counts as gitleaks counts it: its secret (the
rule's secret group, else the first non-empty group) must have more Shannon entropy than the
rule's floor and must not be allowed by the global or the rule's allowlists (regexes on the
secret, the match or the line; stopwords). Allowlists that name file paths never apply:
output has no path. Patterns compile lazily, on a rule's first keyword hit.
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
            self._regex = re2.compile(self.spec.regex, _options())
            self._allows = self._allows + [_Allow(a) for a in self.spec.allowlists]
        return self._regex

    def find(self, text: str) -> Iterator[tuple[int, int]]:
        """The spans of this rule's secrets in `text`."""
        for match in self.regex().finditer(text):
            group = self.spec.secret_group
            if not group:
                group = next((g for g in range(1, match.re.groups + 1) if match.group(g)), 0)
            secret = match.group(group) or ""
            if not secret or entropy(secret) <= self.spec.entropy and self.spec.entropy:
                continue
            start, end = match.span(group)
            if self._allowed(secret, match.group(0), text, start, end):
                continue
            yield start, end

    def _allowed(self, secret: str, whole: str, text: str, start: int, end: int) -> bool:
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line = text[line_start : line_end if line_end >= 0 else len(text)]
        return any(allow.allows(secret, whole, line) for allow in self._allows)


class RuleSet:
    """Every rule of the rule files, and the keyword search choosing which run on a text."""

    def __init__(self, files: list[RuleFile]) -> None:
        self.rules: list[Rule] = []
        by_keyword: dict[str, list[Rule]] = {}
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
            for extra in file.allow:
                for rid in extra.rules:
                    by_id[rid].spec.allowlists.append(extra)
        words = sorted(by_keyword, key=len, reverse=True)
        # One search finds the keywords; a keyword inside a longer one found at the same
        # place is not reported by it, so each keyword also stands for those it contains.
        self._by_keyword = {
            word: list(
                dict.fromkeys(r for other in words if other in word for r in by_keyword[other])
            )
            for word in words
        }
        # A keyword that starts inside another's occurrence and ends past it is not reported
        # either: found `sk`, look for `k.eyj` too.
        starts: dict[str, list[str]] = {}
        for word in words:
            for i in range(1, len(word)):
                starts.setdefault(word[:i], []).append(word)
        self._overlaps = {
            word: list(
                dict.fromkeys(o for i in range(1, len(word)) for o in starts.get(word[i:], ()))
            )
            for word in words
        }
        self.keywords = re2.compile("|".join(re2.escape(w) for w in words), _options())

    def candidates(self, low: str) -> list[Rule]:
        """The rules whose keywords occur in `low` (the text lower-cased)."""
        found = set(self.keywords.findall(low))
        if not found:
            return []
        found.update(
            other for word in list(found) for other in self._overlaps[word] if other in low
        )
        if len(found) == 1:
            return self._by_keyword[found.pop()]
        return list(dict.fromkeys(r for word in found for r in self._by_keyword[word]))

    def spans(self, text: str, low: str | None = None) -> list[tuple[int, int, str]]:
        """(start, end, rule id) of each secret in `text`, sorted, overlaps merged."""
        rules = self.candidates(text.lower() if low is None else low)
        found = sorted((s, e, rule.id) for rule in rules for s, e in rule.find(text))
        merged: list[tuple[int, int, str]] = []
        for start, end, rid in found:
            if merged and start < merged[-1][1]:
                last = merged[-1]
                merged[-1] = (last[0], max(last[1], end), last[2])
            else:
                merged.append((start, end, rid))
        return merged


def load(name: str) -> RuleFile:
    """One of the package's rule files, validated."""
    text = resources.files("daemon.redaction").joinpath(name).read_text(encoding="utf-8")
    return RuleFile.model_validate(tomllib.loads(text))


@cache
def ruleset() -> RuleSet:
    """The rule set of the package's rule files, built once."""
    return RuleSet([load(name) for name in FILES])

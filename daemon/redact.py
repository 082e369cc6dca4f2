"""Secret redaction before anything is written to state or sent to a model.

`redact(text)` replaces each secret with a marker such as `[REDACTED:aws-access-key]`.
It runs on every transcript line, so a text without any of the cheap trigger substrings
(`AKIA`, `ghp_`, `sk-`, `xox`, `-----BEGIN`, `key`, `token`, `secret`, `passw`, ...) nor
any keyword of the provider rules is returned after one RE2 scan. `Redactor` does the same
for text fed line by line; it remembers when it is inside a PEM private key block that spans
lines, and reads a value on the line after its name (`<apiToken>` then the token).

What counts as a secret:
- the provider rules of `daemon/redaction/` (gitleaks' rule set and loopd's own, found by
  keyword, pattern and entropy: `daemon.redaction.ruleset`), each marked with its rule id;
- provider tokens recognized by their shape: AWS access key ids, GitHub, OpenAI, Anthropic
  and Slack tokens, Slack webhooks;
- PEM private key blocks, whole (an unterminated block is cut to the end of the text);
- an AWS secret access key (40 base64 characters) assigned to an aws secret name, or on the
  same text as an AWS access key id (credential CSV and `aws configure` output);
- a password in a URL (`scheme://user:password@host`), a `Bearer` token;
- a value assigned to a secret-looking name (`NAME=value`, `NAME: value`, `"name": "value"`):
  names ending in key/token/credential(s) need a high-entropy value (16+ characters, letters
  and digits or mixed case, about 3 bits of entropy a character); names ending in
  secret/password/passwd need 8+ characters that are not a reference (`$VAR`, `{{...}}`,
  `os.environ`, an ALL_CAPS variable name, a snake_case identifier, a path).
Git SHAs, UUIDs and ordinary words are left alone unless assigned to such a name.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the rule set is imported on first use (`_rules`), not by every importer
    from daemon.redaction.ruleset import RuleSet

MARK = "[REDACTED:{}]"
PRIVATE_KEY_MARK = "[REDACTED:private-key]"

_ASSIGNMENT_WORDS = ("key", "token", "secret", "passw", "credential")
_AWS_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "APKA")
_GITHUB_PREFIXES = ("ghp_", "gho_", "ghs_", "ghu_", "ghr_", "github_pat_")
_AWS_WORDS = frozenset(p.lower() for p in _AWS_PREFIXES)
_GITHUB_WORDS = frozenset(_GITHUB_PREFIXES)
_ASSIGNMENT_SET = frozenset(_ASSIGNMENT_WORDS)
# Literals (lowercase) of which every secret the hand-written rules recognize contains one;
# the provider rules' keyword search reports them too, so a line with none costs one search.
_TRIGGERS = (
    *_ASSIGNMENT_WORDS,
    *_AWS_WORDS,
    *_GITHUB_WORDS,
    "-----begin",
    "sk-",
    "xox",
    "://",
    "bearer",
)
_TRIGGER_SET = frozenset(_TRIGGERS)

_PEM_BEGIN = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----")
_PEM_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PEM_BLOCK = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----.*?-----END \1-----", re.DOTALL
)

_AWS_KEY_ID = re.compile(
    r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|APKA)"
    r"[A-Z0-9]{16}(?![A-Z0-9])"
)
_AWS_SECRET_NAMED = re.compile(
    r"(?i)(aws_?secret_?(?:access_?)?key\\?[\"']?\s*[:=]\s*\\?[\"']?)"
    r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
)
# A bare 40-character base64 run: only a secret next to an access key id (checked in code).
_BASE64_40 = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")

# A token starts a word, or follows an escape such as `\n` in a quoted string or JSON.
_START = r"(?:(?<![A-Za-z0-9_])|(?<=\\[nrt]))"
_GITHUB = re.compile(
    _START + r"github_pat_[A-Za-z0-9_]{22,255}|" + _START + r"gh[pousr]_[A-Za-z0-9]{36,255}\b"
)
_ANTHROPIC = re.compile(_START + r"sk-ant-[A-Za-z0-9_\-]{20,}")
_SLACK = re.compile(_START + r"xox[abposr]-[A-Za-z0-9\-]{10,}")
_SLACK_WEBHOOK = re.compile(
    r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/_\-]{20,}"
)
# OpenAI keys: `sk-`, `sk-proj-`, `sk-svcacct-`, `sk-admin-`; random, so letters and digits.
_OPENAI = re.compile(_START + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}")
_URL_PASSWORD = re.compile(
    r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@\"'<>]{1,200}:)([^\s@/\"'<>]{3,200})(@)"
)
_BEARER = re.compile(r"(?i)(\bbearer\s+)([A-Za-z0-9\-._~+/]{16,}=*)")

# `name = value`, `name: value`, `"name": "value"`, also inside JSON-escaped text (\").
# Anchored on the keyword that ends the name, so a long line is scanned quickly.
_ASSIGNMENT = re.compile(
    r"(?=[KkTtCcSsPp])(?i:(?P<kw>key|token|credentials?|secret|passwd|password))[sS]?"
    r"(?P<pre>\\?[\"']?\s*[:=]\s*\\?[\"']?|[ =])"
    r"(?P<value>[^\s\"'`\\,;&()\[\]{}<>|]{8,512}+)"
    r"(?=$|[\s\"'`\\,;&)}\]|>])"
)
_PLACEHOLDER_WORDS = frozenset(
    "none null nil true false undefined changeme password secret redacted example "
    "placeholder your_token your_key string optional required".split()
)
_REFERENCE = re.compile(
    r"^(?:[$%*<{~/.]|\[REDACTED)"  # $VAR, %(x)s, ****, <token>, {{x}}, ~/path, /path, ./x
    r"|^[A-Z][A-Z0-9_]*$"  # an environment variable's name
    r"|^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$"  # a dotted attribute path
    r"|^[a-z]+(?:[_\-][a-z]+)*$"  # a snake_case or kebab-case identifier or a word
    r"|^(.)\1+$"  # xxxxxxxx
)


def _entropy(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


# `key="ClearTextPassword"`: a CamelCase name is a key's name, not a random key.
_CAMEL_WORDS = re.compile(r"^[A-Za-z][a-z]+(?:[A-Z][a-z]+)+$")


def _high_entropy(value: str) -> bool:
    if len(value) < 16 or _REFERENCE.search(value) or _CAMEL_WORDS.match(value):
        return False
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    mixed_case = any(c.islower() for c in value) and any(c.isupper() for c in value)
    return ((has_digit and has_alpha) or mixed_case) and _entropy(value) >= 3.0


def _looks_like_password(value: str) -> bool:
    return (
        len(value) >= 8 and value.lower() not in _PLACEHOLDER_WORDS and not _REFERENCE.search(value)
    )


def _assignment(match: re.Match[str]) -> str:
    keyword, value = match["kw"].lower(), match["value"]
    if match["pre"] == " " and not _flag_before(match):
        return match[0]  # `key value` is prose unless it is a `--key value` option
    if keyword.startswith(("key", "token", "credential")):
        secret = _high_entropy(value)
    else:
        secret = _looks_like_password(value)
    if not secret:
        return match[0]
    return match[0][: match.start("value") - match.start()] + MARK.format("secret")


_ASSIGNMENT_STARTS = ("key", "token", "credential", "secret", "passw")


def _assignments(text: str) -> str:
    """`_ASSIGNMENT.sub(_assignment, text)`, trying only where a keyword starts."""
    if "=" not in text and ":" not in text and "--" not in text:
        return text  # no `name=`, `name:` nor `--name value`: prose that names a key
    if not text.isascii():  # lower() may move offsets: the plain scan
        return _ASSIGNMENT.sub(_assignment, text)
    low = text.lower()
    starts = []
    for word in _ASSIGNMENT_STARTS:
        at = low.find(word)
        while at >= 0:
            starts.append(at)
            at = low.find(word, at + 1)
    # Every match starts at a keyword, so matching only there finds what sub() finds, far
    # faster than sub()'s attempt at every character of a long line.
    out, done = [], 0
    for at in sorted(starts):
        if at < done:
            continue
        match = _ASSIGNMENT.match(text, at)
        if match:
            out += [text[done:at], _assignment(match)]
            done = match.end()
    return "".join(out) + text[done:] if out else text


def _flag_before(match: re.Match[str]) -> bool:
    """Whether the keyword ends a command-line option such as `--api-key`."""
    text, start = match.string, match.start()
    i = start
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "-_"):
        i -= 1
    return text.startswith("--", i)


def _openai(match: re.Match[str]) -> str:
    token = match[0]
    body = token.split("-", 2)[-1]
    if any(c.isdigit() for c in body) and any(c.isalpha() for c in body):
        return MARK.format("openai-key")
    return token


def _url_password(match: re.Match[str]) -> str:
    if match[2].startswith("[REDACTED:"):
        return match[0]
    return match[1] + MARK.format("password") + match[3]


def _bearer(match: re.Match[str]) -> str:
    if _high_entropy(match[2]) or match[2].count(".") == 2:  # opaque token or a JWT
        return match[1] + MARK.format("bearer-token")
    return match[0]


def _rules() -> RuleSet:
    """The provider rules, whose keyword search also reports the triggers above."""
    global _RULES
    if _RULES is None:  # built on first use: a command that never redacts never reads them
        # Imported here too: re2 and the rule models cost the read-only commands (`status`).
        from daemon.redaction.ruleset import ruleset

        _RULES = ruleset(_TRIGGERS)
    return _RULES


_RULES: RuleSet | None = None


def _providers(text: str, low: str, found: list[str] | None = None) -> str:
    """`text` with the provider rules' secrets replaced by markers."""
    for _ in range(3):  # a multi-line rule may match again around a marker: redact it too
        spans = _rules().spans(text, low, found)
        found = None
        if not spans:
            break
        for start, end, rule in reversed(spans):
            text = text[:start] + MARK.format(rule) + text[end:]
        low = text.lower()
    return text


def _redact_closed(
    text: str, low: str | None = None, found: list[str] | None = None
) -> tuple[str, bool]:
    """Redact `text`; the flag says an unterminated private key block was cut at its end.

    `low` and `found`: the text lower-cased and its keywords, when the caller has them.
    """
    low = text.lower() if low is None else low
    found = _rules().found(low) if found is None else found
    if not found:
        return text, False
    words = _TRIGGER_SET.intersection(found)
    if not words:
        return _providers(text, low, found), False
    original, opened = text, False
    if "-----begin" in words:
        text = _PEM_BLOCK.sub(PRIVATE_KEY_MARK, text)
        begin = _PEM_BEGIN.search(text)
        if begin:
            text = text[: begin.start()] + PRIVATE_KEY_MARK
            opened = True
    if not _AWS_WORDS.isdisjoint(words):
        text, ids = _AWS_KEY_ID.subn(MARK.format("aws-access-key"), text)
        if ids:
            text = _BASE64_40.sub(
                lambda m: MARK.format("aws-secret-key") if _high_entropy(m[0]) else m[0], text
            )
    if not _GITHUB_WORDS.isdisjoint(words):
        text = _GITHUB.sub(MARK.format("github-token"), text)
    if "sk-" in words:
        text = _ANTHROPIC.sub(MARK.format("anthropic-key"), text)
        text = _OPENAI.sub(_openai, text)
    if "xox" in words:
        text = _SLACK.sub(MARK.format("slack-token"), text)
    if "://" in words:
        text = _SLACK_WEBHOOK.sub(MARK.format("slack-webhook"), text)
        text = _URL_PASSWORD.sub(_url_password, text)
    if "bearer" in words:
        text = _BEARER.sub(_bearer, text)
    if not _ASSIGNMENT_SET.isdisjoint(words):
        if "secret" in words:
            text = _AWS_SECRET_NAMED.sub(lambda m: m[1] + MARK.format("aws-secret-key"), text)
        text = _assignments(text)
    if text == original:  # the common case: the provider rules reuse the keyword search
        return _providers(text, low, found), opened
    return _providers(text, text.lower()), opened


def redact(text: str) -> str:
    """Replace secrets in `text` with redaction markers."""
    return _redact_closed(text)[0]


class Redactor:
    """Redacts text fed line by line, carrying an open private key block across lines."""

    def __init__(self) -> None:
        self.in_private_key = False
        self.touched = False  # the last line was part of a multi-line private key block
        self._opener = ""  # the last line, when it ends as a name whose value may follow

    def line(self, text: str) -> str:
        """The redacted form of the next line."""
        opener, self._opener = self._opener, ""
        self.touched = self.in_private_key
        prefix = ""
        if self.in_private_key:
            end = _PEM_END.search(text)
            if not end:
                return PRIVATE_KEY_MARK
            self.in_private_key = False
            prefix, text = PRIVATE_KEY_MARK, text[end.end() :]
        elif opener and text.strip():
            text = _after_opener(opener, text)
        low = text.lower()
        found = _rules().found(low)
        if found and (text[-1:] in _OPENERS or text[-1:].isspace()) and _opens(text):
            tail = text[-200:]
            if len(text) <= 200 or _rules().found(tail.lower()):
                self._opener = tail  # it names what a rule keys on, such as `<apiToken>`
        out, opened = _redact_closed(text, low, found)
        if opened:
            self.in_private_key = self.touched = True
        return prefix + out


# A line ending so may name a value the next line holds (`<apiToken>`, `password:`, `KEY =`).
_OPENERS = (">", ":", "=")


def _opens(text: str) -> bool:
    """Whether `text` ends with a name whose value may follow: `<apiToken>`, `"key":`, `PW =`."""
    end = text.rstrip()
    if end.endswith(">"):
        name = end[end.rfind("<") + 1 : -1]  # an element's name, not `<a@b.c>` or `-> x>`
        return name.replace("_", "a").replace("-", "a").replace(".", "a").isalnum()
    if end[-1:] not in (":", "="):
        return False
    before = end.rstrip(":=").rstrip().rstrip("\"'")
    return before[-1:].isalnum() or before[-1:] == "_"  # not `def f() -> dict[str, int]:`


def _after_opener(opener: str, text: str) -> str:
    """`text` with what the provider rules find in it as the value of the line before."""
    # In a diff both lines carry the same `+` or `-`: the value is read without it.
    marker = 1 if text[:1] in ("+", "-") and text[:1] == opener[:1] else 0
    joined = f"{opener[marker:]}\n{text[marker:]}"
    offset = len(opener) - marker + 1 - marker
    for start, end, rule in reversed(_rules().spans(joined)):
        if start >= offset + marker:
            text = text[: start - offset] + MARK.format(rule) + text[end - offset :]
    return text


_SECRET_NAME_WORDS = ("key", "token", "secret", "passw", "credential")


def redact_value(value: Any, name: str = "") -> Any:
    """`value` with every string in it redacted; a dict key that names a secret counts."""
    if isinstance(value, str):
        if name and any(word in name.lower() for word in _SECRET_NAME_WORDS):
            # The value alone may not look like a secret; with its name it does.
            joined = redact(f"{name}={value}")
            if joined.startswith(f"{name}="):
                return joined[len(name) + 1 :]
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_value(item, str(key)) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(item) for item in value]
    return value

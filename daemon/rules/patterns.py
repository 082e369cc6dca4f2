"""Rule trigger patterns, run on RE2: linear time in the text, whatever the pattern.

A pattern such as `(?i)(\\w+\\s?)+$` takes exponential time on a backtracking engine (Python's
`re`) and would hold the daemon; RE2 has no backreferences or lookarounds and runs every
pattern in time linear in the text. Patterns are also bounded in length and in the memory
their compiled program may take. A pattern RE2 refuses says why; the rule verifier rejects a
learned rule for it, and a hand-written rule keeps working without that pattern.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import re2

try:  # Python 3.11+: the regex parser lives here; sre_parse is its deprecated alias
    # The type: ignore below: a private module of the standard library, whose stubs do not list it.
    import re._parser as _sre  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    import sre_parse as _sre

MAX_PATTERN = 500  # characters
MAX_PROGRAM = 8 << 20  # bytes of memory for one compiled pattern


class PatternError(ValueError):
    """A trigger pattern RE2 cannot run; the message says why."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # the reason goes into the exception, not to stderr
    options.max_mem = MAX_PROGRAM
    return options


def compile_pattern(source: str) -> re2._Regexp:
    """The compiled pattern; PatternError saying why when RE2 cannot run it."""
    if len(source) > MAX_PATTERN:
        raise PatternError(f"longer than {MAX_PATTERN} characters ({len(source)})")
    try:
        return re2.compile(source, _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(f"not supported by RE2: {reason}") from None


def pattern_problem(source: str) -> str:
    """Why RE2 cannot run `source`; '' when it can."""
    try:
        compile_pattern(source)
    except PatternError as exc:
        return str(exc)
    return ""


# -- the literal a match must contain (for the index) ------------------------------------


def _literals(parsed: Any) -> list[str]:
    """Literal strings every match of the parsed sequence contains."""
    out: list[str] = []
    run: list[str] = []
    for op, av in parsed:
        name = str(op)
        if name == "LITERAL":
            run.append(chr(av))
            continue
        if run:
            out.append("".join(run))
            run = []
        if name == "SUBPATTERN":
            out.extend(_literals(av[-1]))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and av[0] >= 1:
            out.extend(_literals(av[2]))
        elif name == "ATOMIC_GROUP":
            out.extend(_literals(av))
    if run:
        out.append("".join(run))
    return out


def required_literal(pattern: str) -> str:
    """The longest literal (lower-cased) that every match of `pattern` contains; '' if none."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # RE2-only syntax such as [[:alpha:]]
            parsed = _sre.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return ""  # not Python syntax (RE2's \pL, say): such a pattern runs on every task
    found = _literals(parsed)
    return max(found, key=len).lower() if found else ""


# -- breadth -------------------------------------------------------------------------------
# Texts that share nothing: a pattern that matches the empty text, or every one of these,
# matches every task whatever its words.
_UNRELATED = ("0", "Z", " ", "-", "\u00e9", "\u4e2d")


def matches_everything(pattern: str) -> bool:
    """Whether `pattern` fires on every task (`.*`, `^`, `(?s).`, an empty pattern)."""
    try:
        compiled = compile_pattern(pattern)
    except PatternError:
        return False
    if compiled.search("") is not None:
        return True
    return all(compiled.search(text) is not None for text in _UNRELATED)

"""Globs with git's wildmatch semantics, compiled to regular expressions and cached.

How loopd reads "globs follow git's wildmatch" (docs/configuration.md, "Globs"):

- A pattern is matched against the whole name: a branch name (`main`, `release/1.2`) or a
  path relative to the repository's top (`src/app.py`). Patterns are anchored at the top, as
  git's `:(glob)` pathspecs and gitignore patterns holding a `/` are; a leading `/` is
  allowed and changes nothing. A pattern without `/` does NOT match at every depth: `*.py`
  matches `app.py` but not `src/app.py`; write `**/*.py` for any depth.
- `*` matches any run of characters except `/`; `?` one character except `/`.
- `**` as a whole path component crosses folders: `**/x` (x at any depth, the top included),
  `x/**` (everything inside x), `a/**/b` (zero or more folders between). A `**` inside a
  component (`a**b`) acts like `*`, as in git.
- `[abc]`, `[a-z]`, `[!a-z]` or `[^a-z]`, and POSIX classes such as `[[:digit:]]`; a class
  never matches `/`. An unclosed `[` is a literal character (git would match nothing).
- `\\x` matches `x` literally.

For paths (`path_matches`), a pattern also covers everything inside a folder it names, as
git's pathspecs and gitignore do: `tests`, `tests/` and `tests/*` all cover `tests/a/b.py`.
A path pattern `x/**` also covers `x` itself: a guard on a folder's contents must hold when
`x` is committed as a file or a symlink in place of the folder (a `.githooks` link).
Branch names (`wildmatch`) are matched exactly: `release/*` does not match `release/1/2`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "\\x21-\\x7e",
    "lower": "a-z",
    "print": "\\x20-\\x7e",
    "punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


def _bracket(pattern: str, start: int) -> tuple[str, int] | None:
    """Translate the class opening at `pattern[start] == '['`; None when it is not closed."""
    i = start + 1
    negate = i < len(pattern) and pattern[i] in "!^"
    if negate:
        i += 1
    parts: list[str] = []
    first = True
    while i < len(pattern):
        ch = pattern[i]
        if ch == "]" and not first:
            body = "".join(parts) or "^\\x00-\\U0010ffff"
            if negate:
                return f"[^/{body}]", i + 1
            return f"(?!/)[{body}]", i + 1
        first = False
        if ch == "[" and pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            name = pattern[i + 2 : end] if end >= 0 else ""
            if name in _POSIX_CLASSES:
                parts.append(_POSIX_CLASSES[name])
                i = end + 2
                continue
        if ch == "\\" and i + 1 < len(pattern):
            i += 1
            ch = pattern[i]
        # A range `a-z`; a `-` first or last is literal.
        if i + 2 < len(pattern) and pattern[i + 1] == "-" and pattern[i + 2] != "]":
            hi_index = i + 2
            hi = pattern[hi_index]
            if hi == "\\" and hi_index + 1 < len(pattern):
                hi_index += 1
                hi = pattern[hi_index]
            if ord(hi) >= ord(ch):
                parts.append(f"{re.escape(ch)}-{re.escape(hi)}")
            i = hi_index + 1
            continue
        parts.append(re.escape(ch))
        i += 1
    return None


def _translate(pattern: str) -> str:
    """The regular expression (without anchors) for one wildmatch pattern."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            stars = j - i
            at_component_start = i == 0 or pattern[i - 1] == "/"
            at_component_end = j == n or pattern[j] == "/"
            if stars >= 2 and at_component_start and at_component_end:
                if j == n:
                    # `x/**` or a lone `**`: everything (inside x).
                    out.append(".*")
                    i = j
                else:
                    # `**/`: zero or more leading folders.
                    out.append("(?:.*/)?")
                    i = j + 1
                continue
            out.append("[^/]*")
            i = j
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            translated = _bracket(pattern, i)
            if translated is None:
                out.append(re.escape(ch))
                i += 1
            else:
                out.append(translated[0])
                i = translated[1]
        elif ch == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(ch))
            i += 1
    return "".join(out)


@lru_cache(maxsize=4096)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """The compiled, anchored regular expression of a wildmatch pattern."""
    return re.compile(rf"\A(?:{_translate(pattern.lstrip('/'))})\Z", re.DOTALL)


@lru_cache(maxsize=4096)
def _compile_path_glob(pattern: str) -> re.Pattern[str]:
    body = pattern.lstrip("/")
    if body.endswith("/"):
        body = body.rstrip("/") + "/**"
    if body.endswith("/**") and not body.endswith("\\/**") and len(body) > 3:
        # `x/**` covers `x` too: a link or file in place of the folder is as guarded.
        body = body[:-3]
    # The pattern, or the pattern naming a folder that holds the path.
    return re.compile(rf"\A(?:{_translate(body)})(?:/.*)?\Z", re.DOTALL)


def wildmatch(pattern: str, text: str) -> bool:
    """Whether `text` (a branch name, a path) matches `pattern` as a whole."""
    return compile_glob(pattern).match(text) is not None


def path_matches(pattern: str, path: str) -> bool:
    """Whether the repository path matches `pattern` or lies inside a folder it matches."""
    return _compile_path_glob(pattern).match(path.lstrip("/")) is not None


def any_path_matches(patterns: Iterable[str], path: str) -> bool:
    """Whether any of `patterns` covers the repository path."""
    return any(path_matches(p, path) for p in patterns)


def matching_paths(patterns: Iterable[str], paths: Iterable[str]) -> list[str]:
    """The paths that any of `patterns` covers, in their order."""
    patterns = list(patterns)
    return [p for p in paths if any_path_matches(patterns, p)]


def any_branch_matches(patterns: Iterable[str], branch: str) -> bool:
    """Whether any of `patterns` matches the branch name."""
    return any(wildmatch(p, branch) for p in patterns)


def glob_problem(pattern: str) -> str:
    """What is wrong with a glob as a person meant it, or "" (for `loopd check`'s warnings)."""
    if not pattern.strip():
        return "is empty"
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            closed = _bracket(pattern, i)
            if closed is None:
                return (
                    f"has a `[` at character {i + 1} that is never closed: loopd reads it as a "
                    "literal `[` (git would match nothing); close the class (`[abc]`) or "
                    "escape it (`\\[`)"
                )
            i = closed[1]
            continue
        i += 1
    if pattern.endswith("\\") and not pattern.endswith("\\\\"):
        return "ends with a lone `\\`"
    return ""

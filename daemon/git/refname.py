"""Branch names from outside (a delivery, a poll) checked as `git check-ref-format --branch` does.

A name that passes can be put after `refs/heads/` and `refs/remotes/NAME/` in a refspec
loopd builds: it holds no `:` (a refspec's separator), no `*`, no leading `-` and nothing
else git refuses in a ref. Checked in Python, without a git process per delivery; the tests
compare it with git's own command.
"""

from __future__ import annotations

MAX_BRANCH = 255  # bytes; longer names are refused (git itself has no such cap)
_FORBIDDEN = set(" ~^:?*[\\\x7f")


def branch_problem(name: str) -> str:
    """Why `name` is not a branch name git accepts; "" when it is one."""
    if not name:
        return "it is empty"
    if len(name.encode("utf-8", "surrogateescape")) > MAX_BRANCH:
        return f"it is longer than {MAX_BRANCH} bytes"
    if name.startswith("-") or name in ("@", "HEAD"):
        return "git refuses it as a branch name"
    if any(ord(c) < 32 or c in _FORBIDDEN for c in name):
        return "it holds a control character, a space or one of ~ ^ : ? * [ \\"
    if ".." in name or "@{" in name or "//" in name:
        return "it holds '..', '@{' or '//'"
    if name.startswith("/") or name.endswith(("/", ".")):
        return "it begins with '/' or ends with '/' or '.'"
    for part in name.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            return "a part of it begins with '.' or ends with '.lock'"
    return ""

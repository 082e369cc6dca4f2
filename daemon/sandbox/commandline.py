"""The programs a shell command line starts, read as the shell would look them up."""

from __future__ import annotations

import re
import shlex

# Words a shell runs itself: never looked up on the PATH.
SHELL_WORDS = frozenset(
    "! . : [ [[ alias bg break builtin case cd command continue declare do done echo elif "
    "else esac eval exec exit export false fg fi for function getopts hash if in jobs kill "
    "let local printf pwd read readonly return select set shift source test then time times "
    "trap true type typeset ulimit umask unalias unset until wait while { } ( )".split()
)
# Reserved words after which the next word is a command again.
_KEYWORDS = frozenset("! if then else elif do while until time { ( exec command".split())
_OPERATORS = frozenset(";&|()\n")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _tokens(command: str) -> list[str]:
    """The words and operators of a command line; quotes kept together (`"a; b"` is one)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an unclosed quote: the words as they stand
        return command.split()


def programs(command: str) -> list[str]:
    """The programs a shell command line would look up: the first word of each simple command."""
    out = []
    first = True
    for token in _tokens(command):
        if token and set(token) <= _OPERATORS:
            first = True
            continue
        if not first or _ASSIGNMENT.match(token):
            continue
        first = token in _KEYWORDS
        if token not in SHELL_WORDS and not token.startswith("$"):
            out.append(token)
    return out

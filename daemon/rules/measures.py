"""What tools printed of files: sizes, counts and the lines they showed (docs/rules.md#grounding).

The evidence holds commands with their output: an agent's tool call and its result in a
transcript, or a shell session in a text file (`$ wc -c a.txt` and the lines after it, with
the prompts people post: `$`, `%`, `>`, `➜  ~`, `user@host:~$`). Read from them:
- sizes in bytes: `wc -c` (and `wc`'s byte column), `stat`'s `Size:` and `stat -c %s`,
  `du -b`; the size column of an `ls -l` line of a regular file (a folder's or a link's is
  its entry's own) and `stat`'s `Size:` wherever they are, being recognisable by their
  shape;
- sizes with a letter: `du` (kibibytes unless told otherwise: `-k`, `-m`, `-g`);
- counts: lines (`wc -l`, `wc`'s first column, `grep -c`) and words (`wc -w`, its second);
- the lines a command printed of one file without their numbers: `cat FILE` from its first
  line, `head -n N FILE`, `sed -n 'A,Bp' FILE`;
- the lines that are counts, never line numbers (`grep -c`'s `app.py:3`).
Each value keeps where it was read (file, line numbers), for the excerpts a lesson carries.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

Where = tuple[str, tuple[int, ...]]  # evidence file name, its line numbers (1-based)

_PROMPT = re.compile(
    r"^\s*(?:\([\w.-]+\)\s*)?(?:[\w.-]+@[\w.-]+:?[^\s$#%>]*\s*)?(?:[$%>❯]|➜\s+\S+)\s*(?P<cmd>\S.*)$"
)
_WRAPPERS = {"sudo", "command", "busybox", "perl", "time", "env", "nice", "exec"}
_TOOLS = {"wc", "ls", "stat", "du", "grep", "egrep", "fgrep", "rg", "cat", "head", "sed", "gstat"}
# A regular file's line: a folder's or a link's size is its entry's, not what it holds.
_LS_LINE = re.compile(
    r"^-[rwxsStT-]{9}[.@+]?\s+\d+\s+(?:\S+\s+){1,2}(?P<size>\d+)\s+\S+\s+\S+\s+\S+\s+\S"
)
_STAT_SIZE = re.compile(r"^\s*Size:\s*(?P<size>\d+)\b", re.MULTILINE)
_WC_LINE = re.compile(r"^\s*(\d+)(?:\s+(\d+))?(?:\s+(\d+))?(?:\s+(\d+))?(?:\s+(\S.*))?\s*$")
_COUNT_LINE = re.compile(r"^(?:(?P<path>.+):)?(?P<n>\d+)\s*$")
_DU_LINE = re.compile(r"^(?P<n>\d+)\s+\S")
_SED_RANGE = re.compile(r"^'?(\d+)(?:,(\d+))?p'?$")


@dataclass
class Measures:
    """Sizes and counts tools printed, and the lines of files they showed, with where."""

    bytes: dict[int, Where] = field(default_factory=dict)
    lettered: dict[tuple[str, str], Where] = field(default_factory=dict)  # (number, K|M|G)
    lines: dict[int, Where] = field(default_factory=dict)  # line counts
    words: dict[int, Where] = field(default_factory=dict)
    shown: list[tuple[str, range, Where]] = field(default_factory=list)  # file, its lines
    counted: set[str] = field(default_factory=set)  # output lines that are counts

    def size(self, number: str, unit: str) -> Where | None:
        """Where a tool printed that size, or None."""
        if unit in ("B", "byte", "bytes"):
            return self.bytes.get(int(number)) if number.isdigit() else None
        if unit[:1] in "KMGT" and unit[1:] in ("", "iB"):  # du's blocks are binary
            return self.lettered.get((number, unit[0]))
        return None

    def count(self, number: int, noun: str) -> Where | None:
        """Where a tool printed that count of lines or words, or None."""
        return (self.lines if noun.startswith("line") else self.words).get(number)


def _note(table: dict[Any, Where], key: Any, where: Where) -> None:
    table.setdefault(key, where)


def _programs(command: str) -> list[tuple[str, list[str]]]:
    """(program, its arguments) of each part of a shell line (`;`, `&&`, `|` between)."""
    out = []
    for part in re.split(r"\|\|?|&&|;", command):
        try:
            words = shlex.split(part, comments=True)
        except ValueError:
            words = part.split()
        while words and (words[0] in _WRAPPERS or "=" in words[0]):
            words = words[1:]
        if words:
            out.append((words[0].rsplit("/", 1)[-1], words[1:]))
    return out


def _flags(args: list[str]) -> set[str]:
    """Single-letter options (`-lc` is l and c) and long ones as given."""
    found: set[str] = set()
    for arg in args:
        if arg.startswith("--"):
            found.add(arg.split("=", 1)[0])
        elif arg.startswith("-") and len(arg) > 1:
            found.update(arg[1:])
    return found


def read_output(
    command: str,
    output: str,
    name: str,
    at: tuple[int, ...],
    into: Measures,
    whole: bool = False,
) -> None:
    """What `command` printed in `output` (lines `at` of evidence file `name`); `whole`: the
    output is all it printed (a tool result, not a session read up to a blank line)."""
    where: Where = (name, at)
    lines = output.rstrip("\n").split("\n") if output.strip() else []
    for program, args in _programs(command):
        if program == "wc":
            _wc(_flags(args), lines, where, into)
        elif program in ("grep", "egrep", "fgrep", "rg") and {"c", "--count"} & _flags(args):
            _counts(lines, where, into)
        elif program in ("du",):
            _du(_flags(args), lines, where, into)
        elif program in ("stat", "gstat") and any("%s" in a or "%z" in a for a in args):
            for line in lines:
                if line.strip().isdigit():
                    _note(into.bytes, int(line), where)
        elif (
            program in ("cat", "head", "sed")
            and len(_programs(command)) == 1
            and "|" not in command
        ):
            _shown(program, args, lines, where, into, whole)


def _wc(flags: set[str], lines: list[str], where: Where, into: Measures) -> None:
    """wc prints its columns in one order whatever the order of its options."""
    chosen = [
        col
        for col, names in (
            ("l", {"l", "--lines"}),
            ("w", {"w", "--words"}),
            ("m", {"m", "--chars"}),
            ("c", {"c", "--bytes"}),
        )
        if flags & names
    ] or ["l", "w", "c"]
    for line in lines:
        match = _WC_LINE.match(line)
        if match is None:
            continue
        numbers = [int(n) for n in match.groups()[:4] if n is not None]
        if len(numbers) != len(chosen):
            continue
        for col, number in zip(chosen, numbers, strict=True):
            table = {"l": into.lines, "w": into.words, "c": into.bytes}.get(col)
            if table is not None:
                _note(table, number, where)
        if chosen == ["l"]:
            into.counted.add(line.strip())


def _counts(lines: list[str], where: Where, into: Measures) -> None:
    """grep -c: a count of matching lines per file (`N`, or `PATH:N` for several files)."""
    for line in lines:
        match = _COUNT_LINE.match(line.strip())
        if match is not None:
            _note(into.lines, int(match.group("n")), where)
            into.counted.add(line.strip())


def _du(flags: set[str], lines: list[str], where: Where, into: Measures) -> None:
    """du: bytes with -b, else blocks of a kibibyte (-k), mebibyte (-m) or gibibyte (-g)."""
    if flags & {"h", "--human-readable", "--si"}:
        return  # printed with its letter: found as written
    letter = (
        "B" if flags & {"b", "--bytes"} else "M" if "m" in flags else "G" if "g" in flags else "K"
    )
    for line in lines:
        match = _DU_LINE.match(line.strip())
        if match is None:
            continue
        if letter == "B":
            _note(into.bytes, int(match.group("n")), where)
        else:
            _note(into.lettered, (match.group("n"), letter), where)


def _shown(
    program: str, args: list[str], lines: list[str], where: Where, into: Measures, whole: bool
) -> None:
    """The lines of one file that cat, head or sed -n printed, by their numbers; `whole`: the
    output is all the command printed (a tool result), so cat's count of lines is the file's."""
    if not lines or any(a.startswith((">", "<")) for a in args):
        return
    count = len(lines)
    if program == "head":
        args = [a for a in args if not re.fullmatch(r"-n?\d+|--lines=\d+", a)]
        if args[:1] == ["-n"] and len(args) > 1 and args[1].isdigit():
            args = args[2:]
    operands = [a for a in args if not a.startswith("-")]
    options = [a for a in args if a.startswith("-")]
    if program in ("cat", "head") and not options and len(operands) == 1:
        into.shown.append((operands[0], range(1, count + 1), where))
    if program == "cat" and options in ([], ["-n"]) and len(operands) == 1 and whole:
        _note(into.lines, count, where)  # the whole file: its count of lines
    elif program == "sed" and options == ["-n"] and len(operands) == 2:
        match = _SED_RANGE.match(operands[0])
        if match is not None:
            first = int(match.group(1))
            last = min(int(match.group(2) or first), first + count - 1)
            into.shown.append((operands[1], range(first, last + 1), where))


def read_shapes(text: str, name: str, into: Measures, at: int = 0) -> None:
    """Sizes recognisable without their command: ls -l lines, stat's `Size:`.

    `at`: the evidence line all of `text` is on (a transcript's result); 0: its own lines.
    """
    for number, line in enumerate(text.split("\n"), 1):
        where: Where = (name, (at or number,))
        match = _LS_LINE.match(line.strip())
        if match is not None:
            _note(into.bytes, int(match.group("size")), where)
        for size in _STAT_SIZE.finditer(line):
            _note(into.bytes, int(size.group("size")), where)


def read_session(text: str, name: str, into: Measures) -> None:
    """A text file's shell sessions: each prompt line with its command, and its output."""
    rows = text.split("\n")
    starts = []
    for i, row in enumerate(rows):
        match = _PROMPT.match(row)
        if match is not None and _names_a_tool(match.group("cmd")):
            starts.append((i, match.group("cmd")))
    for k, (i, command) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(rows)
        body: list[str] = []
        for row in rows[i + 1 : end]:
            if row.startswith(("[exit ", "```")) or (not row.strip() and body):
                break
            body.append(row)
        at = tuple(range(i + 1, i + 2 + len(body)))
        read_output(command, "\n".join(body), name, at, into)
    read_shapes(text, name, into)


def _names_a_tool(command: str) -> bool:
    return any(program in _TOOLS for program, _ in _programs(command))


def read_transcript(parsed: list[Any], name: str, into: Measures) -> None:
    """An agent's shell tool calls and their results, from a transcript's parsed lines."""
    calls: dict[str, tuple[str, int]] = {}  # call id -> (command, its line)
    last: tuple[str, int] = ("", 0)
    for i, event in enumerate(parsed):
        if not isinstance(event, dict):
            continue
        if event.get("type") == "tool_call":
            args = event.get("arguments") or event.get("input") or {}
            command = args.get("command", "") if isinstance(args, dict) else ""
            calls[str(event.get("call_id", ""))] = last = (str(command), i + 1)
        elif event.get("type") == "tool_result":
            command, line = calls.get(str(event.get("call_id", "")), last)
            output = str(event.get("output", ""))
            if command:
                read_output(command, output, name, (line, i + 1), into, whole=True)
            read_shapes(output, name, into, i + 1)

"""Where the evidence shows a file at a line, and which files it names (docs/rules.md#grounding).

A line location with a folder (`src/app/main.rs:19`) holds when the evidence shows that path,
or a path of its own that ends with it at a `/`, at that line. A bare file name
(`main.rs:19`) holds only when the evidence names one file of that name: with two
`systems.rs` in different folders, a rule must say which. Paths are compared with `\\` as
`/` and without a leading `./`; a path that ends another one at a `/` (a traceback's
absolute path, pytest's relative one) is taken for the same file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from daemon.rules.claims import PATH_TOKEN, is_path, locations_in

_TRACEBACK = re.compile(r'File "(?P<path>[^"\n]+)", line (?P<n>\d+)')
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GIT_SIDES = re.compile(r"(?m)^(diff --git|---|\+\+\+) (.*)$")
_LISTED = re.compile(r"^(?:Output: )?\s*(\d+)(?:\t|:)", re.MULTILINE)


def file_key(path: str) -> str:
    """A path as compared: `/` between parts, no `./` parts, no surrounding quotes."""
    path = path.strip().strip("'\"").replace("\\", "/")
    path = re.sub(r"(?:^|(?<=/))\./", "", path)
    return path.rstrip("/")


def _ends(longer: str, shorter: str) -> bool:
    return longer == shorter or longer.endswith("/" + shorter)


@dataclass
class Locations:
    """The lines the evidence shows of each file, and every file path it names."""

    shown: dict[str, set[int]] = field(default_factory=dict)  # file key -> lines
    named: set[str] = field(default_factory=set)  # file keys

    def add(self, path: str, lines: Any) -> None:
        key = file_key(path)
        if key:
            self.shown.setdefault(key, set()).update(lines)
            self.named.add(key)

    def name_text(self, text: str) -> None:
        """Take note of every path `text` names, for telling bare names apart."""
        for match in PATH_TOKEN.finditer(text.replace("\\", "/")):
            token = match.group(0).rstrip(".-")
            if is_path(token):
                self.named.add(file_key(token))

    def files_named(self, name: str) -> list[str]:
        """The distinct files of that base name the evidence names (one path per file)."""
        keys = {k for k in self.named | set(self.shown) if PurePosixPath(k).name == name}
        return [k for k in keys if not any(o != k and _ends(o, k) for o in keys)]

    def holds(self, path: str, line: int) -> bool:
        """Whether the evidence shows that file at that line (see the module docstring)."""
        key = file_key(path)
        if "/" in key:
            return any(line in lines and _ends(k, key) for k, lines in self.shown.items())
        if len(self.files_named(key)) > 1:
            return False
        return any(
            line in lines and PurePosixPath(k).name == key for k, lines in self.shown.items()
        )


def _one_side(match: re.Match[str]) -> str:
    """A diff header without git's a/ and b/ prefixes."""
    paths = [p.removeprefix("a/").removeprefix("b/") for p in match.group(2).split(" ")]
    return f"{match.group(1)} {' '.join(paths)}"


def written(text: str, into: Locations) -> None:
    """Line locations the evidence states in words: tracebacks, compiler and test output."""
    # A diff's a/x and b/x are one file x.
    text = _GIT_SIDES.sub(_one_side, text.replace("\\", "/"))
    for path, number, _, _ in locations_in(text):
        into.add(path, {number})
    for match in _TRACEBACK.finditer(text):
        into.add(match.group("path"), {int(match.group("n"))})
    into.name_text(text)


def hunks(lines: list[str], into: Locations) -> None:
    """Each line a diff shows, by its number in the old and in the new file."""
    old = new = ""
    for line in lines:
        if line.startswith("--- "):
            old = line[4:].strip().removeprefix("a/")
        elif line.startswith("+++ "):
            new = line[4:].strip().removeprefix("b/")
        else:
            hunk = _HUNK.match(line)
            if hunk is None:
                continue
            for path, start, count in (
                (old, hunk.group(1), hunk.group(2)),
                (new, hunk.group(3), hunk.group(4)),
            ):
                if path and path != "/dev/null":
                    first, many = int(start), int(count if count is not None else 1)
                    into.add(path, range(first, first + many))


def listed(parsed: list[Any], into: Locations) -> None:
    """Numbered lines of a file that a command naming it printed (`cat -n`, `grep -n`)."""
    named: dict[str, list[str]] = {}  # call id -> the files its command names
    last: list[str] = []
    for event in parsed:
        if not isinstance(event, dict):
            continue
        if event.get("type") == "tool_call":
            args = event.get("arguments") or event.get("input") or {}
            command = args.get("command", "") if isinstance(args, dict) else ""
            files = [w.strip("'\"") for w in str(command).split() if is_path(w.strip("'\""))]
            named[str(event.get("call_id", ""))] = last = files
        elif event.get("type") == "tool_result":
            files = named.get(str(event.get("call_id", "")), last)
            output = str(event.get("output", ""))
            numbers = {int(n) for n in _LISTED.findall(output)}
            for name in files:
                into.add(name, numbers)

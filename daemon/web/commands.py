"""A loopd command run inside the console's process, as `loopd ARGS` runs it: the same parser,
the same function, its output captured. The console has no reader of state/ of its own; every
page is a command's `--json`, every action a command with `by` set to who did it."""

from __future__ import annotations

import io
import json
import sys
import threading
from typing import Any, TextIO

from pydantic import BaseModel

from daemon import example
from daemon.cli.common import CommandError
from daemon.cli.invoke import function_of
from daemon.cli.main import build_parser, command_word
from daemon.engine.base import EngineError
from daemon.redact import redact, redact_value


class Outcome(BaseModel):
    """What a command printed (as printed: `json` and `text` redact it) and its exit code."""

    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    def data(self) -> Any:
        """The command's `--json` output, every string in it redacted."""
        return redact_value(json.loads(self.out))

    def text(self) -> str:
        """What the command printed, on both streams, redacted."""
        return redact((self.out + self.err).strip())


class _PerThread(io.TextIOBase):
    """sys.stdout or sys.stderr: a thread running a command writes to its own buffer, every
    other thread to the stream it replaced (requests run on many threads at once)."""

    def __init__(self, real: TextIO) -> None:
        self.real = real
        self.local = threading.local()

    def write(self, text: str) -> int:
        buffer = getattr(self.local, "buffer", None)
        return (buffer or self.real).write(text)

    def flush(self) -> None:
        buffer = getattr(self.local, "buffer", None)
        (buffer or self.real).flush()

    def isatty(self) -> bool:
        return False  # a captured command prints plain text, never for a terminal


_install_lock = threading.Lock()


def _streams() -> tuple[_PerThread, _PerThread]:
    """The per-thread stdout and stderr, put in place once."""
    with _install_lock:
        if not isinstance(sys.stdout, _PerThread):
            sys.stdout = _PerThread(sys.stdout)
        if not isinstance(sys.stderr, _PerThread):
            sys.stderr = _PerThread(sys.stderr)
        return sys.stdout, sys.stderr


def run_command(home: str, argv: list[str], by: str = "") -> Outcome:
    """`loopd --home HOME ARGV` run here; `by` (who did it) is recorded by actions that take it."""
    return run_into(home, argv, io.StringIO(), by)


def run_into(home: str, argv: list[str], printed_to: io.TextIOBase, by: str = "") -> Outcome:
    """`loopd --home HOME ARGV` run here, what it prints written to `printed_to` as it prints it
    (a followed log's lines reach the page as they come); the Outcome's `out` is what it holds."""
    out, err = _streams()
    full = ["--home", home, *argv]
    parser = build_parser(command_word(full))
    try:
        args = parser.parse_args(full)
    except SystemExit:
        return Outcome(code=2, out="", err=f"not a loopd command line: {argv!r}")
    args.by = by
    example.register()  # as cli/invoke.py does: a home's loops may run the embedded example
    out.local.buffer, err.local.buffer = printed_to, io.StringIO()
    try:
        code = int(function_of(args.func)(args) or 0)
    except (CommandError, EngineError) as exc:
        print(f"loopd: {exc}", file=sys.stderr)
        code = getattr(exc, "code", 2)
    finally:
        said = err.local.buffer.getvalue()
        printed = printed_to.getvalue() if isinstance(printed_to, io.StringIO) else ""
        out.local.buffer = err.local.buffer = None
    return Outcome(code=code, out=printed, err=said)

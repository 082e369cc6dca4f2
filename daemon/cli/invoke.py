"""A parsed command line run: its command's module imported, loopd's errors printed as loopd's
(exit 2 unless said otherwise), a process that talked to Temporal ended at once. Imported by
`cli/main.py` only once a command is parsed, so `--help` loads none of this."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from daemon import example
from daemon.cli.common import CommandError
from daemon.engine.base import EngineError


def function_of(func: str | Callable[[argparse.Namespace], Any]) -> Callable[..., Any]:
    """A command's function: "module:function" of daemon/cli/ (cli/parsers.py), imported now."""
    if callable(func):
        return func
    module, name = func.split(":")
    return getattr(importlib.import_module(f"daemon.cli.{module}"), name)


def invoke(args: argparse.Namespace) -> int:
    """Run the command `args` names; its exit code."""
    example.register()  # every command reads homes whose loops may run the embedded example
    try:
        code = int(function_of(args.func)(args) or 0)
    except (CommandError, EngineError) as exc:
        print(f"loopd: {exc}", file=sys.stderr)
        code = getattr(exc, "code", 2)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # The reader went away (`loopd logs RUN | head`): nothing is wrong, nothing to say.
        # stdout is pointed at /dev/null so the interpreter's own flush at exit stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    return _leave(code)


def _leave(code: int) -> int:
    """A process that talked to the Temporal engine ends at once (its SDK can crash an
    ordinary interpreter exit); any other returns `code`."""
    connect = sys.modules.get("daemon.engine.temporal.connect")
    return connect.leave(code) if connect is not None else code

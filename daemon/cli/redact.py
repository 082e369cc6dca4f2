"""`loopd redact FILE|-`: print what loopd would keep of a file, secrets replaced by markers."""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterator
from typing import BinaryIO

from daemon.cli.common import CommandError
from daemon.redact import Redactor

_MARKER = re.compile(r"\[REDACTED:([a-z0-9-]+)\]")


def _lines(stream: BinaryIO) -> Iterator[tuple[str, str]]:
    """Each line's text and its ending, decoded as the transcript decodes agent output."""
    for raw in stream:
        text = raw.decode("utf-8", "replace")
        body = text.rstrip("\r\n")
        yield body, text[len(body) :]


def redact_file(args: argparse.Namespace) -> int:
    """Print FILE (or standard input, `-`) as loopd keeps it: line by line, secrets redacted."""
    try:
        stream = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    except OSError as exc:
        raise CommandError(f"cannot read {args.file}: {exc.strerror}") from None
    redactor = Redactor()
    replaced: Counter[str] = Counter()
    out = sys.stdout
    with stream:
        for body, end in _lines(stream):
            kept = redactor.line(body)
            if kept != body:
                replaced.update(_MARKER.findall(kept))
                replaced.subtract(_MARKER.findall(body))
            out.write(kept + end)
    out.flush()
    if not args.quiet:
        total = sum(n for n in replaced.values() if n > 0)
        kinds = ", ".join(f"{rule} {n}" for rule, n in sorted(replaced.items()) if n > 0)
        print(
            f"loopd redact: {total} secret(s) replaced{f' ({kinds})' if kinds else ''}",
            file=sys.stderr,
        )
    return 0

"""Bench: redaction of a 200 MB agent output, line by line as the transcript redacts it.

    python bench/redaction.py [--mb 200]

Two outputs, each built before the clock starts and taken by one `Redactor` on one core:
- streams: the agents' recorded JSON streams of tests/data/streams/ (claude, codex, gemini,
  opencode, qwen), repeated: what a stream-json agent prints. Target: 20 MB/s or more.
- plain: short plain lines (code, test ids, git, logs with uuids and checksums, JSON usage
  events, prose naming keys and tokens), a secret on about one line in a thousand: a command
  agent's output, dense in the words the keyword search stops at. Printed, not judged.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from daemon.redact import Redactor  # noqa: E402
from daemon.redaction.ruleset import ruleset  # noqa: E402

TARGET = 20.0  # MB/s
RNG = random.Random(7)


def _hex(n: int) -> str:
    return "".join(RNG.choice("0123456789abcdef") for _ in range(n))


def _uuid() -> str:
    h = _hex(32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def _word() -> str:
    return RNG.choice(
        "the parser config value result error test file line module function request user "
        "build cache index branch commit handler session output input loader worker".split()
    )


def _line(kind: int) -> str:
    """One line of an agent's output, of one of twelve kinds."""
    if kind == 0:
        return f"    def {_word()}_{_word()}(self, {_word()}: str) -> dict[str, int]:"
    if kind == 1:
        return f"        {_word()} = self.{_word()}.get({_word()!r}, None)  # {_word()}"
    if kind == 2:
        return f"tests/test_{_word()}.py::test_{_word()}_{_word()}[case-{RNG.randrange(9)}] PASSED"
    if kind == 3:
        return f"commit {_hex(40)}\nAuthor: Dev <dev@example.com>"
    if kind == 4:
        usage = {"input_tokens": RNG.randrange(99999), "output_tokens": RNG.randrange(999)}
        return json.dumps({"type": "assistant", "session_id": _uuid(), "usage": usage})
    if kind == 5:
        text = " ".join(_word() for _ in range(RNG.randrange(8, 30)))
        return json.dumps({"type": "text", "text": text})
    if kind == 6:
        return f"2026-12-02T00:{RNG.randrange(60):02d}:00Z INFO request {_uuid()} ok"
    if kind == 7:
        return f"{_hex(64)}  dist/{_word()}-1.{RNG.randrange(9)}.tar.gz"
    if kind == 8:
        return f'    "integrity": "sha512-{_hex(40)}{_hex(40)}==",'
    if kind == 9:
        return f'  File "/work/src/{_word()}.py", line {RNG.randrange(900)}, in {_word()}'
    if kind == 10:
        return f"{_word().capitalize()} the {_word()} key and the access token cache."
    return " ".join(_word() for _ in range(RNG.randrange(4, 16)))


def sample_lines() -> list[str]:
    """About a megabyte of an agent's output."""
    lines: list[str] = []
    size = 0
    while size < 1 << 20:
        new = _line(RNG.randrange(12)).split("\n")
        if RNG.randrange(1000) == 0:
            new.append(f"export STRIPE_KEY=sk_live_{_hex(24)}{_hex(8).upper()}")
        lines += new
        size += sum(len(line) + 1 for line in new)
    return lines


def stream_lines() -> list[str]:
    """The recorded agent streams, line by line."""
    lines: list[str] = []
    for path in sorted((ROOT / "tests" / "data" / "streams").glob("*.jsonl")):
        lines += path.read_text().splitlines()
    return lines


def measure(name: str, lines: list[str], mb: int) -> float:
    """Redact `mb` megabytes made of `lines` repeated; print and return MB/s."""
    block = sum(len(line) + 1 for line in lines)
    rounds = max(1, (mb << 20) // block)
    passed = sum(1 for line in lines if ruleset().found(line.lower()))
    line_fn = Redactor().line
    changed = 0
    start = time.process_time()  # one core's time: the machine is shared
    for _ in range(rounds):
        for line in lines:
            if line_fn(line) != line:
                changed += 1
    seconds = time.process_time() - start
    total = rounds * block / (1 << 20)
    rate = total / seconds
    print(
        f"{name}: {total:.0f} MB, {rounds * len(lines):,} lines of {block // len(lines)} bytes"
        f" on average, {seconds:.1f}s CPU; lines the keyword search let through:"
        f" {passed / len(lines):.0%}; lines changed: {changed:,}; {rate:.1f} MB/s"
    )
    return rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="megabytes of each output")
    parser.add_argument("--smoke", action="store_true", help="1 MB of each: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.mb = 1
    rate = measure("streams", stream_lines(), args.mb)
    measure("plain", sample_lines(), args.mb)
    word = "ok" if rate >= TARGET else "BELOW TARGET"
    print(f"redaction of agent streams: {rate:.1f} MB/s (target >= {TARGET:.0f} MB/s) {word}")
    figure = f"redaction of agent streams: {rate:.1f} MB/s"
    return verdict(figure, f">= {TARGET:.0f} MB/s", rate >= TARGET, args.smoke)


if __name__ == "__main__":
    sys.exit(main())

"""What the agent handed loopd through its tools, kept with the run.

`state/runs/RUN_ID/decisions.md` (record_decision: a section each, in the format
rules/decisionlog.py reads) and
`state/runs/RUN_ID/evidence.jsonl` (record_evidence: one JSON line each, with what loopd saw
when it ran the command itself). Both are written by loopd's desk only (daemon/runs/desk.py),
redacted, and capped: a run that fills one gets an error from the tool, never a full disk.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from daemon.redact import redact
from daemon.regularfile import STATE_MAX, read_regular
from daemon.state.atomic import open_private

DECISIONS = "decisions.md"
EVIDENCE = "evidence.jsonl"
DECISIONS_MAX = 1_000_000  # bytes of a run's decisions.md
EVIDENCE_MAX = 2_000_000  # bytes of a run's evidence.jsonl
OUTPUT_TAIL = 4000  # characters of a command's output kept in its evidence line


class RecordsFull(Exception):
    """The run's file holds as much as loopd keeps."""


class EvidenceLine(BaseModel):
    """One line of evidence.jsonl: a claim, the command loopd ran for it, and what it saw."""

    model_config = ConfigDict(extra="ignore")

    ts: datetime
    attempt: int
    claim: str
    command: str
    commit: str = ""  # the commit loopd made of the agent's work and ran the command on
    exit_code: int | None  # None: timed out or stopped
    timed_out: bool = False
    seconds: float = 0.0
    output_tail: str = ""
    refuted: bool  # the command did not pass: the claim does not hold


def _append(path: Path, text: str, cap: int) -> None:
    data = text.encode("utf-8")
    try:
        size = os.lstat(path).st_size
    except FileNotFoundError:
        size = 0
    if size + len(data) > cap:
        raise RecordsFull(f"{path.name} holds {size} bytes; loopd keeps at most {cap} a run")
    with open_private(path) as fh:
        fh.write(data)


def append_decision(run_dir: Path, text: str) -> None:
    """Add a decision's section to the run's decisions.md; RecordsFull when it is full."""
    _append(run_dir / DECISIONS, text, DECISIONS_MAX)


def append_evidence(run_dir: Path, line: EvidenceLine) -> None:
    """Add one line to the run's evidence.jsonl (redacted); RecordsFull when it is full."""
    data = line.model_dump(mode="json")
    for key in ("claim", "command", "output_tail"):
        data[key] = redact(data[key])
    _append(run_dir / EVIDENCE, json.dumps(data, ensure_ascii=False) + "\n", EVIDENCE_MAX)


def read_decisions(run_dir: Path) -> str:
    """The run's decisions.md, or ""."""
    try:
        return read_regular(run_dir / DECISIONS, cap=STATE_MAX).decode("utf-8", "replace")
    except OSError:
        return ""


def numbered_evidence(run_dir: Path) -> list[tuple[int, EvidenceLine]]:
    """The run's evidence lines with their line numbers (from 1), oldest first; lines that do
    not parse are left out."""
    try:
        data = read_regular(run_dir / EVIDENCE, cap=STATE_MAX).decode("utf-8", "replace")
    except OSError:
        return []
    out = []
    for number, raw in enumerate(data.split("\n"), start=1):
        try:
            out.append((number, EvidenceLine.model_validate_json(raw)))
        except ValidationError:
            continue
    return out


def read_evidence(run_dir: Path) -> list[EvidenceLine]:
    """The run's evidence lines, oldest first; lines that do not parse are left out."""
    return [line for _, line in numbered_evidence(run_dir)]


def render_records(run_dir: Path, limit: int) -> str:
    """The agent's recorded decisions and evidence as the critic reads them ("" when none),
    at most `limit` characters: the evidence lines first (loopd ran them), then decisions."""
    parts = []
    for item in read_evidence(run_dir):
        verdict = "REFUTED" if item.refuted else "holds"
        status = "timed out" if item.timed_out else f"exit {item.exit_code}"
        tail = item.output_tail[-800:].rstrip()
        parts.append(
            f"- claim (attempt {item.attempt}): {item.claim}\n"
            f"  loopd ran `{item.command}` on {item.commit[:12] or 'the work'}: {status}, "
            f"{verdict}\n" + (f"  output tail:\n{_indent(tail)}\n" if tail else "")
        )
    decisions = read_decisions(run_dir).strip()
    text = ""
    if parts:
        text += "## Claims the agent backed with a command (loopd ran each itself)\n"
        text += "".join(parts)
    if decisions:
        text += "\n## Decisions the agent recorded (decisions.md; its words)\n" + decisions + "\n"
    if len(text) > limit:
        text = text[: max(0, limit - 60)] + "\n[... the agent's records cut here ...]\n"
    return text


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())

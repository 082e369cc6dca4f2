"""The agent's desk records (runs/deskwork.py) of an attempt run on another machine, carried
to the home in the attempt's result.

A worker's desk writes `decisions.md` and `evidence.jsonl` in its own `state/runs/RUN_ID/`
and files the agent's questions in its own `state/escalations/`. What one attempt step added
travels in `AttemptOutput.desk` (at most CARRY_DECISIONS and CARRY_EVIDENCE bytes, whole
sections and lines), and the home appends it to its own files and files the questions there
(notified by the home's `[notify]`). When the worker's state/ is the home's (the home's own
worker), the records are already there: the home lands nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pydantic import ValidationError

from daemon.engine.temporal.models import AskedQuestion, DeskRecords
from daemon.people.escalation_text import quote
from daemon.people.question import QUESTIONS_PER_RUN, TooManyQuestions, file_question
from daemon.redact import redact
from daemon.state.agentrecords import (
    DECISIONS,
    EVIDENCE,
    EvidenceLine,
    RecordsFull,
    append_decision,
    append_evidence,
    read_decisions,
    read_evidence,
)
from daemon.state.eventtypes import Event
from daemon.state.store import StateStore

log = logging.getLogger(__name__)

# Bytes of one step's records in a payload (Temporal refuses payloads past a few MB).
CARRY_DECISIONS = 256_000
CARRY_EVIDENCE = 512_000


def marks(store: StateStore, run_id: str) -> tuple[int, int]:
    """The sizes of the run's decisions.md and evidence.jsonl here before a step."""
    run_dir = store.run_dir(run_id)
    return _size(run_dir / DECISIONS), _size(run_dir / EVIDENCE)


def carried(
    store: StateStore, run_id: str, since: tuple[int, int], asked: list, n: int
) -> DeskRecords:
    """What attempt `n`'s step added since `since` (marks()), and the agent's questions
    (runs/attempt.py's `asked`)."""
    run_dir = store.run_dir(run_id)
    decisions, cut_d = _sections(_tail(run_dir / DECISIONS, since[0]), CARRY_DECISIONS)
    evidence, cut_e = _lines(_tail(run_dir / EVIDENCE, since[1]), CARRY_EVIDENCE)
    questions = [AskedQuestion(question=q, attempt=n, asked=at) for q, at in asked]
    return DeskRecords(
        home_id=store.home_id(),
        decisions=decisions,
        evidence=evidence,
        questions=questions,
        cut=cut_d or cut_e,
    )


def land(services, journal, records: DeskRecords | None) -> None:  # noqa: ANN001
    """Append a worker's records to the home's run folder and file its questions here;
    nothing when the worker's state/ is this home's or a line is already here."""
    store = services.store
    if records is None or not records.home_id or records.home_id == store.home_id():
        return
    run = journal.run
    run_dir = store.run_dir(run.id)
    try:
        if records.decisions and records.decisions not in read_decisions(run_dir):
            append_decision(run_dir, records.decisions)
        have = read_evidence(run_dir)
        for raw in records.evidence:
            line = EvidenceLine.model_validate_json(raw)
            if line not in have:
                append_evidence(run_dir, line)
    except (RecordsFull, ValidationError) as exc:
        log.warning("run %s: the worker's desk records were not all kept: %s", run.id, exc)
    if records.cut:
        log.warning("run %s: the worker kept more desk records than it carried home", run.id)
    for asked in records.questions:
        _file(services, journal, asked)


def _file(services, journal, asked: AskedQuestion) -> None:  # noqa: ANN001
    store, run = services.store, journal.run
    if _filed(store, run.id, asked):  # landed before (a retried activity)
        return
    try:
        path = file_question(store, run, asked.question, asked.attempt, asked.asked)
    except TooManyQuestions as exc:
        log.warning("run %s: the agent's question was not filed: %s", run.id, exc)
        return
    journal.event(Event.PERSON_ASKED, attempt=asked.attempt, file=str(path.relative_to(store.root)))
    if services.notifications is not None:
        services.notifications.question(run, path, asked.question, journal.now())


def _filed(store: StateStore, run_id: str, asked: AskedQuestion) -> bool:
    """Whether this home already holds the question, asked in that attempt."""
    said = redact(quote(asked.question))
    when = f"Asked during attempt {asked.attempt};"
    for n in range(1, QUESTIONS_PER_RUN + 1):
        try:
            text = store.escalation_path(f"{run_id}-q{n}").read_text("utf-8", "replace")
        except OSError:
            return False
        if said in text and when in text:
            return True
    return False


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _tail(path: Path, offset: int) -> bytes:
    """The bytes of `path` past `offset` (the desk caps the file, so this is bounded)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read()
    except OSError:
        return b""


def _sections(data: bytes, cap: int) -> tuple[str, bool]:
    """Whole `## ` sections of decisions.md within `cap` bytes; whether some were left."""
    text = data.decode("utf-8", "replace")
    if len(data) <= cap:
        return text, False
    kept = data[:cap].decode("utf-8", "ignore")
    end = kept.rfind("\n## ")
    return (kept[: end + 1] if end >= 0 else ""), True


def _lines(data: bytes, cap: int) -> tuple[list[str], bool]:
    """Whole lines within `cap` bytes; whether some were left."""
    out: list[str] = []
    size = 0
    for raw in data.decode("utf-8", "replace").splitlines():
        size += len(raw) + 1
        if size > cap:
            return out, True
        if raw.strip():
            out.append(raw)
    return out, False

"""A run's evidence as the learning side reads it: what the agent saw and did, what loopd ran.

A candidate that comes from the run itself (a decision it recorded, a fact or skill the agent
noted through `note_knowledge`) is grounded in the run's evidence, never in its own words:
- each attempt's `transcript.jsonl` without the agent's own words (its `text` and `final`
  events) and without its calls of loopd's tools (`note_knowledge`, `record_decision`, ...),
  so a note cannot ground itself; its tool calls and their results stay;
- each attempt's `checks.log`, `diff.patch` and `prompt.md`;
- the run's `evidence.jsonl` (the commands loopd ran for `record_evidence` and their
  output) without the agent's `claim`;
- the run's `decisions.md` may be cited by an evidence entry, but no claim is looked for in
  it: a decision's reasons must be found in what the run observed.

A skill carries the command it was verified with (`verified_with`): a command of the run's
evidence.jsonl that exited 0 and was not refuted, or a check of a passing attempt, that the
skill's text names (a passing attempt's first check when the text names none).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from daemon.regularfile import STATE_MAX, NotRegular, read_regular
from daemon.rules.claims import claims_of
from daemon.rules.decisionlog import DECISIONS_FILE
from daemon.rules.grounding import EvidenceSet, normalize
from daemon.rules.rulefile import Evidence, VerifiedWith
from daemon.state.agentrecords import EVIDENCE as EVIDENCE_FILE
from daemon.state.agentrecords import numbered_evidence

# loopd's own tools, as agents name them (`note_knowledge`, `mcp__loopd__note_knowledge`, the
# `loopd-tool note-knowledge` command): a call of one is the agent's say, not evidence.
LOOPD_TOOLS = re.compile(
    r"note[_-]knowledge|record[_-]decision|record[_-]evidence|ask[_-]person|rules[_-]for"
)
AGENT_WORDS = frozenset({"text", "final", "usage", "session"})
OUTPUT_TAIL = 400
_CHECK_END = re.compile(r"^\[(?:exit (-?\d+|None)|timed out) after [\d.]+s\]$")


class EvidenceRecord(BaseModel):
    """One line of `evidence.jsonl`: a command loopd ran for the agent's `record_evidence`."""

    model_config = ConfigDict(extra="ignore")

    claim: str = ""
    command: str = ""
    exit_code: int | None = None
    output: str = ""  # its tail
    refuted: bool = False
    line: int = 0  # in evidence.jsonl

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.refuted and bool(self.command.strip())


def evidence_records(run_dir: Path) -> list[EvidenceRecord]:
    """The records of the run's evidence.jsonl; none when it is absent. Bad lines are skipped."""
    return [
        EvidenceRecord(
            claim=e.claim,
            command=e.command,
            exit_code=e.exit_code,
            output=e.output_tail,
            refuted=e.refuted,
            line=number,
        )
        for number, e in numbered_evidence(run_dir)
    ]


@dataclass
class CheckRun:
    """One `done_when` check as checks.log records it."""

    command: str
    exit_code: int | None
    output: str
    line: int  # of its `$ command` line


def checks_in_log(text: str) -> list[CheckRun]:
    """The checks of a checks.log: `$ COMMAND`, its output, `[exit N after Ts]`."""
    out: list[CheckRun] = []
    command: str | None = None
    start, body = 0, list[str]()
    for number, line in enumerate(text.split("\n"), start=1):
        if command is None:
            if line.startswith("$ "):
                command, start, body = line[2:].strip(), number, []
            continue
        end = _CHECK_END.match(line)
        if end is None:
            body.append(line)
            continue
        code = end.group(1)
        exit_code = int(code) if code and code != "None" else None
        out.append(CheckRun(command, exit_code, "\n".join(body), start))
        command = None
    return out


def _observed(name: str, value: Any) -> Any:
    """What of a .jsonl line is evidence of what happened (see the module docstring)."""
    if not isinstance(value, dict):
        return value
    if name.endswith(EVIDENCE_FILE):
        return {k: v for k, v in value.items() if k != "claim"}
    if value.get("type") in AGENT_WORDS:
        return None
    if LOOPD_TOOLS.search(json.dumps(value, ensure_ascii=False)):
        return None
    return value


def attempt_dirs(run_dir: Path) -> list[Path]:
    """The run's attempt folders, in order."""
    found = [p for p in run_dir.glob("attempt-*") if p.is_dir() and p.name[8:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[8:]))


def run_evidence(run_dir: Path) -> EvidenceSet:
    """The run's evidence for a candidate of its own making (see the module docstring).

    Files are named relative to the run's folder (`attempt-2/transcript.jsonl`,
    `evidence.jsonl`), so an entry's path `runs/RUN_ID/attempt-2/transcript.jsonl` finds its
    file.
    """
    names = ("transcript.jsonl", "checks.log", "diff.patch", "prompt.md")
    paths = [d / n for d in attempt_dirs(run_dir) for n in names if (d / n).is_file()]
    if (run_dir / EVIDENCE_FILE).is_file():
        paths.append(run_dir / EVIDENCE_FILE)
    cited = (run_dir / DECISIONS_FILE,) if (run_dir / DECISIONS_FILE).is_file() else ()
    return EvidenceSet.from_paths(run_dir, paths, select=_observed, cited=cited)


def entries_for(why: str, evidence: EvidenceSet, run_prefix: str, limit: int = 3) -> list[Evidence]:
    """Evidence entries for the claims of `why` the evidence holds: where each first appears."""
    out: list[Evidence] = []
    for claim in claims_of(why, "Why"):
        if claim.kind == "line" or not evidence.holds(claim):
            continue
        needle = normalize(claim.text)
        for item in evidence.files.values():
            if not item.searched:
                continue
            rows = item.decoded or item.lines
            line = next((i + 1 for i, row in enumerate(rows) if needle in normalize(row)), None)
            if line is not None:
                out.append(Evidence(path=f"{run_prefix}/{item.name}", line=line, quote=needle))
                break
        if len(out) >= limit:
            break
    return out


def _names(text: str, command: str) -> bool:
    wanted = normalize(command)
    return bool(wanted) and wanted in normalize(text.replace("`", " "))


def _tail(output: str) -> str:
    text = output.rstrip()
    return text[-OUTPUT_TAIL:] if len(text) > OUTPUT_TAIL else text


def skill_proof(
    run_dir: Path, text: str, run_prefix: str, passing_attempt: Path | None = None
) -> VerifiedWith | None:
    """The command a skill was verified with, and its result; None when the run has none.

    `text`: the skill's Rule and How to apply. `passing_attempt`: the folder of an attempt
    whose checks passed (a late pass), whose checks may verify it.
    """
    for record in reversed(evidence_records(run_dir)):
        if record.passed and _names(text, record.command):
            return VerifiedWith(
                command=record.command.strip(),
                exit_code=0,
                output=_tail(record.output),
                where=f"{run_prefix}/{EVIDENCE_FILE}",
            )
    if passing_attempt is None:
        return None
    try:
        log = read_regular(passing_attempt / "checks.log", cap=STATE_MAX).decode("utf-8", "replace")
    except (OSError, NotRegular):
        return None
    checks = [c for c in checks_in_log(log) if c.exit_code == 0]
    if not checks:
        return None
    chosen = next((c for c in checks if _names(text, c.command)), checks[0])
    return VerifiedWith(
        command=chosen.command,
        exit_code=0,
        output=_tail(chosen.output),
        where=f"{run_prefix}/{passing_attempt.name}/checks.log",
    )

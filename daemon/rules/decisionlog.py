"""A run's recorded decisions, `state/runs/RUN_ID/decisions.md`, and the rules they become.

The agent records a decision through loopd's `record_decision(title, why, alternatives)`
tool; loopd appends it to the run's decisions.md as one entry:

    ## TITLE
    Why: WHY
    Alternatives: ALTERNATIVES

`Decision.markdown()` writes an entry, `parse_decisions` reads the file back. Reading is
tolerant: a missing file is no decision, text before the first `## ` heading is ignored,
`Why:` and `Alternatives:` may be bold (`**Why:**`) or list items (`- Why:`) and run on over
further lines, any other `Key: value` line is ignored, and an entry without `Why:` keeps an
empty why. When the run succeeds, each decision may become a `decision` rule of its
repository (`decision_candidate`), which the rule verifier checks like any other.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from daemon.regularfile import STATE_MAX, NotRegular, read_regular
from daemon.rules.claims import claims_of
from daemon.rules.rulefile import Evidence, Rule, Scope
from daemon.state.agentrecords import DECISIONS

DECISIONS_FILE = DECISIONS  # one name for the file the desk writes
MAX_DECISIONS = 200  # entries read from one file; a flood beyond is not read
_FIELD = re.compile(r"^\s*(?:[-*]\s+)?(?:\*\*)?(why|alternatives)\s*:(?:\*\*)?\s*(.*)$", re.I)
_OTHER_KEY = re.compile(r"^\s*(?:[-*]\s+)?(?:\*\*)?[A-Z][\w -]{0,30}:(?:\*\*)?\s")


class Decision(BaseModel):
    """One recorded decision: what was decided, why, and what else was weighed."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=300)
    why: str = Field("", max_length=4000)
    alternatives: str = Field("", max_length=4000)
    line: int = Field(0, ge=0)  # the line of its `## ` heading in decisions.md, when read

    def markdown(self) -> str:
        """The entry as decisions.md holds it (each field on one line)."""

        def flat(text: str) -> str:
            return " ".join(text.split())

        return (
            f"## {flat(self.title)}\nWhy: {flat(self.why)}\n"
            f"Alternatives: {flat(self.alternatives)}\n\n"
        )


def parse_decisions(text: str) -> list[Decision]:
    """The entries of a decisions.md text, in order (see the module docstring)."""
    found: list[Decision] = []
    current: dict[str, str | int] | None = None
    field = ""
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if line.startswith("## "):
            _close(current, found)
            current, field = {"title": line[3:].strip(), "line": number}, ""
            continue
        if current is None or line.startswith("# "):
            continue
        named = _FIELD.match(line)
        if named:
            field = named.group(1).lower()
            current[field] = named.group(2).strip()
        elif _OTHER_KEY.match(line):
            field = ""  # a key this version does not know: its lines are left out
        elif field and line.strip():
            current[field] = f"{current[field]} {line.strip()}".strip()
    _close(current, found)
    return found[:MAX_DECISIONS]


def _close(entry: dict[str, str | int] | None, found: list[Decision]) -> None:
    if entry is None or not str(entry.get("title", "")).strip():
        return
    clipped = {k: (v[:4000] if isinstance(v, str) else v) for k, v in entry.items()}
    clipped["title"] = str(clipped["title"])[:300]
    found.append(Decision.model_validate(clipped))


def read_decisions(run_dir: Path) -> list[Decision]:
    """The decisions recorded in a run; none when its decisions.md is absent or unreadable."""
    try:
        data = read_regular(run_dir / DECISIONS_FILE, cap=STATE_MAX)
    except (OSError, NotRegular):
        return []
    return parse_decisions(data.decode("utf-8", errors="replace"))


def _patterns(title: str) -> list[str]:
    """Trigger patterns for a decision: its title's paths, `code` and identifiers, as literals."""
    out = []
    for claim in claims_of(title, "Rule"):
        if claim.kind in ("path", "code", "identifier") and len(claim.text) >= 3:
            out.append("(?i)" + re.escape(claim.text.strip("`")))
    return list(dict.fromkeys(out))[:4]


def decision_candidate(
    decision: Decision, run_id: str, task: str, repo: str, run_prefix: str
) -> Rule:
    """The `decision` rule a decision of a succeeded run proposes, scoped to its repository.

    `run_prefix`: the run's folder relative to `state/` (`runs/RUN_ID`), where its evidence
    entry points.
    """
    how = "Keep to this decision in this repository unless a person changes it"
    if decision.alternatives.strip():
        how += f"; weighed and not taken: {decision.alternatives.strip().rstrip('.')}"
    return Rule(
        kind="decision",
        severity="remind",
        scope=Scope(repos=[repo] if repo else []),
        trigger_intent=f"Work in this repository touching what was decided: {decision.title}",
        trigger_patterns=_patterns(decision.title),
        source_run=run_id,
        source_task=task,
        evidence=[
            Evidence(
                path=f"{run_prefix}/{DECISIONS_FILE}",
                line=decision.line or None,
                quote=decision.title,
            )
        ],
        rule=decision.title,
        why=decision.why.strip() or "A run that recorded this decision succeeded.",
        how_to_apply=how + ".",
    )

"""Promotion and retirement: each run's outcome updates the counters of the rules that fired.

Every firing counts `fired`. What else it counts follows the critic's attribution (see
docs/rules.md): a rule the critic said was followed counts `helped` in a passing run and
`harmed` in a failing one; a rule it called irrelevant counts `idle`; a rule it said nothing
of (no critic, `critic = "off"`, or neither list) counts `fired` alone.

`trial` -> `active` once a rule was followed in a passing run of a different task (another
loop, or a task text that differs from `source_task` after whitespace normalization), and
replay over the record does not find it too broad (`too_broad`, which then keeps it in
trial with that reason). Idle firings never promote. Any live rule -> `retired` when
`harmed - helped >= 2`, when `expires` has passed, or when none of its evidence resolves any
more (the file under `state/` is gone or no longer holds the quote). A rule without evidence
(a starter rule written by a person) has nothing to resolve. Files move between folders;
nothing is deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from daemon.rules.grounding import quote_in_file
from daemon.rules.library import RuleLibrary, StoredRule
from daemon.rules.rulefile import LIVE, Rule, Status
from daemon.state.events import EventLog
from daemon.state.eventtypes import Event

HARM_BOUND = 2
Attribution = Literal["followed", "irrelevant", "unknown"]


@dataclass
class RuleChange:
    """A rule that moved folders after a run."""

    id: str
    frm: str
    to: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "from": self.frm, "to": self.to, "reason": self.reason}


def normalize_task(text: str) -> str:
    return " ".join(text.split())


def is_different_task(rule: Rule, loop: str, task: str) -> bool:
    """Another loop than the rule's source, or a task text other than `source_task`."""
    if rule.source_loop and loop != rule.source_loop:
        return True
    return normalize_task(task) != normalize_task(rule.source_task)


def evidence_resolves(rule: Rule, state_root: Path) -> bool:
    """Some evidence entry's file still exists under `state_root` and holds its quote."""
    if not rule.evidence:
        return True
    for entry in rule.evidence:
        path = Path(entry.path)
        if not path.is_absolute():
            path = state_root / path
        if quote_in_file(path, entry.quote):
            return True
    return False


def retirement_reason(
    rule: Rule, now: datetime, state_root: Path | None, check_evidence: bool = True
) -> str:
    """Why a live rule must retire, or ''."""
    if rule.harmed - rule.helped >= HARM_BOUND:
        return f"harmed {rule.harmed} runs and helped {rule.helped}"
    if rule.expired(now):
        return f"expired on {rule.expires:%Y-%m-%d}"
    if check_evidence and state_root is not None and not evidence_resolves(rule, state_root):
        return "its evidence no longer resolves under state/"
    return ""


def record_run(
    library: RuleLibrary,
    fired_rule_ids: list[str],
    loop: str,
    task: str,
    succeeded: bool,
    events: EventLog | None,
    now: datetime,
    *,
    state_root: Path | None = None,
    run: str | None = None,
    attribution: Mapping[str, Attribution] | None = None,
    too_broad: Callable[[Rule], str] | None = None,
) -> list[RuleChange]:
    """Count a finished run for each rule that fired in it; promote or retire as due.

    `attribution`: what the critic said of each rule (absent: "unknown"). `too_broad`: the
    reason a rule due for promotion is too broad (replay), or '' to promote it.
    """
    changes: list[RuleChange] = []
    said = attribution or {}
    for rule_id in dict.fromkeys(fired_rule_ids):
        stored = library.find(rule_id)
        if stored is None or stored.status not in LIVE:
            continue  # deleted or moved by hand since the run started
        old = stored.rule
        followed = said.get(rule_id) == "followed"
        counted = Rule.model_validate(
            {
                **old.model_dump(),
                "fired": old.fired + 1,
                "helped": old.helped + (1 if followed and succeeded else 0),
                "harmed": old.harmed + (1 if followed and not succeeded else 0),
                "idle": old.idle + (1 if said.get(rule_id) == "irrelevant" else 0),
            }
        )
        stored = library.save(stored, counted)
        reason = retirement_reason(counted, now, state_root)
        if reason:
            changes.append(_move(library, stored, "retired", reason, events, now, loop, run))
            continue
        due = stored.status == "trial" and followed and succeeded
        if not due or not is_different_task(counted, loop, task):
            continue
        hold = too_broad(counted) if too_broad is not None else ""
        if hold:
            if counted.reason != hold:
                library.save(stored, Rule.model_validate({**counted.model_dump(), "reason": hold}))
            if events is not None:
                events.append(Event.RULE_HELD, now, loop=loop, run=run, rule=rule_id, reason=hold)
            continue
        where = f"loop {loop}" if loop != counted.source_loop else "another task"
        reason = f"followed in a passing run of {where}"
        changes.append(_move(library, stored, "active", reason, events, now, loop, run))
    return changes


def retire_stale(
    library: RuleLibrary,
    events: EventLog | None,
    now: datetime,
    *,
    state_root: Path | None = None,
) -> list[RuleChange]:
    """Retire every live rule that expired or whose evidence no longer resolves.

    Meant for daemon start and a daily tick (it reads evidence files), not for every run.
    """
    changes = []
    for stored in library.rules(LIVE):
        reason = retirement_reason(stored.rule, now, state_root)
        if reason:
            changes.append(_move(library, stored, "retired", reason, events, now, None, None))
    return changes


def _move(
    library: RuleLibrary,
    stored: StoredRule,
    to: Status,
    reason: str,
    events: EventLog | None,
    now: datetime,
    loop: str | None,
    run: str | None,
) -> RuleChange:
    library.move(stored.rule.id, to, events, now, reason=reason, loop=loop, run=run)
    return RuleChange(stored.rule.id, stored.status, to, reason)

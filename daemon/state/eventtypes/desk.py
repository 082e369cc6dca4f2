"""The fields of the events of the agent's tools: each call that reached loopd's desk."""

from __future__ import annotations

from daemon.state.eventtypes.base import EventFields, described, fields_of
from daemon.state.eventtypes.names import Event


@fields_of(Event.DESK_OPENED)
class DeskOpened(EventFields):
    """The attempt's desk is open: the agent's tools reach loopd through it."""

    attempt: int
    tools: list[str] = described("how the agent reaches it: mcp (its CLI's MCP config), cli")


@fields_of(Event.DECISION_RECORDED)
class DecisionRecorded(EventFields):
    """The agent recorded a decision (record_decision) in the run's decisions.md."""

    attempt: int
    title: str


@fields_of(Event.EVIDENCE_RECORDED)
class EvidenceRecorded(EventFields):
    """loopd ran the command of the agent's claim (record_evidence); evidence.jsonl has it."""

    attempt: int
    claim: str
    command: str
    commit: str
    exit_code: int | None
    refuted: bool = described("the command did not pass: the claim does not hold")


@fields_of(Event.KNOWLEDGE_NOTED)
class KnowledgeNoted(EventFields):
    """The agent proposed a lesson (note_knowledge); the rule verifier decided."""

    attempt: int
    kind: str
    decision: str = described(
        "the verifier's: accepted (a trial rule), duplicate, rejected; or deferred (no verifier "
        "reachable), refused (a bad note, or the run's notes used up)"
    )
    rule: str = described("the rule's id, when one was filed or supported", "")


@fields_of(Event.PERSON_ASKED)
class PersonAsked(EventFields):
    """The agent asked a person a question (ask_person): an escalation of cause `question`."""

    attempt: int
    file: str


@fields_of(Event.RULES_ASKED)
class RulesAsked(EventFields):
    """The agent asked for the rules of a task (rules_for); the ids it was given."""

    attempt: int
    rules: list[str]


@fields_of(Event.DESK_REFUSED)
class DeskRefused(EventFields):
    """A call to loopd's desk was refused: wrong token, too many calls, bad arguments, full."""

    tool: str
    why: str
    attempt: int = 0

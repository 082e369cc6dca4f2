"""The fields of the rules' events: proposed, verified, moved, fired, deferred."""

from __future__ import annotations

from pydantic import Field

from daemon.state.eventtypes.base import EventFields, described, fields_of
from daemon.state.eventtypes.names import Event


class RuleMove(EventFields):
    """A rule file moved between rules/trial, rules/active, rules/retired, rules/rejected."""

    rule: str
    kind: str = ""
    from_: str = Field("", alias="from", description="its status before")
    to: str = ""
    reason: str


@fields_of(Event.RULE_PROPOSED)
class RuleProposed(EventFields):
    """A post-mortem proposed a rule; the verifier judges it next."""

    text: str
    kind: str


@fields_of(Event.RULE_ACCEPTED)
class RuleAccepted(EventFields):
    """A proposed rule was verified and filed in trial."""

    rule: str
    kind: str
    to: str
    verified_by: list[str]


@fields_of(Event.RULE_REJECTED)
class RuleRejected(RuleMove):
    """A proposed rule failed verification, or a person rejected a rule."""


@fields_of(Event.RULE_MERGED)
class RuleMerged(EventFields):
    """A proposed rule repeated a known one: the known rule's confidence rose."""

    rule: str
    confidence: float
    evidence_added: int


@fields_of(Event.RULE_PROMOTED)
class RulePromoted(RuleMove):
    """A rule moved up (trial to active), or a person changed an active rule."""

    severity: str = ""
    scope: str = ""


@fields_of(Event.RULE_DEMOTED)
class RuleDemoted(RuleMove):
    """A rule was retired."""


@fields_of(Event.RULE_HELD)
class RuleHeld(EventFields):
    """A trial rule that earned promotion stays in trial (too broad, say)."""

    rule: str
    reason: str


@fields_of(Event.RULE_FIRED)
class RuleFired(EventFields):
    """A rule applies to the run: its prompt holds it, or it refuses or escalates the run."""

    rule: str
    why: str = described(
        "what matched: a pattern, the model, `learned`, or `asked` (the agent's rules_for)"
    )
    detail: str = ""
    severity: str = ""


@fields_of(Event.RULE_JUDGE_FAILED)
class RuleJudgeFailed(EventFields):
    """The model that picks rules by meaning did not answer; patterns alone decided."""

    reason: str
    candidates: int


@fields_of(Event.RULE_PATTERN_SKIPPED)
class RulePatternSkipped(EventFields):
    """A rule's trigger pattern could not be used (RE2 refused it)."""

    rule: str
    pattern: str
    reason: str


@fields_of(Event.RULE_DEFERRED)
class RuleDeferred(EventFields):
    """A post-mortem, or a run's decisions, wait for the verifier's model: retried later."""

    reason: str
    attempt: int | None = None
    file: str = described("the deferred lesson under state/", "")


@fields_of(Event.RULE_DEFERRED_LEARNED)
class RuleDeferredLearned(EventFields):
    """A deferred post-mortem was done at last."""

    attempt: int
    decision: str
    rule: str


@fields_of(Event.RULE_DEFERRED_DROPPED)
class RuleDeferredDropped(EventFields):
    """A deferred post-mortem was given up."""

    file: str
    reason: str


@fields_of(Event.RULE_IMPORTED)
class RuleImported(EventFields):
    """`loopd rules import`: a shared rule filed in rules/trial/, firing nowhere yet."""

    rule: str
    origin: str = described("its id in the home it came from")
    home: str = described("that home's id")
    bundle: str

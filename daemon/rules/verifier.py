"""The rule verifier: grounding, generic advice, duplicates, then the `rule_verification` call.

A candidate that passes lands in `rules/trial/`; one that fails is kept in `rules/rejected/`
with its reason; a near-duplicate of a live rule adds its evidence and confidence to that
rule instead. Events: `rule_proposed` when a candidate arrives, then one of `rule_accepted`,
`rule_rejected` or `rule_merged`.

When the model step cannot run (`ModelUnavailable`), `verify_candidate` raises it and files
nothing: a rule is never filed with a check silently skipped. `--no-model` (use_model=False)
is the explicit way to skip step 4; the rule's `verified_by` then lacks `model:...`.
The model's prompt, and the related rules it sees, are built in daemon/rules/verifyprompt.py.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from daemon.config import VerifierConfig
from daemon.rules.grounding import EvidenceSet, claims_of, ungrounded
from daemon.rules.library import RuleLibrary, StoredRule
from daemon.rules.modelcalls import StructuredModel
from daemon.rules.patterns import pattern_problem
from daemon.rules.rulefile import (
    DEFAULT_LIFETIME,
    LIVE,
    Evidence,
    Rule,
    Status,
    kind_problem,
    parse_rule,
)
from daemon.rules.verifyprompt import ask_verifier, evidence_excerpts, related_rules, similarity
from daemon.state.events import EventLog
from daemon.state.eventtypes import Event

DUPLICATE_AT = 0.5  # word overlap from which a candidate only supports an existing rule
SAME_TEXT_AT = 0.85  # character similarity that also counts as a near-duplicate
CONFIDENCE_STEP = 0.1
CONFIDENCE_CAP = 0.95

GENERIC = re.compile(
    r"\b(?:be (?:more |extra |very )?(?:careful|thorough|precise|diligent|attentive|rigorous)"
    r"|double[- ]?check|make sure (?:to|that|you|it)|pay (?:more |closer )?attention"
    r"|take (?:more )?care|think (?:carefully|harder|step by step|before)"
    r"|(?:check|verify|review) (?:your|the) (?:work|code|changes|output)"
    r"|test (?:your|the) (?:code|changes|work) (?:carefully|thoroughly|properly)"
    r"|always test|follow best practices|write (?:good|clean|better|correct) code"
    r"|avoid (?:mistakes|errors|bugs)|do(?:n't| not) make (?:mistakes|errors)"
    r"|read the (?:task|instructions|code) carefully)\b",
    re.IGNORECASE,
)


@dataclass
class Verification:
    """The verifier's decision on one candidate."""

    decision: Literal["accepted", "rejected", "duplicate"]
    rule: Rule
    reasons: list[str] = field(default_factory=list)
    status: Status | None = None  # where the rule was filed (None in a dry run)
    path: Path | None = None
    duplicate_of: str = ""
    contradicts: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # claims not found in the evidence
    model_called: bool = False

    @property
    def accepted(self) -> bool:
        return self.decision != "rejected"

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "id": self.rule.id,
            "status": self.status,
            "path": str(self.path) if self.path else None,
            "reasons": self.reasons,
            "duplicate_of": self.duplicate_of or None,
            "contradicts": self.contradicts,
            "missing": self.missing,
            "model_called": self.model_called,
            "verified_by": self.rule.verified_by,
        }


def is_duplicate(a: Rule, b: Rule) -> bool:
    """Near-duplicates: most words shared, or nearly the same characters."""
    if similarity(a, b) >= DUPLICATE_AT:
        return True
    na, nb = " ".join(a.rule.lower().split()), " ".join(b.rule.lower().split())
    return difflib.SequenceMatcher(None, na, nb).ratio() >= SAME_TEXT_AT


def generic_advice(rule: Rule) -> str | None:
    """Why the rule is generic advice, or None when it names something specific to act on."""
    anchors = claims_of(rule.rule + "\n" + rule.how_to_apply, "rule")
    if anchors:
        return None
    phrase = GENERIC.search(rule.rule) or GENERIC.search(rule.how_to_apply)
    said = f" ({phrase.group(0)!r})" if phrase else ""
    return (
        f"generic advice{said}: the rule names no file, command, identifier, number or quoted "
        "text to act on; a rule must name the specific thing to do"
    )


def _state_relative(entries: list[Evidence], evidence_dir: Path, state_root: Path | None):
    """Evidence paths relative to `state/` when the folder is inside it, else absolute."""
    base = evidence_dir.resolve()
    prefix = str(base)
    if state_root is not None:
        try:
            prefix = base.relative_to(state_root.resolve()).as_posix()
        except ValueError:
            pass
    out = []
    for entry in entries:
        name = entry.path.replace("\\", "/")
        if name.startswith(prefix + "/"):
            out.append(entry)
            continue
        out.append(entry.model_copy(update={"path": f"{prefix}/{name.rsplit('/', 1)[-1]}"}))
    return out


def _normalized(candidate: Rule, now: datetime) -> Rule:
    """A learned rule starts as `remind` with fresh counters and a lifetime."""
    created = candidate.created or now
    data = candidate.model_dump()
    data.update(
        severity="remind",
        fired=0,
        helped=0,
        harmed=0,
        confidence=0.5,
        created=created,
        expires=candidate.expires or created + DEFAULT_LIFETIME,
        reason="",
        verified_by=[],
    )
    return Rule.model_validate(data)


@dataclass
class _Filing:
    """Where the verifier's decision goes: the rule library and the events, unless a dry run."""

    library: RuleLibrary
    events: EventLog | None
    now: datetime
    write: bool
    loop: str | None
    run: str | None

    def reject(
        self, rule: Rule, reasons: list[str], missing: list[str] | None = None
    ) -> Verification:
        """File `rule` in rules/rejected/ with its reasons."""
        result = Verification("rejected", rule, reasons, missing=missing or [])
        if not self.write:
            return result
        stored = self.library.add(
            Rule.model_validate({**rule.model_dump(), "reason": reasons[0]}), "rejected"
        )
        result.rule, result.status, result.path = stored.rule, stored.status, stored.path
        if self.events is not None:
            self.events.append(
                Event.RULE_REJECTED,
                self.now,
                loop=self.loop,
                run=self.run,
                rule=stored.rule.id,
                kind=stored.rule.kind,
                reason="; ".join(reasons),
            )
        return result

    def merge(self, existing: StoredRule, candidate: Rule) -> Verification:
        """Add the candidate's evidence and confidence to the live rule it duplicates."""
        old = existing.rule
        known = {(e.path, e.line, e.quote) for e in old.evidence}
        added = [e for e in candidate.evidence if (e.path, e.line, e.quote) not in known]
        confidence = min(CONFIDENCE_CAP, old.confidence + CONFIDENCE_STEP)
        scope = old.scope
        if scope.repos and candidate.scope.repos:
            # The same lesson learned in another repository: the rule holds there too.
            repos = list(dict.fromkeys([*scope.repos, *candidate.scope.repos]))
            scope = scope.model_copy(update={"repos": repos})
        merged = Rule.model_validate(
            {
                **old.model_dump(),
                "confidence": confidence,
                "evidence": [*old.evidence, *added],
                "scope": scope.model_dump(),
            }
        )
        result = Verification(
            "duplicate",
            merged,
            [f"near-duplicate of {old.id}: its confidence rises to {confidence:.2f}"],
            duplicate_of=old.id,
        )
        if self.write:
            stored = self.library.save(existing, merged)
            result.status, result.path = stored.status, stored.path
            if self.events is not None:
                self.events.append(
                    Event.RULE_MERGED,
                    self.now,
                    loop=self.loop,
                    run=self.run,
                    rule=old.id,
                    confidence=confidence,
                    evidence_added=len(added),
                )
        return result

    def accept(self, verification: Verification) -> Verification:
        """File the verified rule in rules/trial/."""
        if self.write:
            stored = self.library.add(verification.rule, "trial")
            verification.rule, verification.status, verification.path = (
                stored.rule,
                stored.status,
                stored.path,
            )
            if self.events is not None:
                self.events.append(
                    Event.RULE_ACCEPTED,
                    self.now,
                    loop=self.loop,
                    run=self.run,
                    rule=stored.rule.id,
                    kind=stored.rule.kind,
                    to="trial",
                    verified_by=stored.rule.verified_by,
                )
        verification.reasons.append(
            "grounded, specific, new" + (", model agrees" if verification.model_called else "")
        )
        return verification


def _grounding_gaps(rule: Rule, evidence: EvidenceSet) -> tuple[list[str], list[Evidence]]:
    """What of the rule the evidence does not hold, and the evidence entries that checked out."""
    missing, checked = ungrounded(rule.rule, rule.why, evidence, rule.evidence)
    if not missing and not checked:
        why_claims = [c for c in claims_of(rule.why, "Why") if evidence.holds(c)]
        if not why_claims:
            missing.append(
                "the rule rests on nothing in the evidence: cite a verbatim quote of the "
                "attempt's files in `evidence` or in **Why**"
            )
    return missing, checked


def _ask_model(
    filing: _Filing,
    verification: Verification,
    evidence: EvidenceSet,
    live: list[StoredRule],
    client: StructuredModel,
    cfg: VerifierConfig,
) -> Verification | None:
    """Step 4: the model, with the related rules only; the rejection, or None when it agrees."""
    rule = verification.rule
    excerpts = evidence_excerpts(evidence, rule.evidence, cfg.evidence_tokens * 4)
    reply, contradicts = ask_verifier(client, rule, excerpts, related_rules(rule, live))
    verification.model_called = True
    if contradicts:
        rejected = filing.reject(rule, [f"contradicts {', '.join(contradicts)}: {reply.reason}"])
        rejected.contradicts = contradicts
        rejected.model_called = True
        return rejected
    if not reply.grounded:
        unsupported = "; ".join(reply.unsupported) or reply.reason
        rejected = filing.reject(
            rule, [f"model: not grounded: {unsupported}"], list(reply.unsupported)
        )
        rejected.model_called = True
        return rejected
    verification.rule = Rule.model_validate(
        {**rule.model_dump(), "verified_by": [*rule.verified_by, f"model:{client.model}"]}
    )
    return None


def verify_candidate(
    library: RuleLibrary,
    candidate: Rule,
    evidence_dir: Path,
    client: StructuredModel | None,
    cfg: VerifierConfig,
    events: EventLog | None,
    now: datetime,
    *,
    state_root: Path | None = None,
    use_model: bool = True,
    write: bool = True,
    loop: str | None = None,
    run: str | None = None,
    evidence: EvidenceSet | None = None,
) -> Verification:
    """Run the rule verifier on `candidate` with the files of `evidence_dir` as its evidence.

    `evidence`: when not `evidence_dir`'s attempt files (a run's own: runevidence.py).
    `write=False` is a dry run: nothing is filed and no event is written.
    Raises `daemon.model.client.ModelUnavailable` when step 4 is asked for and cannot run.
    """
    rule = _normalized(candidate, now)
    reasons = _severity_lowered(candidate)
    events = events if write else None
    filing = _Filing(library, events, now, write, loop, run)
    if events is not None:
        events.append(Event.RULE_PROPOSED, now, loop=loop, run=run, text=rule.rule, kind=rule.kind)

    # 0. Patterns RE2 cannot run, and what the rule's kind needs (a skill's command).
    unfit = _unfit(rule)
    if unfit:
        return filing.reject(rule, unfit)

    # 1. Grounding, without a model.
    evidence = evidence or EvidenceSet.from_dir(evidence_dir)
    grounded = _grounded(filing, rule, evidence, evidence_dir, state_root)
    if isinstance(grounded, Verification):
        return grounded
    rule = grounded

    # 2. Generic advice.
    generic = generic_advice(rule)
    if generic:
        return filing.reject(rule, [generic])

    # 3. Duplicates: support the existing rule instead of filing a new one.
    live = library.rules(LIVE)
    duplicates = [s for s in live if is_duplicate(rule, s.rule)]
    if duplicates:
        return filing.merge(max(duplicates, key=lambda s: similarity(rule, s.rule)), rule)
    rule = Rule.model_validate({**rule.model_dump(), "verified_by": ["grounding", "duplicates"]})

    # 4. The model, with the related rules only.
    verification = Verification("accepted", rule, reasons)
    if use_model and client is not None:
        rejected = _ask_model(filing, verification, evidence, live, client, cfg)
        if rejected is not None:
            return rejected
    return filing.accept(verification)


def _unfit(rule: Rule) -> list[str]:
    """Why the rule cannot be filed whatever its evidence: a trigger pattern RE2 cannot run
    (it would fire on nothing it was meant for), a skill without the command that verified it."""
    bad = [(p, why) for p in rule.trigger_patterns if (why := pattern_problem(p))]
    if bad:
        return [f"trigger pattern {p!r}: {why}" for p, why in bad]
    problem = kind_problem(rule)
    return [problem] if problem else []


def _severity_lowered(candidate: Rule) -> list[str]:
    """The reason to give when the candidate asks for more than `remind`: only a person raises
    a rule's severity."""
    reasons: list[str] = []
    if candidate.severity != "remind":
        reasons.append(
            f"severity {candidate.severity!r} lowered to 'remind': only a person raises it "
            "(loopd rules promote ID --severity)"
        )
    return reasons


def _grounded(
    filing: _Filing,
    rule: Rule,
    evidence: EvidenceSet,
    evidence_dir: Path,
    state_root: Path | None,
) -> Rule | Verification:
    """Step 1: the rule with the evidence it is grounded in, or its rejection (no evidence
    files, or what the rule rests on not found in them)."""
    if not evidence.files:
        return filing.reject(rule, [f"no evidence files in {evidence_dir}"])
    missing, checked = _grounding_gaps(rule, evidence)
    if missing:
        found = "; ".join(missing)
        return filing.reject(rule, [f"grounding: not found in the evidence: {found}"], missing)
    return Rule.model_validate(
        {
            **rule.model_dump(),
            "evidence": _state_relative(checked, evidence_dir, state_root),
            "verified_by": ["grounding"],
        }
    )


def candidate_from_file(path: Path) -> Rule:
    """A candidate written as a rule file: status and counters may be absent, id too."""
    return parse_rule(path.read_text(encoding="utf-8"), require_id=False)

"""What the rule verifier's model is asked: the related rules, the prompt, the contradictions.

The verifier (daemon/rules/verifier.py) and import (daemon/rules/sharing.py) both ask the
`rule_verification` question of a candidate: they share its prompt and `contradictions()`,
the public way to ask which live rules a rule contradicts.
"""

from __future__ import annotations

import re

from daemon.model.markers import fresh_markers
from daemon.model.schemas import RuleVerification
from daemon.rules.grounding import EvidenceSet
from daemon.rules.library import StoredRule
from daemon.rules.modelcalls import StructuredModel
from daemon.rules.rulefile import Evidence, Rule

RELATED_AT = 0.12  # relatedness from which a live rule goes to the model with the candidate
MAX_RELATED = 8
_STOPWORDS = set(
    "the a an and or of to in on for from with by at as is are was were be been it its this "
    "that these those not no never always before after when then than into onto over under "
    "use used using do does did done can could should would must may might will shall any "
    "all each every some your you their them they what which who whose how why".split()
)

VERIFY_SYSTEM = """\
You check one candidate rule that a coding agent will be reminded of in later runs.
You get the candidate (Rule, Why, How to apply), excerpts of the evidence it was learned
from (the agent's transcript, the checks' output, the diff), and the existing rules related
to it, each with its id.

grounded: true only when every factual statement in Rule and Why (file names, line
numbers, function names, outputs, what happened) is supported by the evidence excerpts.
unsupported: the statements that are not supported, quoted.
contradicts: the ids of related rules that tell the agent to do the opposite of the
candidate, so that following one breaks the other. Overlap or repetition is not a
contradiction. Use only ids from the list given.
reason: one sentence."""


def words(text: str) -> set[str]:
    """The words a rule is about: `code spans` whole, other words stemmed, stopwords out."""
    spans = {m.group(1).strip().lower() for m in re.finditer(r"`([^`\n]+)`", text)}
    plain = re.sub(r"`[^`\n]+`", " ", text.lower())
    found = set()
    for word in re.findall(r"[a-z0-9_./-]+", plain):
        word = word.strip("./-")
        if len(word) < 3 or word in _STOPWORDS:
            continue
        found.add(word[:-1] if len(word) > 4 and word.endswith("s") else word)
    return found | spans


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def similarity(a: Rule, b: Rule) -> float:
    """How alike two rules' Rule sentences are, 0-1: shared words and `code spans`."""
    return _jaccard(words(a.rule), words(b.rule))


def relatedness(a: Rule, b: Rule) -> float:
    """How much two rules are about the same thing: their Rule sentences or their intents."""
    intents = _jaccard(words(a.trigger_intent), words(b.trigger_intent))
    return max(similarity(a, b), intents / 2)


def related_rules(candidate: Rule, live: list[StoredRule]) -> list[StoredRule]:
    """The live rules the model sees beside `candidate`: the most related, at most MAX_RELATED."""
    scored = [(relatedness(candidate, s.rule), s) for s in live]
    scored = [(score, s) for score, s in scored if score >= RELATED_AT]
    scored.sort(key=lambda pair: -pair[0])
    return [s for _, s in scored[:MAX_RELATED]]


def evidence_excerpts(evidence: EvidenceSet, entries: list[Evidence], budget_chars: int) -> str:
    """The lines around each evidence entry, and the checks' tail, within `budget_chars`."""
    parts = []
    for entry in entries:
        item = evidence.file_for(entry.path)
        if item is None or not entry.line:
            continue
        lo = max(0, entry.line - 4)
        lines = item.lines[lo : entry.line + 3]
        body = "\n".join(f"{lo + i + 1}: {line}" for i, line in enumerate(lines))
        parts.append(f"--- {item.name} around line {entry.line}\n{body}")
    # An attempt's checks.log; of a run's evidence (attempt-N/checks.log), the last attempt's.
    named = [n for n in evidence.files if n == "checks.log" or n.endswith("/checks.log")]
    checks = evidence.files[named[-1]] if named else None
    if checks is not None:
        tail = checks.lines[-40:]
        start = len(checks.lines) - len(tail)
        body = "\n".join(f"{start + i + 1}: {line}" for i, line in enumerate(tail))
        parts.append(f"--- {checks.name} (last {len(tail)} lines)\n{body}")
    text = "\n\n".join(parts)
    return text[:budget_chars]


def quoted_excerpts(rule: Rule) -> str:
    """A rule's own quotes as its excerpts: for a rule whose evidence folder is elsewhere."""
    return "\n".join(f"{e.path} line {e.line}: {e.quote}" for e in rule.evidence)


def verification_prompt(candidate: Rule, excerpts: str, related: list[StoredRule]) -> str:
    """The user message of `rule_verification`: candidate, evidence between fresh markers, rules."""
    rules = "\n".join(
        f"- {s.rule.id} ({s.status}): {s.rule.rule} How to apply: {s.rule.how_to_apply}"
        for s in related
    )
    markers = fresh_markers(excerpts)
    return (
        "# Candidate\n"
        f"**Rule:** {candidate.rule}\n\n**Why:** {candidate.why}\n\n"
        f"**How to apply:** {candidate.how_to_apply}\n\n"
        "# Evidence\n"
        + "\n".join(f"- {e.path} line {e.line}: {e.quote!r}" for e in candidate.evidence)
        + f"\n\n{markers.describe()}\n\n{markers.wrap(excerpts)}\n\n"
        "# Related rules\n" + (rules or "(none)")
    )


def ask_verifier(
    client: StructuredModel, rule: Rule, excerpts: str, related: list[StoredRule]
) -> tuple[RuleVerification, list[str]]:
    """One `rule_verification` call: the reply, and the ids it says `rule` contradicts (only
    ids of `related`: the model may name no other)."""
    reply = client.structured(
        "rule_verification",
        RuleVerification,
        VERIFY_SYSTEM,
        verification_prompt(rule, excerpts, related),
    )
    known = {s.rule.id for s in related}
    return reply, [rid for rid in reply.contradicts if rid in known]


def contradictions(
    rule: Rule, live: list[StoredRule], client: StructuredModel, excerpts: str | None = None
) -> list[str]:
    """The ids of the live rules the model says `rule` contradicts; no call when none is related.

    `excerpts`: the evidence the model reads; None: the rule's own quotes (a rule that
    arrives without its evidence folder, as an imported one does).
    """
    related = related_rules(rule, live)
    if not related:
        return []
    _, against = ask_verifier(
        client, rule, quoted_excerpts(rule) if excerpts is None else excerpts, related
    )
    return against

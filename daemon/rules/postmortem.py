"""The post-mortem: one `postmortem_rule` call turns an attempt's evidence into one candidate.

`learn_from_attempt` is the learn step of a run: post-mortem, then the rule verifier.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.config import VerifierConfig
from daemon.model.client import ModelUnavailable
from daemon.model.markers import fresh_markers
from daemon.model.schemas import PostmortemRule
from daemon.rules.grounding import ATTEMPT_FILES, EvidenceSet
from daemon.rules.library import RuleLibrary
from daemon.rules.modelcalls import StructuredModel
from daemon.rules.rulefile import Evidence, Rule, Scope
from daemon.rules.runevidence import evidence_records, skill_proof
from daemon.rules.verifier import Verification, verify_candidate
from daemon.state.events import EventLog
from daemon.state.eventtypes import Event

FALLBACK_EVIDENCE_CHARS = 48_000

POSTMORTEM_SYSTEM = """\
You study one attempt of a coding agent and write ONE rule of the kind that fits:
- "decision": a person left a note for this run (the "# Note from a person" of the
  agent's prompt) and the attempt went against what the person decided there; the rule
  records that decision, and why quotes the note.
- "knowledge": the agent lacked a fact about this repository (how its tests are run, where
  a module lives, a convention) that the evidence shows; the rule states the fact.
- "failure": the agent made a mistake of its own; the rule says how to avoid it.
- "skill": a procedure that worked, named with the command that showed it worked (in
  backticks): the way a passing attempt after failed ones finally got there, or a command
  loopd ran for the agent that passed (listed below when there are any).

The rule will be checked mechanically against the evidence, so:
- rule: one sentence, an action naming something specific: a command in backticks
  (e.g. `grep -n`), a file, a function. Never generic advice such as "be more careful",
  "double-check your work" or "make sure to test".
- why: one sentence of facts from the evidence. Every number, file name, identifier,
  `code` and "quoted text" you write must appear verbatim in the evidence.
- how_to_apply: one sentence: what to do at the moment the rule applies.
- trigger_intent: one sentence describing the future tasks the rule is for, not this task.
- trigger_patterns: 1-4 regular expressions in RE2 syntax (no lookarounds, no
  backreferences) matching the text of such tasks, e.g. (?i)\\bline\\s+numbers?\\b.
  Prefer patterns with a literal word in them.
- severity: "remind".
- evidence: 1-3 places the rule rests on: path = the evidence file's name
  (transcript.jsonl, checks.log, diff.patch or prompt.md), line = its line number,
  quote = text copied verbatim from that line."""


def attempt_prefix(attempt_dir: Path) -> str:
    """The attempt folder relative to `state/` (`runs/RUN/attempt-N`), else its full path."""
    parts = attempt_dir.resolve().parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "runs":
            return "/".join(parts[i:])
    return str(attempt_dir.resolve())


def evidence_listing(attempt_dir: Path, budget_chars: int = FALLBACK_EVIDENCE_CHARS) -> str:
    """The attempt's evidence files with line numbers, cut to `budget_chars` (tails kept)."""
    evidence = EvidenceSet.from_dir(attempt_dir)
    share = budget_chars // max(1, len(evidence.files))
    parts = []
    for name, item in evidence.files.items():
        numbered = [f"{i + 1}: {line}" for i, line in enumerate(item.lines)]
        text = "\n".join(numbered)
        if len(text) > share:
            text = "[... earlier lines cut ...]\n" + text[-share:]
        parts.append(f"## {name}\n{text}")
    return "\n\n".join(parts)


def _evidence_path(prefix: str, path: str) -> str:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{prefix}/{name}" if name in ATTEMPT_FILES else path


def propose_rule(
    client: StructuredModel,
    attempt_dir: Path,
    evidence_text: str,
    verdict: dict[str, Any],
    task: str,
    loop: str,
    run_id: str,
    kind_hint: str | None = None,
    timeout: float | None = None,
    *,
    note: str = "",
    repo: str = "",
) -> Rule:
    """One candidate rule from a failed attempt (or a `skill` from a passing one).

    `evidence_text` is the critic's evidence bundle; when empty, the attempt folder's files
    are listed with line numbers. `note`: a person's note to the run (a `decision` may come
    of it); `repo`: the repository the rule is scoped to. The candidate has no id yet: the
    verifier files it. Raises ModelUnavailable when the call fails.
    """
    if not evidence_text.strip():
        evidence_text = evidence_listing(attempt_dir)
    markers = fresh_markers(evidence_text)
    passing = passing_commands(attempt_dir.parent)
    user = (
        f"# Task\n{task}\n\n# Loop\n{loop}\n\n"
        f"# The critic's verdict\n{json.dumps(verdict, default=str, indent=1)}\n\n"
        f"# Evidence\n{markers.describe()}\n\n{markers.wrap(evidence_text)}\n\n"
        f"{kind_guidance(kind_hint, note, passing)}"
    )
    reply = client.structured(
        "postmortem_rule", PostmortemRule, POSTMORTEM_SYSTEM, user, timeout=timeout
    )
    # Kept as proposed: the rule verifier rejects a pattern RE2 cannot run, saying why.
    patterns = [p for p in reply.trigger_patterns if isinstance(p, str)]
    prefix = attempt_prefix(attempt_dir)
    proof = None
    if (kind_hint or reply.kind) == "skill":
        passed = attempt_dir if kind_hint == "skill" else None
        text = f"{reply.rule}\n{reply.how_to_apply}"
        proof = skill_proof(attempt_dir.parent, text, prefix.rsplit("/", 1)[0], passed)
    return Rule(
        kind=fitting_kind(reply.kind, kind_hint, note, proof is not None),
        verified_with=proof,
        severity="remind",
        scope=Scope(repos=[repo] if repo else []),
        trigger_intent=reply.trigger_intent.strip(),
        trigger_patterns=patterns,
        source_run=run_id,
        source_task=task,
        evidence=[
            Evidence(path=_evidence_path(prefix, e.path), line=e.line or None, quote=e.quote)
            for e in reply.evidence
        ],
        rule=reply.rule,
        why=reply.why,
        how_to_apply=reply.how_to_apply,
    )


def passing_commands(run_dir: Path) -> list[str]:
    """The commands loopd ran for the agent's `record_evidence` that passed, newest last."""
    return list(dict.fromkeys(r.command.strip() for r in evidence_records(run_dir) if r.passed))


def kind_guidance(kind_hint: str | None, note: str, passing: list[str] | None = None) -> str:
    """The closing lines of the post-mortem's message: which kind fits this attempt."""
    if kind_hint:
        return f'Write a rule of kind "{kind_hint}".'
    lines = []
    if passing:
        listed = "\n".join(f"- `{c}`" for c in passing[-10:])
        lines.append(
            'Commands loopd ran for the agent that passed; a "skill" must name one of them:'
            f"\n{listed}"
        )
    skill = ', or "skill"' if passing else ""
    if note.strip():
        lines.append(
            "A person left this note for the run; if the attempt went against it, write kind "
            f'"decision", else "knowledge" or "failure"{skill}:\n<note>\n'
            + note.strip()
            + "\n</note>"
        )
    else:
        lines.append(
            f'No person left a note for this run: write kind "knowledge" or "failure"{skill}.'
        )
    return "\n\n".join(lines)


def fitting_kind(said: str, kind_hint: str | None, note: str, proven: bool = False) -> str:
    """The model's kind, unless the attempt rules it out: a decision needs a person's note,
    a skill the command that verified it (`proven`: a passing check or evidence command)."""
    if kind_hint:
        return kind_hint
    if (said == "skill" and not proven) or (said == "decision" and not note.strip()):
        return "failure"
    return said


def learn_from_attempt(
    library: RuleLibrary,
    client: StructuredModel,
    cfg: VerifierConfig,
    state_root: Path,
    attempt_dir: Path,
    verdict: dict[str, Any],
    task: str,
    loop: str,
    run_id: str,
    events: EventLog,
    now: datetime,
    evidence_text: str = "",
    kind_hint: str | None = None,
    *,
    defer: bool = False,
    note: str = "",
    repo: str = "",
) -> Verification | None:
    """Post-mortem then verifier.

    When the model is down: with `defer`, ModelUnavailable is raised for the caller to keep
    the lesson; without, a `rule_deferred` event is recorded and None returned.
    """
    try:
        candidate = propose_rule(
            client,
            attempt_dir,
            evidence_text,
            verdict,
            task,
            loop,
            run_id,
            kind_hint,
            note=note,
            repo=repo,
        )
        return verify_candidate(
            library,
            candidate,
            attempt_dir,
            client,
            cfg,
            events,
            now,
            state_root=state_root,
            loop=loop,
            run=run_id,
        )
    except ModelUnavailable as exc:
        if defer:
            raise
        events.append(Event.RULE_DEFERRED, now, loop=loop, run=run_id, reason=str(exc))
        return None

"""Learning across machines: the post-mortem on the worker, the rule filed at the home.

The worker that ran an attempt holds its evidence (transcript, diff, checks' output). It
runs the post-mortem and the grounding there, and sends back the candidate with its evidence
excerpts: the lines of each evidence file that its claims and quotes rest on, at their line
numbers. The home writes those lines into its own attempt folder (other lines left blank, so
line numbers hold) and runs the whole rule verifier on them: grounding again, generic advice,
duplicates against its rules, the model. Only the home writes rules/.
"""

from __future__ import annotations

import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.engine.temporal.models import LessonOutput, SparseFile
from daemon.model.client import ModelUnavailable
from daemon.rules.grounding import EvidenceSet, claims_of
from daemon.rules.library import RuleLibrary
from daemon.rules.postmortem import propose_rule
from daemon.rules.rulefile import Rule
from daemon.rules.verifier import verify_candidate
from daemon.state.atomic import write_atomic
from daemon.state.eventtypes import Event

CONTEXT = 3  # lines kept on each side of a quoted line (the verifier shows them to the model)
CHECKS_TAIL = 40  # the verifier shows the checks' last lines
BUDGET = 1_000_000  # characters of excerpts a lesson carries at most
WINDOW = 3  # lines searched together for a claim that spans a line break


def _holds(text: str, claim: Any, root: Path) -> bool:
    """The grounding's own test of one claim, on `text` alone."""
    return EvidenceSet(root, {}, text).holds(claim)


def excerpts(folder: Path, rule: Rule, budget: int = BUDGET) -> list[SparseFile]:
    """The lines of the attempt's evidence files that `rule`'s claims and quotes rest on."""
    evidence = EvidenceSet.from_dir(folder)
    claims = claims_of(rule.rule, "Rule", facts_only=True) + claims_of(rule.why, "Why")
    wanted: dict[str, set[int]] = {name: set() for name in evidence.files}
    for entry in rule.evidence:
        item = evidence.file_for(entry.path)
        if item is None:
            continue
        line = item.find(entry.quote) if entry.quote.strip() else entry.line
        if line:
            lo, hi = max(1, line - CONTEXT), min(len(item.lines), line + CONTEXT)
            wanted[item.name].update(range(lo, hi + 1))
    for claim in claims:
        for name, item in evidence.files.items():
            found = _first_lines(item, claim, folder)
            if found:
                wanted[name].update(found)
                break
        else:
            # A size, count or line a tool printed: its command's line and its output's.
            measured = evidence.measured(claim)
            if measured is not None and measured[0] in wanted:
                wanted[measured[0]].update(measured[1])
    checks = evidence.files.get("checks.log")
    if checks is not None:
        total = len(checks.lines)
        wanted["checks.log"].update(range(max(1, total - CHECKS_TAIL + 1), total + 1))
    out: list[SparseFile] = []
    spent = 0
    for name, numbers in wanted.items():
        item = evidence.files[name]
        kept: dict[int, str] = {}
        for number in sorted(numbers):
            text = item.lines[number - 1]
            if spent + len(text) > budget:
                break
            kept[number] = text
            spent += len(text)
        if kept:
            out.append(SparseFile(name=name, total=len(item.lines), lines=kept))
    return out


def _first_lines(item: Any, claim: Any, root: Path) -> list[int]:
    """The first line (or window of lines) of `item` that holds `claim`."""
    decoded = item.decoded
    for i, line in enumerate(item.lines):
        text = line + ("\n" + decoded[i] if i < len(decoded) else "")
        if _holds(text, claim, root):
            return [i + 1]
    for i in range(len(item.lines)):
        chunk = item.lines[i : i + WINDOW]
        text = "\n".join(chunk + decoded[i : i + WINDOW])
        if _holds(text, claim, root):
            return list(range(i + 1, i + 1 + len(chunk)))
    return []


def worker_lesson(
    client: Any,
    cfg: Any,
    folder: Path,
    state_root: Path,
    evidence_text: str,
    verdict: dict[str, Any],
    task: str,
    loop: str,
    run_id: str,
    kind_hint: str,
    now: datetime,
) -> LessonOutput:
    """Post-mortem and grounding of one attempt, on the machine that ran it."""
    try:
        candidate = propose_rule(
            client, folder, evidence_text, verdict, task, loop, run_id, kind_hint or None
        )
    except ModelUnavailable as exc:
        return LessonOutput(decision="unavailable", error=str(exc)[:300])
    with tempfile.TemporaryDirectory(prefix="loopd-lesson-") as empty:
        # A dry run against no rules: grounding and generic advice only. Duplicates and the
        # model's check are the home's, which holds the rules.
        checked = verify_candidate(
            RuleLibrary(Path(empty)),
            candidate,
            folder,
            None,
            cfg,
            None,
            now,
            state_root=state_root,
            use_model=False,
            write=False,
        )
    rule = checked.rule
    return LessonOutput(
        decision="rejected" if checked.decision == "rejected" else "accepted",
        rule=rule.model_dump(mode="json"),
        reasons=list(checked.reasons),
        missing=list(checked.missing),
        excerpts=excerpts(folder, rule) if checked.decision != "rejected" else [],
    )


def write_excerpts(folder: Path, files: list[SparseFile]) -> None:
    """The worker's evidence lines in the home's attempt folder; whole files are kept."""
    for item in files:
        path = folder / Path(item.name).name
        if path.exists() and path.stat().st_size > 0:
            continue  # the home ran the attempt itself, or has the whole file
        write_atomic(path, item.text())


def lesson_rule(lesson: LessonOutput, repo: str) -> Rule:
    """The worker's candidate, scoped by the home to the run's repository (the person's, as
    the home's record names it) as a locally learned rule is; the worker's scope is not
    taken."""
    rule = Rule.model_validate(lesson.rule)
    scope = rule.scope.model_copy(update={"repos": [repo] if repo else []})
    return rule.model_copy(update={"scope": scope})


def file_rejected(
    library: Any,
    events: Any,
    lesson: LessonOutput,
    now: datetime,
    loop: str,
    run: str,
    repo: str = "",
) -> None:
    """A candidate the worker's grounding rejected: kept in rules/rejected/ with its reason."""
    rule = lesson_rule(lesson, repo)
    reason = lesson.reasons[0] if lesson.reasons else "rejected by grounding on the worker"
    events.append(Event.RULE_PROPOSED, now, loop=loop, run=run, text=rule.rule, kind=rule.kind)
    stored = library.add(Rule.model_validate({**rule.model_dump(), "reason": reason}), "rejected")
    events.append(
        Event.RULE_REJECTED,
        now,
        loop=loop,
        run=run,
        rule=stored.rule.id,
        reason="; ".join(lesson.reasons),
    )

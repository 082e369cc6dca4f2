"""What each of the agent's tools does at loopd's desk (runs/desk.py), for one attempt.

- record_decision: a section of `state/runs/RUN_ID/decisions.md`;
- record_evidence: the agent's work committed to the run's branch as it stands, the command
  run by loopd in the run's clean check tree, in the sandbox, with the checks' timeout (the
  machinery of `done_when`), and one line of `state/runs/RUN_ID/evidence.jsonl`;
- note_knowledge: a candidate rule, through the rule verifier like a post-mortem's (filed in
  rules/trial/ at best, never active);
- ask_person: an escalation of cause `question` that does not end the run;
- rules_for: the rules the trigger evaluator selects for a task, with their ids.

The critic reads the decisions and the evidence lines (model/evidence.py); `loopd show` lists
them.
"""

from __future__ import annotations

from typing import Any

from daemon.excerpt import excerpt
from daemon.git.integrity import commit_work
from daemon.git.messages import commit_message
from daemon.model.client import ModelUnavailable
from daemon.people.question import TooManyQuestions, file_question
from daemon.redact import redact
from daemon.rules.decisionlog import Decision
from daemon.rules.evaluator import select_rules
from daemon.rules.kinds import NoVerifier, submit_candidate
from daemon.runparts.checktree import CheckTree
from daemon.runs.desk import DeskError
from daemon.runs.learning import rule_library
from daemon.state.agentrecords import (
    OUTPUT_TAIL,
    EvidenceLine,
    RecordsFull,
    append_decision,
    append_evidence,
)
from daemon.state.eventtypes import Event

_EVENT_TEXT = 300  # characters of a claim or title in its event


class DeskWork:
    """The tools' work for attempt `attempt.n` (runs/attempt.py's Attempt)."""

    def __init__(self, attempt: Any) -> None:
        self.attempt = attempt
        self.journal = attempt.journal
        self.services = attempt.services
        self.n = attempt.n

    def __call__(self, tool: str, args: Any) -> str:
        answer: str = getattr(self, tool)(args)
        return answer

    def refused(self, tool: str, why: str) -> None:
        """The event of a refused call."""
        self.journal.event(Event.DESK_REFUSED, tool=tool, why=why, attempt=self.n)

    @property
    def run_dir(self) -> Any:
        return self.services.store.run_dir(self.journal.run.id)

    def record_decision(self, args: Any) -> str:
        entry = Decision(
            title=args.title, why=args.why, alternatives="; ".join(args.alternatives)[:4000]
        )
        # decisions.md as the learning side reads it (rules/decisionlog.py); the attempt on a
        # line of its own, which that reader leaves out.
        head, rest = entry.markdown().split("\n", 1)
        text = redact(f"{head}\nAttempt: {self.n}, {self.journal.now().isoformat()}\n{rest}")
        try:
            append_decision(self.run_dir, text)
        except RecordsFull as exc:
            raise DeskError(str(exc)) from None
        self.journal.event(Event.DECISION_RECORDED, attempt=self.n, title=args.title[:_EVENT_TEXT])
        return "Recorded in the run's decisions; the critic reads them."

    def record_evidence(self, args: Any) -> str:
        with self.attempt.work_lock:
            return self._record_evidence(args)

    def _record_evidence(self, args: Any) -> str:
        journal, attempt = self.journal, self.attempt
        run = journal.run
        record = next((a for a in run.attempts if a.n == self.n), None)
        head = commit_work(
            journal,
            attempt.tree,
            commit_message(run, self.n, "work so far, for the agent's evidence"),
            record,
            guard_refs=False,
        )
        checks = CheckTree(journal, attempt.tree, attempt.cfg).run(
            head, [args.command], None, attempt.stop
        )
        result = checks.results[-1]
        line = EvidenceLine(
            ts=journal.now(),
            attempt=self.n,
            claim=args.claim,
            command=args.command,
            commit=head,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            seconds=round(result.seconds, 3),
            output_tail=excerpt(result.output, OUTPUT_TAIL),
            refuted=not result.passed,
        )
        try:
            append_evidence(self.run_dir, line)
        except RecordsFull as exc:
            raise DeskError(str(exc)) from None
        journal.event(
            Event.EVIDENCE_RECORDED,
            attempt=self.n,
            claim=args.claim[:_EVENT_TEXT],
            command=args.command[:_EVENT_TEXT],
            commit=head,
            exit_code=result.exit_code,
            refuted=line.refuted,
        )
        status = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        verdict = "the claim is REFUTED" if line.refuted else "the claim holds"
        return (
            f"loopd committed your work as {head[:12]} and ran the command in a clean tree of "
            f"it: {status}, {verdict}. Recorded in the run's evidence, which the critic reads."
            f"\nOutput (tail):\n{excerpt(result.output, 1500)}"
        )

    def note_knowledge(self, args: Any) -> str:
        run, services = self.journal.run, self.services
        kind, paths = args.kind, list(args.paths)
        if not services.notes_taken:
            self._noted(kind, "refused")
            raise DeskError(
                "not taken: this attempt runs on a worker machine whose rules/ is not the "
                "home's, so a note would never reach the home's rule library. Record it with "
                "record_decision (decisions do reach the home) or say it in your summary."
            )
        try:
            result = submit_candidate(
                services.home,
                run.id,
                kind,
                args.text,
                args.why,
                paths,
                self.journal.now(),
                client=services.model_client(),
            )
        except (NoVerifier, ModelUnavailable) as exc:
            self._noted(kind, "deferred")
            raise DeskError(f"not taken now: {exc}") from None
        except ValueError as exc:  # a bad note, or the run's notes used up
            self._noted(kind, "refused")
            raise DeskError(" ".join(str(exc).split())[:1000]) from None
        rule_id = result.duplicate_of or result.rule.id
        self._noted(kind, result.decision, rule_id)
        if not result.accepted:
            return "The rule verifier rejected it: " + "; ".join(result.reasons)[:2000]
        if result.duplicate_of:
            return f"It supports the existing rule {rule_id}."
        return f"Filed as {rule_id} on trial; later runs' outcomes decide whether it stays."

    def _noted(self, kind: str, decision: str, rule: str = "") -> None:
        self.journal.event(
            Event.KNOWLEDGE_NOTED, attempt=self.n, kind=kind, decision=decision, rule=rule
        )

    def ask_person(self, args: Any) -> str:
        try:
            path = file_question(
                self.services.store, self.journal.run, args.question, self.n, self.journal.now()
            )
        except TooManyQuestions as exc:
            raise DeskError(str(exc)) from None
        self.attempt.asked.append((args.question, self.journal.now()))
        rel = str(path.relative_to(self.services.store.root))
        self.journal.event(Event.PERSON_ASKED, attempt=self.n, file=rel)
        notifications = self.services.notifications
        if notifications is not None:  # as an escalation is: a person must answer it
            notifications.question(self.journal.run, path, args.question, self.journal.now())
        return (
            f"Filed for a person as {path.stem}. The run goes on: carry on with what you can "
            "do without the answer and say in your summary what waits for it."
        )

    def rules_for(self, args: Any) -> str:
        run, services = self.journal.run, self.services
        selection = select_rules(
            rule_library(services),
            args.task,
            run.loop,
            list(args.paths),
            services.model_client(),
            services.config.verifier,
            None,  # no `rule_fired` events here: _given records the ones new to the run
            self.journal.now(),
            run=run.id,
            repo=run.repo or None,
        )
        ids = selection.ids
        self.journal.event(Event.RULES_ASKED, attempt=self.n, rules=ids)
        self._given(selection)
        if not ids:
            return "No rules from earlier runs apply to that."
        lines = [
            f"- {r.id} ({r.kind}): {r.rule}\n  How to apply: {r.how_to_apply}"
            for r in selection.rules
        ]
        return "Rules from earlier runs (name their ids when you follow one):\n" + "\n".join(lines)

    def _given(self, selection: Any) -> None:
        """The rules the agent was given count as fired in the run, like the ones its prompt
        held: the critic says which were followed and the run's outcome counts for or
        against them (runs/finish.py). A rule the run already fired counts once."""
        run = self.journal.run
        new = [f for f in selection.fired if f.rule.id not in run.rules_fired]
        if not new:
            return
        run.rules_fired.extend(f.rule.id for f in new)
        self.journal.save()
        for fired in new:
            self.journal.event(
                Event.RULE_FIRED, rule=fired.rule.id, why="asked", detail=fired.detail
            )

"""The agent's sessions within one attempt, and how each ends: finished, stalled and nudged,
timed out or stopped, parked on a usage limit, out of tokens, over a run limit, or not started.
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any, Protocol

from daemon.agents.base import Resume
from daemon.agents.endings import (
    DETAIL_CHARS,
    Ending,
    SessionEnd,
    classify_ending,
    gave_up_how,
)
from daemon.agents.logins import failed_at_start, login_of
from daemon.agents.quota import quota_of
from daemon.agents.supervisor import Supervisor
from daemon.clock import local_zone
from daemon.config import Loop, LoopConfig
from daemon.git.integrity import commit_work
from daemon.git.messages import commit_message
from daemon.git.tree import RunTree
from daemon.processes import process_mark
from daemon.redact import redact
from daemon.runparts.checktree import CheckTree
from daemon.runparts.confinement import Confinement
from daemon.runparts.journal import RunJournal
from daemon.runparts.services import RunServices
from daemon.runparts.stop import StopToken, wait_until
from daemon.runs.attemptresult import AttemptResult, CheckedCommit, tree_size
from daemon.runs.parking import Asked, Parking
from daemon.runs.prompt import PromptParts, build_prompt, fenced
from daemon.runs.sameoutput import same_as_base
from daemon.scheduling.cron import parse_timezone
from daemon.scheduling.timer import FIRE_LEAD
from daemon.state.atomic import ensure_dir, write_atomic
from daemon.state.eventtypes import Event
from daemon.state.records import StallRecord

NUDGE_CHECKS = 16_000  # characters of the checks' output a nudge carries at most
NUDGE_FLOOR = 2_000  # and at least, whatever prompt_cap leaves (the prompt is cut then)
NUDGE_OVERHEAD = 400  # the nudge's heading, "The checks still fail:", the fence


class SessionsOf(Protocol):
    """What the sessions need of their attempt (runs/attempt.py's Attempt)."""

    services: RunServices
    loop: Loop
    cfg: LoopConfig
    journal: RunJournal
    stop: StopToken
    tree: RunTree
    confinement: Confinement
    n: int
    parked: bool
    engine_waits: bool
    work_lock: Any
    resume_session: str


class Sessions:
    """Sessions of the agent until one ends without a stall or nothing is left to try."""

    def __init__(
        self,
        attempt: SessionsOf,
        adapter: Any,
        parts: PromptParts,
        prompt: str,
        transcript: Any,
        result: AttemptResult,
    ) -> None:
        self.attempt = attempt
        self.adapter = adapter
        self.parts = parts
        self.prompt = prompt
        self.transcript = transcript
        self.result = result
        self.journal, self.run_record, self.cfg = attempt.journal, attempt.journal.run, attempt.cfg
        self.record = result.record
        self.parking = Parking(
            attempt.services, attempt.loop, self.journal, attempt.stop, transcript, attempt.n
        )
        self.parking.holds_here = not attempt.engine_waits
        self.parked = self.parking.parked if attempt.parked else None
        # attempt_timeout counts the agent's time only: a park does not use it up.
        used = self.parked.used_seconds if self.parked else 0
        self.deadline = time.monotonic() + (self.cfg.attempt_timeout.total_seconds() - used)
        self.session_id = self.parked.session_id if self.parked else ""
        self.session_tokens = 0
        self.current: Supervisor | None = None  # the running supervisor, for the token budget
        self.declared = self._declared()
        self.asked = Asked(prompt, whole_prompt=True)
        # A scheduled fire handed out ahead: the first session's agent waits for its second.
        trigger = self.run_record.trigger
        first = attempt.n == 1 and self.parked is None
        self.not_before = trigger.not_before if first else None

    def run(self) -> None:
        """Run sessions until the attempt's sessions are over."""
        invocation: Any = self._first_invocation()
        while invocation is not None:
            invocation = self._session(invocation)

    def _declared(self) -> list[str]:
        """The words of a command profile the agent is given, for the confinement to expose."""
        adapter, profile = self.adapter, self.adapter.profile
        if adapter.name != "command":
            return []
        words = [*profile.command[1:], *profile.args, *profile.env.values()]
        return [word for word in words if "{prompt}" not in word]

    def _first_invocation(self) -> Any:
        """The first session's invocation: the prompt, or a resume after a park."""
        if self.parked is None:
            resume = self.attempt.resume_session
            if resume and self._resumes(resume):
                self.session_id = resume  # the agent's own session, told of the conflict
                self.asked = Asked(self.prompt, whole_prompt=False)
                return self.adapter.invocation(self.prompt, Resume(resume, self.prompt))
            return self.adapter.invocation(self.prompt)
        self.parking.wait()
        self.asked = self.parking.asked()
        return self.parking.resume_invocation(self.adapter)

    def _session(self, invocation: Any) -> Any:
        """One session, and how it ended: the next session's invocation, or None."""
        session = self._supervise(invocation)
        if session is None or self._over_tree_limit(session):
            return None
        self._record(session)
        if session.error:
            return self._not_started(session)
        if self.cfg.max_tokens and self.run_record.tokens > self.cfg.max_tokens:
            return self._over_budget()
        if session.stopped or session.timed_out:
            return None  # stopped (cancel, max_tokens mid-session) or out of time
        refused = login_of(self.adapter, session)
        # A refusal the stream marks by its structure wins over quota words in its message.
        hit = None if refused and session.login_hint else self._quota(self.adapter, session)
        if hit is not None:
            return self._usage_limit(hit)
        self.parking.passed()
        if refused is not None:
            return self._login_refused(refused.message)
        early = failed_at_start(self.adapter, session)
        if early:
            return self._not_started_stream(early)
        return self._ended(session)

    def _before_start(self) -> None:
        """A gated agent's sandbox is set up and waits: the record saved when the attempt
        started (on its own thread) is durable before the agent runs, and a scheduled
        run's agent starts at its second."""
        self.journal.settle()
        self._wait_for_fire()

    def _wait_for_fire(self) -> None:
        """Hold the agent until its fire's scheduled second (once; a stop ends the wait)."""
        moment, self.not_before = self.not_before, None
        if moment is None:
            return
        clock = self.attempt.services.clock
        longest = FIRE_LEAD.total_seconds() + 1  # an inbox file's moment holds no run longer
        waited = wait_until(moment, clock, self.attempt.stop.wait, longest)
        self.deadline += waited  # attempt_timeout counts the agent's time
        # Stopped meanwhile: the agent never starts (a gated sandbox is killed unreleased).
        self.attempt.stop.raise_if_stopped()

    def _on_start(self, pid: int) -> None:
        self.run_record.agent_pids = [pid]
        self.run_record.pid_marks = {str(pid): process_mark(pid)}
        self.journal.save()

    def _on_event(self, event: Any) -> None:
        self.journal.beat()
        # Only for the live budget; the run's count comes from each session's result.
        if event.type == "usage":
            self.session_tokens += event.input_tokens + event.output_tokens
            cap = self.cfg.max_tokens
            over = cap and self.run_record.tokens + self.session_tokens > cap
            if over and self.current is not None:
                self.current.stop(0, "max_tokens")

    def _launch(self, argv: list[str], env: dict[str, str]) -> Any:
        tools = self.adapter.desk is not None
        confinement = self.attempt.confinement
        # Gated exactly when the attempt's record was saved behind (attempt.py): the
        # supervisor settles it, then releases the agent (`_before_start`).
        return confinement.launch_agent(
            argv, env, declared=self.declared, tools=tools, gated=confinement.gated
        )

    def _supervise(self, invocation: Any) -> Any:
        """Run the agent for one session; None when the run was stopped before it started."""
        adapter, attempt = self.adapter, self.attempt
        home = invocation.home or adapter.private_home
        ensure_dir(home)
        env = attempt.confinement.agent_env(
            adapter.profile.env,
            invocation.env,
            home,
            withhold=[attempt.services.config.verifier.api_key_env],
        )
        desk = adapter.desk
        if desk is not None and desk.cli_dir is not None:  # `loopd-tool` first on its PATH
            env["PATH"] = f"{desk.cli_dir}{os.pathsep}{env.get('PATH', '')}"
        supervisor = Supervisor(
            adapter,
            self.transcript,
            attempt.tree.path,
            env,
            on_start=self._on_start,
            before_start=self._before_start,
            on_event=self._on_event,
            launcher=self._launch,
            over_limit=self._scratch_over_limit,
        )
        self.current = supervisor
        if not attempt.confinement.gated:
            self._wait_for_fire()  # no sandbox to set up meanwhile: wait before the spawn
        if attempt.stop.stopped:
            return None
        with attempt.stop.on_stop(supervisor.stop):
            remaining = max(1.0, self.deadline - time.monotonic())
            session = supervisor.run(
                invocation, timeout=remaining, stall_after=self.cfg.stall_after.total_seconds()
            )
        self.current = None
        self.result.agent_ended = bool(session.pid) and not session.killed
        self.run_record.agent_pids = []
        self.record.exit_code = session.exit_code
        self.record.timed_out = self.record.timed_out or session.timed_out
        return session

    def _over_tree_limit(self, session: Any) -> bool:
        """Record a run limit the agent ran into; True when the tree itself is over its bound."""
        limit_hit = session.limit_hit or self._tree_over_limit()
        if not limit_hit:
            return False
        self.record.limit_hit = limit_hit
        self.journal.event(Event.RESOURCE_LIMIT, attempt=self.record.n, limit=limit_hit)
        # No nudge: the tree or the scratch folder itself is over the run's bound.
        return limit_hit in ("tree", "tmp")

    def _record(self, session: Any) -> None:
        """Keep the session's id, final text and tokens."""
        if session.session_id:
            self.session_id = self.record.session_id = session.session_id
        if session.final_text:
            self.record.summary = redact(session.final_text)[-20000:]
        self.session_tokens = 0
        self._account(self.adapter, session)
        self.journal.save()

    def _not_started(self, session: Any) -> None:
        self.result.start_error = session.error

    def _login_refused(self, message: str) -> None:
        """Never nudged: a nudge would send the same credentials again."""
        self.result.login_refused = redact(message)

    def _not_started_stream(self, why: str) -> None:
        """The program failed before its stream began: no session to resume or nudge."""
        self.result.start_error = redact(why)

    def _over_budget(self) -> None:
        self.result.over_budget = True

    def _usage_limit(self, hit: Any) -> Any:
        """Park on the usage limit: end the attempt, leave the wait to the engine, or wait here
        and resume."""
        used = self.cfg.attempt_timeout.total_seconds() - (self.deadline - time.monotonic())
        result = self.result
        result.quota_exceeded = self.parking.park(hit, self.session_id, self.asked, used)
        result.quota_hold = self.parking.hold
        if result.quota_exceeded:
            return None
        if self.attempt.engine_waits:
            result.parked = True
            return None
        parked_at = time.monotonic()
        self.parking.wait()
        self.deadline += time.monotonic() - parked_at
        return self.parking.resume_invocation(self.adapter)

    def _ended(self, session: Any) -> Any:
        """The agent ended its session: done, or stalled and nudged while nudges and time last.
        An agent that gave up is nudged once in the run at most; then the run escalates."""
        end, ending = self._ending(session)
        if not ending.stalled:
            return None
        self._record_stall(session, ending)
        out_of_nudges = self.record.nudges >= self.cfg.max_nudges
        if ending.kind == "gave_up" and (out_of_nudges or self._gave_up_before()):
            self.result.gave_up = ending.detail
            self._failed_checks_kept()
            return None
        if out_of_nudges or time.monotonic() >= self.deadline:
            return None
        return self._nudge(end, ending)

    def _same_output(self) -> bool:
        """Whether a check fails as it did on the base, for the environment's sake, though
        the agent changed files (runs/sameoutput.py); the run's reason is kept then."""
        run, checked = self.run_record, self.result.checked
        if checked is None:
            return False
        reason = same_as_base(self.attempt.tree, run.base_commit, run.base_failures, checked)
        if reason:
            self.result.environment = reason
            self._failed_checks_kept()
        return bool(reason)

    def _failed_checks_kept(self) -> None:
        """The attempt ends the run unjudged: its checks, run on its work, failed; their log
        is kept in the attempt's folder as judging keeps it (the escalation quotes it)."""
        checked = self.result.checked
        if checked is not None:
            folder = self.journal.attempt_dir(self.attempt.n)
            write_atomic(folder / "checks.log", checked.checks.log())
            write_atomic(folder / "checks-failed.txt", checked.checks.failure_tail())
        self.record.checks_passed = False
        self.journal.save()

    def _gave_up_before(self) -> bool:
        """Whether the agent gave up earlier in the run (the stall just recorded aside)."""
        stalls = [s for a in self.run_record.attempts for s in a.stalls if s.kind == "gave_up"]
        if not any(a is self.record for a in self.run_record.attempts):
            stalls += [s for s in self.record.stalls if s.kind == "gave_up"]
        return len(stalls) > 1

    def _ending(self, session: Any) -> tuple[SessionEnd, Ending]:
        """How the session ended; stopping while the done_when checks fail is a stall too,
        and giving up while they fail is `gave_up`."""
        last_call = session.tool_calls[-1] if session.tool_calls else None
        end = SessionEnd(
            stall=session.stall,
            denied=session.denied,
            final_text=session.final_text or "",
            last_tool_call=f"{last_call.tool} {str(last_call.arguments)[:300]}"
            if last_call
            else "",
            stall_after=str(self.cfg.stall_after),
        )
        ending = classify_ending(end)
        cfg = self.cfg
        gave_up = (
            "" if ending.stalled else gave_up_how(session.exit_code, session.killed, end.final_text)
        )
        nudges_left = self.record.nudges < cfg.max_nudges
        if not ending.stalled and cfg.done_when and (nudges_left or gave_up):
            # Stopping while the checks fail is stopping early.
            self.result.checked = self._checks_now()
            if not self.result.checked.checks.passed:
                tail = self.result.checked.checks.failure_tail(self._nudge_room())
                end = SessionEnd(final_text=end.final_text, checks_failed=True, checks_tail=tail)
                ending = classify_ending(end)
                if self._same_output():  # the environment's: ends the run, no nudge
                    return end, Ending("none")
                if gave_up:  # an agent that gave up and did not do the work
                    ending = Ending("gave_up", redact(gave_up)[:DETAIL_CHARS])
        return end, ending

    def _nudge_room(self) -> int:
        """Characters of the checks' output a nudge may carry: at most NUDGE_CHECKS, and
        within `prompt_cap` beside the nudge's words and (for an agent that takes the whole
        prompt again) the prompt's other parts; the previous attempt's failure is cut first."""
        cap = self.attempt.services.config.limits.prompt_cap
        rest = len(self.cfg.nudge) + NUDGE_OVERHEAD
        if not (
            self.adapter.session_resume and (self.session_id or not self.adapter.resume_needs_id)
        ):
            others = copy.copy(self.parts)
            others.nudge = others.failed = ""
            rest += len(others.render().encode("utf-8"))
        return int(max(NUDGE_FLOOR, min(NUDGE_CHECKS, cap - rest)))

    def _record_stall(self, session: Any, ending: Ending) -> None:
        journal, n = self.journal, self.attempt.n
        detail = ending.detail[:500]
        self.record.stalls.append(StallRecord(kind=ending.kind, at=journal.now(), detail=detail))
        journal.event(Event.STALL, attempt=n, kind=ending.kind, detail=detail)
        if session.stall is None:  # the supervisor writes the stalls it detects
            self.transcript.write_loopd(journal.now(), "stall", kind=ending.kind, detail=detail)
        journal.save()

    def _nudge(self, end: SessionEnd, ending: Ending) -> Any:
        """Nudge the agent: resume its session with the nudge, or start anew with it."""
        journal, record, adapter = self.journal, self.record, self.adapter
        record.nudges += 1
        message = self.cfg.nudge
        if end.checks_tail:
            message += "\n\nThe checks still fail:\n\n" + fenced(end.checks_tail)
        self.transcript.write_loopd(journal.now(), "nudge", text=message, n=record.nudges)
        journal.event(Event.NUDGE, attempt=self.attempt.n, n=record.nudges, kind=ending.kind)
        journal.save()
        if self._resumes(self.session_id):
            self.asked = Asked(message, whole_prompt=False)
            return adapter.invocation(message, Resume(self.session_id, message))
        self.parts.nudge = message
        cap = self.attempt.services.config.limits.prompt_cap
        self.asked = Asked(redact(build_prompt(self.parts, cap)), whole_prompt=True)
        return adapter.invocation(self.asked.text)

    def _resumes(self, session_id: str) -> bool:
        """Whether a follow-up message resumes the agent's session (else a new one starts)."""
        adapter = self.adapter
        return bool(adapter.session_resume and (session_id or not adapter.resume_needs_id))

    def _account(self, adapter: Any, session: Any) -> None:
        """Add a session's tokens and cost to the attempt and the run.

        With the profile's `price` the cost is the tokens at that price; without, what the
        agent itself reports (Claude Code, opencode and aider do).
        """
        run, attempt = self.journal.run, self.journal.run.attempts[-1]
        price = adapter.profile.price
        cost = (
            price.cost(session.input_tokens, session.output_tokens)
            if price.set
            else session.cost_usd
        )
        for record in (run, attempt):
            record.tokens += session.input_tokens + session.output_tokens
            record.input_tokens += session.input_tokens
            record.output_tokens += session.output_tokens
            record.cost_usd = round(record.cost_usd + cost, 6)

    def _quota(self, adapter: Any, session: Any) -> Any:
        """The usage limit the session ended on (a QuotaHit), or None."""
        zone = parse_timezone(self.cfg.timezone)
        # Codex prints its local time without a zone: the zone the agent process runs in.
        agent_zone = local_zone({**os.environ, **adapter.profile.env})
        return quota_of(adapter, session, self.journal.now(), zone, agent_zone)

    def _scratch_over_limit(self) -> str:
        """ "tmp" when the agent's scratch folder (HOME, TMPDIR) is over `[limits] max_tmp`:
        asked while the agent runs, so its disk use is bounded during a session too."""
        limit = self.attempt.services.config.limits.max_tmp
        return "tmp" if tree_size(self.attempt.confinement.scratch, limit) > limit else ""

    def _tree_over_limit(self) -> str:
        """ "tree" when the run's tree is over `[limits] max_tree`, "tmp" when the agent's
        scratch folder (its HOME and TMPDIR, on disk) is over `max_tmp`, else ""."""
        limits = self.attempt.services.config.limits
        if tree_size(self.attempt.tree.path, limits.max_tree) > limits.max_tree:
            return "tree"
        if tree_size(self.attempt.confinement.scratch, limits.max_tmp) > limits.max_tmp:
            return "tmp"
        return ""

    def _checks_now(self) -> CheckedCommit:
        """Commit the work so far and run the checks on it."""
        with self.attempt.work_lock:  # not beside a record_evidence of a late tool call
            return self._commit_and_check()

    def _commit_and_check(self) -> CheckedCommit:
        run = self.journal.run
        head = commit_work(
            self.journal,
            self.attempt.tree,
            commit_message(run, self.attempt.n, "work so far"),
            next((a for a in run.attempts if a.n == self.attempt.n), None),
            guard_refs=False,
        )
        checks = CheckTree(self.journal, self.attempt.tree, self.cfg).run(
            head, self.cfg.done_when, None, self.attempt.stop
        )
        return CheckedCommit(head, checks)

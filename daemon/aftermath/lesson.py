"""What a revert teaches: a landed run a person reverted (or edited past half of its lines)
within 7 days is a failure found after the fact. It goes through the promotion loop like any
verified failure: a post-mortem of its last attempt whose evidence adds the person's commits,
their messages and the revert's diff (`attempt-N/after-landing.md`), a candidate grounded in
that evidence by the verifier, filed in trial. The rules it followed lose the help it counted
for them (`recount`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from daemon.aftermath.verdict import changed_share
from daemon.git.safe import Git
from daemon.model.client import ModelUnavailable
from daemon.model.evidence import build_evidence
from daemon.redact import redact
from daemon.rules.library import LIVE
from daemon.rules.postmortem import learn_from_attempt as post_mortem
from daemon.rules.rulefile import Rule
from daemon.runparts.services import RunServices
from daemon.runs.learning import rule_library
from daemon.state.aftermath import Aftermath, save_aftermath
from daemon.state.atomic import write_atomic
from daemon.state.eventtypes import Event
from daemon.state.records import RunRecord, is_experiment

EVIDENCE_FILE = "after-landing.md"  # in the run's last attempt folder (rules/grounding.py)
TEACH_DAYS = 7
MOST = 0.5  # an edit of more than this share of its lines counts as a failure too
DIFF_CAP = 20_000  # characters of the person's diff kept as evidence


def failed_after(record: Aftermath) -> bool:
    """Whether a person reverted the run, or edited more than half of it, within 7 days."""
    deadline = record.landed_at + timedelta(days=TEACH_DAYS)
    theirs = [c for c in record.commits if c.date <= deadline]
    if any(c.revert for c in theirs):
        return True
    return bool(theirs) and record.state == "edited" and changed_share(record) > MOST


def teach(services: RunServices, git: Git, run: RunRecord, record: Aftermath) -> Any:
    """The post-mortem of a run that failed after landing; None when there is nothing to
    teach or no verifier. Marks the record taught once a post-mortem was asked."""
    if record.taught or not run.attempts or is_experiment(run) or not failed_after(record):
        return None
    if not record.recounted:
        # Marked durable first: a loopd killed here never counts the harm twice.
        record.recounted = True
        save_aftermath(services.store.run_dir(run.id), record)
        recount(services, run)
    client = services.model_client()
    if client is None:
        return None
    attempt = run.attempts[-1]
    folder = services.store.attempt_dir(run.id, attempt.n)
    write_atomic(folder / EVIDENCE_FILE, redact(_after_landing(git, record)))
    cfg = services.config.verifier
    evidence = build_evidence(folder, run.task, attempt.summary, cfg.evidence_tokens, [])
    verdict: dict[str, object] = {
        "score": attempt.score,
        "verdict": attempt.verdict,
        "feedback": attempt.feedback,
        "checks_passed": attempt.checks_passed,
        "violations": [],
        "after_landing": f"{record.state} by a person within {TEACH_DAYS} days",
    }
    try:
        result = post_mortem(
            rule_library(services),
            client,
            cfg,
            services.store.root,
            folder,
            verdict,
            run.task,
            run.loop,
            run.id,
            services.store.events,
            services.clock(),
            evidence_text=evidence.render() + "\n\n" + (folder / EVIDENCE_FILE).read_text(),
            defer=True,
            note=run.trigger.note,
            repo=run.repo,
        )
    except ModelUnavailable:
        return None  # asked again at the next look
    record.taught = True
    return result


def recount(services: RunServices, run: RunRecord) -> list[str]:
    """The rules the run followed lose the help it counted for them: a person's revert makes
    it harm instead. Returns the rules recounted."""
    library = rule_library(services)
    followed = set(run.attempts[-1].rules_followed) if run.attempts else set()
    done = []
    for rule_id in dict.fromkeys(run.rules_fired):
        stored = library.find(rule_id)
        if rule_id not in followed or stored is None or stored.status not in LIVE:
            continue
        old = stored.rule
        fields = {**old.model_dump(), "helped": max(0, old.helped - 1), "harmed": old.harmed + 1}
        library.save(stored, Rule.model_validate(fields))
        done.append(rule_id)
    if done:
        services.event(Event.AFTERMATH_RECOUNTED, loop=run.loop, run=run.id, rules=done)
    return done


def _after_landing(git: Git, record: Aftermath) -> str:
    """The person's commits after the run landed, reverts first, with the revert's diff."""
    out = [
        "# After landing",
        "",
        f"The run's work landed on {record.target} at {record.landed_at.isoformat()}; "
        f"{record.lines_kept} of its {record.lines_landed} lines are still there "
        f"(state: {record.state}). A person's commits since:",
        "",
    ]
    commits = sorted(record.commits, key=lambda c: not c.revert)
    for c in commits:
        kind = "reverts the run" if c.revert else f"+{c.added}/-{c.removed} in its files"
        out.append(f"- {c.commit[:12]} by {c.author}, {c.date.isoformat()} ({kind}): {c.message}")
    first = commits[0] if commits else None
    if first is not None:
        body = git.out("log", "-1", "--format=%B", first.commit, check=False)
        patch = git.run(
            "show", "--no-ext-diff", "--no-textconv", "--format=", first.commit, "--",
            *record.lines, check=False,
        ).stdout.decode("utf-8", "replace")  # fmt: skip
        out += ["", f"## {first.commit[:12]}: its message", "", body, "", "## Its diff", ""]
        out.append(patch[:DIFF_CAP])
    return "\n".join(out) + "\n"

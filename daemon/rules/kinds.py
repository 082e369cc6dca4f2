"""The kinds a run teaches besides its post-mortems: its decisions, and the agent's own notes.

- `learn_decisions`: when a run succeeded, each decision it recorded (decisions.md) is
  proposed as a `decision` rule of its repository, with the run as its source.
- `submit_candidate`: a `knowledge` or `skill` candidate the agent notes during a run (the
  `note_knowledge` tool of `loopd mcp` calls it).

Both go through the rule verifier like a post-mortem's candidate (patterns, grounding
against the run's evidence as daemon/rules/runevidence.py reads it, generic advice,
duplicates, the model's grounding and contradiction check): they land in `rules/trial/` or
`rules/rejected/`, never in `active/`.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from daemon.config import VerifierConfig
from daemon.home import Home
from daemon.model.client import ModelClient
from daemon.redact import redact
from daemon.rules.decisionlog import decision_candidate, read_decisions
from daemon.rules.library import RuleLibrary
from daemon.rules.modelcalls import StructuredModel
from daemon.rules.rulefile import Rule, Scope
from daemon.rules.runevidence import entries_for, run_evidence, skill_proof
from daemon.rules.verifier import Verification, verify_candidate
from daemon.state.atomic import open_private
from daemon.state.events import EventLog, iso

MAX_DECISION_RULES = 5  # decisions of one run proposed as rules; the rest stay in decisions.md
MAX_NOTES = 10  # knowledge and skill candidates one run may submit
NOTES_FILE = "notes.jsonl"  # in the run's folder: each note and what became of it
_GLOB = re.compile(r"^[\w.*?\[\]/@+-]{1,200}$")


class NoVerifier(RuntimeError):
    """No `[verifier]` in loopd.toml: loopd learns no rule without its model."""


class CandidateNote(BaseModel):
    """What an agent submits as `note_knowledge(kind, text, why, paths)`."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["knowledge", "skill"]
    text: str = Field(min_length=8, max_length=600)  # the rule: the fact, or the procedure
    why: str = Field(min_length=8, max_length=1200)  # what the run showed: facts of its evidence
    paths: list[str] = Field(default_factory=list, max_length=10)  # repository paths or globs

    @field_validator("paths")
    @classmethod
    def _relative(cls, value: list[str]) -> list[str]:
        for path in value:
            if path.startswith("/") or ".." in path.split("/") or not _GLOB.match(path):
                raise ValueError(
                    f"{path!r} is not a path inside the repository (relative, no '..', "
                    "letters, digits and ./_-*?[]@+ only)"
                )
        return value


def _how_to_apply(note: CandidateNote, command: str) -> str:
    when = f"When a task touches {', '.join(note.paths)}" if note.paths else "When it applies"
    if note.kind == "skill":
        then = f", then run `{command}` to confirm it worked." if command else "."
        return f"{when}, follow this procedure{then}"
    return f"{when}, rely on this fact instead of finding it out again."


def _patterns(paths: list[str]) -> list[str]:
    """A literal pattern per path's last part, so a task naming that file fires the rule."""
    out = []
    for path in paths:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if len(name) >= 3 and not any(c in name for c in "*?["):
            out.append(rf"(?i)\b{re.escape(name)}\b")
    return list(dict.fromkeys(out))[:4]


def note_candidate(note: CandidateNote, run_dir: Path, run_id: str, task: str, repo: str) -> Rule:
    """The candidate rule a note proposes, with its evidence entries and, for a skill, the
    command that verified it (none found: the verifier rejects the skill, saying why)."""
    prefix = f"runs/{run_id}"
    proof = skill_proof(run_dir, note.text, prefix) if note.kind == "skill" else None
    evidence = run_evidence(run_dir)
    return Rule(
        kind=note.kind,
        severity="remind",
        # Not `scope.paths`: a path the agent names is where the lesson was learned, and a
        # glob of its own making would keep the rule from tasks it is for.
        scope=Scope(repos=[repo] if repo else []),
        trigger_intent=(
            f"Tasks in this repository that touch {', '.join(note.paths)}"
            if note.paths
            else " ".join(note.text.split())[:300]
        ),
        trigger_patterns=_patterns(note.paths),
        source_run=run_id,
        source_task=task,
        evidence=entries_for(note.why, evidence, prefix),
        verified_with=proof,
        rule=note.text,
        why=note.why,
        how_to_apply=_how_to_apply(note, proof.command if proof else ""),
    )


def _notes_taken(run_dir: Path) -> int:
    try:
        with open(run_dir / NOTES_FILE, "rb") as fh:
            return sum(1 for _ in fh)
    except FileNotFoundError:
        return 0


def _record_note(run_dir: Path, note: CandidateNote, verdict: Verification, now: datetime) -> None:
    """One line of the run's notes.jsonl: what the agent noted and what became of it."""
    entry = {
        "ts": iso(now),
        "kind": note.kind,
        "text": redact(note.text),
        "decision": verdict.decision,
        "rule": verdict.duplicate_of or verdict.rule.id,
    }
    with open_private(run_dir / NOTES_FILE) as fh:
        fh.write((json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8"))


def submit_candidate(
    home: Home | Path,
    run_id: str,
    kind: str,
    text: str,
    why: str,
    paths: list[str],
    now: datetime,
    *,
    client: StructuredModel | None = None,
    use_model: bool = True,
) -> Verification:
    """Submit a `knowledge` or `skill` candidate from run `run_id` to the rule verifier.

    The candidate is grounded in the run's evidence (never in the note itself), checked for
    generic advice, duplicates and, by the verifier model, grounding and contradictions; it
    lands in `rules/trial/` or, with its reason, `rules/rejected/`. `client`: the verifier
    model (default: one for the home's `[verifier]`). `use_model=False` skips its step, as
    `loopd rules verify --no-model` does (`verified_by` then lacks `model:...`).

    Raises ValueError for a bad note (pydantic's ValidationError is one) or a run that noted
    MAX_NOTES already, FileNotFoundError for an unknown run, NoVerifier when the model is
    asked for and the home configures none, ModelUnavailable when it cannot be reached
    (nothing is filed then).
    """
    note = CandidateNote(kind=kind, text=text, why=why, paths=list(paths))
    home = home if isinstance(home, Home) else Home(Path(home))
    config = home.load().daemon
    store = home.state(config.limits.events_rotate)
    run = store.load_run(run_id)
    library = RuleLibrary(home.rules_dir)
    run_dir = store.run_dir(run_id)
    if _notes_taken(run_dir) >= MAX_NOTES:
        raise ValueError(f"run {run_id} already noted {MAX_NOTES} candidates; no more are taken")
    candidate = note_candidate(note, run_dir, run_id, run.task, run.repo)
    if client is None and use_model:
        if not config.verifier.configured:
            raise NoVerifier(
                "no [verifier] in loopd.toml: loopd learns no rule without its model. Fix: "
                "set [verifier] base_url and model"
            )
        client = ModelClient(config.verifier)
    verdict = verify_candidate(
        library,
        candidate,
        run_dir,
        client,
        config.verifier,
        store.events,
        now,
        state_root=store.root,
        use_model=use_model,
        loop=run.loop,
        run=run_id,
        evidence=run_evidence(run_dir),
    )
    _record_note(run_dir, note, verdict, now)
    return verdict


def learn_decisions(
    library: RuleLibrary,
    client: StructuredModel | None,
    cfg: VerifierConfig,
    events: EventLog | None,
    state_root: Path,
    run_id: str,
    loop: str,
    task: str,
    repo: str,
    now: datetime,
) -> list[Verification]:
    """Propose the decisions recorded in a succeeded run as `decision` rules; the verdicts.

    A decision already proposed from this run (a finish taken up again after a crash) is
    not proposed twice. Raises ModelUnavailable when the verifier model cannot be reached;
    what was filed before stays, and a later call proposes the rest.
    """
    run_dir = state_root / "runs" / run_id
    decisions = read_decisions(run_dir)[:MAX_DECISION_RULES]
    if not decisions:
        return []
    done = {
        " ".join(s.rule.rule.split())
        for s in library.scan()
        if s.rule.source_run == run_id and s.rule.kind == "decision"
    }
    evidence = run_evidence(run_dir)
    out = []
    for decision in decisions:
        if " ".join(decision.title.split()) in done:
            continue
        candidate = decision_candidate(decision, run_id, task, repo, f"runs/{run_id}")
        out.append(
            verify_candidate(
                library,
                candidate,
                run_dir,
                client,
                cfg,
                events,
                now,
                state_root=state_root,
                loop=loop,
                run=run_id,
                evidence=evidence,
            )
        )
    return out

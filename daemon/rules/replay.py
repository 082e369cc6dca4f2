"""Replay ("dreaming over the record"): where a rule would have fired on the tasks of recorded runs.

For each run recorded in `state/runs/` since a moment (experiment runs left out: they repeat
one loop's task), the trigger evaluator's lexical stage runs with the rule, and where its
patterns miss, the semantic answer cached for that task (state/cache/trigger-matches.json)
counts when there is one. No model is called. Scope applies as in a run, except
`scope.repos`: breadth asks how widely the rule's words reach, whatever repository it is
scoped to.

Breadth is the share of unrelated loops' runs the rule fires on: runs of loops other than
the one it was learned in (every run, for a rule without a source run). A rule whose
breadth is over `[rules] max_breadth` is too broad to promote, once at least
MIN_BREADTH_RUNS runs of unrelated loops are on record (fewer say too little).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from daemon.rules.evaluator import PatternIndex, in_scope
from daemon.rules.judge_cache import JudgeCache, task_key
from daemon.rules.library import StoredRule
from daemon.rules.rulefile import Rule
from daemon.state.store import StateStore

MIN_BREADTH_RUNS = 10
DEFAULT_WINDOW = timedelta(days=30)
CACHE_FILE = Path("cache") / "trigger-matches.json"


@dataclass(frozen=True)
class RecordedTask:
    """What the evaluator saw (or would see) for one recorded run."""

    run: str
    loop: str
    outcome: str
    text: str
    paths: tuple[str, ...] = ()


@dataclass
class Firing:
    run: str
    loop: str
    outcome: str
    why: str  # the pattern that matched, or "model (cached)"

    def to_dict(self) -> dict[str, str]:
        return {"run": self.run, "loop": self.loop, "outcome": self.outcome, "why": self.why}


@dataclass
class RuleReplay:
    """One rule's replay: where it fires, on which outcomes, and how broadly."""

    id: str
    status: str
    source_loop: str
    runs: int = 0  # recorded runs replayed
    unrelated_runs: int = 0
    firings: list[Firing] = field(default_factory=list)
    max_breadth: float = 0.3

    @property
    def unrelated_fired(self) -> int:
        return sum(1 for f in self.firings if f.loop != self.source_loop)

    @property
    def breadth(self) -> float | None:
        """The share of unrelated loops' runs it fires on; None without such runs."""
        if not self.unrelated_runs:
            return None
        return self.unrelated_fired / self.unrelated_runs

    @property
    def outcomes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for firing in self.firings:
            counts[firing.outcome] = counts.get(firing.outcome, 0) + 1
        return counts

    @property
    def too_broad(self) -> bool:
        breadth = self.breadth
        return (
            breadth is not None
            and self.unrelated_runs >= MIN_BREADTH_RUNS
            and breadth > self.max_breadth
        )

    def reason(self) -> str:
        """Why the rule is too broad to promote, or ''."""
        if not self.too_broad:
            return ""
        return (
            f"too broad: fires on {self.unrelated_fired} of {self.unrelated_runs} runs of "
            f"other loops ({self.breadth:.0%}, over [rules] max_breadth {self.max_breadth:g})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "source_loop": self.source_loop,
            "runs": self.runs,
            "fired": len(self.firings),
            "outcomes": self.outcomes,
            "unrelated_runs": self.unrelated_runs,
            "unrelated_fired": self.unrelated_fired,
            "breadth": self.breadth,
            "too_broad": self.too_broad,
            "reason": self.reason(),
            "firings": [f.to_dict() for f in self.firings],
        }


def recorded_tasks(store: StateStore, since: datetime) -> list[RecordedTask]:
    """The tasks of runs started since `since`, oldest first; experiment runs left out."""
    floor = since.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    tasks = []
    for run_id in store.run_ids():
        if run_id[:16] < floor:
            continue
        try:
            run = store.load_run(run_id)
        except (OSError, ValueError):
            continue  # being written, or unreadable: replay what can be read
        if run.trigger.kind == "experiment" or run.started < since:
            continue
        # The task as the evaluator saw it (runs/learning.py run_task_text).
        parts = [run.task] + [v for v in (run.trigger.ref, run.trigger.note) if v]
        tasks.append(
            RecordedTask(
                run=run.id,
                loop=run.loop,
                outcome=run.outcome or f"({run.phase})",
                text="\n".join(parts),
                paths=tuple(run.trigger.paths),
            )
        )
    return tasks


def replay(
    rules: list[StoredRule],
    tasks: list[RecordedTask],
    cache: JudgeCache | None = None,
    max_breadth: float = 0.3,
) -> list[RuleReplay]:
    """Where each rule would have fired on `tasks`: patterns, then cached semantic answers."""
    index = PatternIndex(rules)
    out = [
        RuleReplay(
            s.rule.id or "(candidate)", s.status, s.rule.source_loop, max_breadth=max_breadth
        )
        for s in rules
    ]
    for task in tasks:
        paths = list(task.paths)
        subject = task.text + ("\n" + "\n".join(paths) if paths else "")
        hits = index.matches(subject)
        key = task_key(task.text, task.loop, paths) if cache is not None else ""
        for i, stored in enumerate(rules):
            result = out[i]
            result.runs += 1
            if task.loop != result.source_loop:
                result.unrelated_runs += 1
            if not in_scope(stored.rule, task.loop, paths):
                continue
            why = hits.get(i, "")
            if not why and cache is not None and stored.rule.id:
                why = "model (cached)" if cache.get(key, stored.rule) else ""
            if why:
                result.firings.append(Firing(task.run, task.loop, task.outcome, why))
    return out


def judge_cache(store: StateStore) -> JudgeCache:
    """The cache runs and the CLI share under `state/`."""
    return JudgeCache(store.root / CACHE_FILE)


def breadth_reason(
    rule: Rule,
    store: StateStore,
    now: datetime,
    max_breadth: float,
    window: timedelta = DEFAULT_WINDOW,
) -> str:
    """Why `rule` is too broad to promote (replayed over the last `window`), or ''."""
    stored = StoredRule(rule, "trial", Path(""))
    tasks = recorded_tasks(store, now - window)
    [result] = replay([stored], tasks, judge_cache(store), max_breadth)
    return result.reason()

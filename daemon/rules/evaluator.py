"""The trigger evaluator: which rules fire for a task. Lexical patterns first, then ONE model call.

Lexical stage: every live rule (trial or active, not expired) whose scope admits the loop
and the changed paths, and one of whose `trigger_patterns` matches the subject (the task
text, then each changed path on its own line), fires. Each pattern is indexed by a literal
that any match must contain, taken from the parsed regex, under the rarest trigram of that
literal; a task only runs the regexes whose literal it contains, so 10,000 rules cost
milliseconds. Patterns without such a literal (3+ characters) are run on every task.

Scope: `repos` are the repositories a learned rule is scoped to (none: every repository;
not applied when no repository is given, as in replay's breadth); `loops` are globs of loop
names (not applied when no loop is given, as in `loopd rules match` without --loop);
`paths` are wildmatch globs of changed paths
(daemon.globs.path_matches). When the caller knows no changed paths (a scheduled run),
`paths` cannot exclude the rule.

Model stage: among the live in-scope rules that did not fire, at most `judge_candidates`
(all of them when there are no more) chosen by the embedding prefilter when
`embeddings_model` is set, else by word overlap between the task and the rule's intent, go
into one `trigger_matches` call bounded by `judge_timeout`. Answers are cached by (task,
rule id, rule version): rules whose answer is cached are not asked again, and when every
candidate is cached no call is made. The cache is a `JudgeCache` (rules/judge_cache.py):
runs and the CLI keep it in `state/cache/trigger-matches.json`, where `loopd replay` reads
it; without a file, one in memory per process.
On timeout or error: the lexical matches alone, and a `rule_judge_failed` event.
"""

from __future__ import annotations

import fnmatch
import functools
import math
import os
import re
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from daemon.config import VerifierConfig
from daemon.globs import path_matches
from daemon.model.schemas import TriggerMatches
from daemon.rules.judge_cache import JudgeCache, task_key
from daemon.rules.library import RuleLibrary, StoredRule
from daemon.rules.modelcalls import StructuredModel
from daemon.rules.patterns import PatternError, compile_pattern, required_literal
from daemon.rules.rulefile import Rule, Status
from daemon.state.events import EventLog

MIN_LITERAL = 3
_WORD = re.compile(r"[a-z0-9_]{3,}")
_STOP = set(
    "the and for with from that this into when then than your you are was were have has "
    "not but all any can its use using make makes should would could will each every".split()
)

JUDGE_SYSTEM = """\
You decide which rules from earlier runs apply to a new task for a coding agent.
A rule applies when the task is the kind of task its intent describes, so that the agent
should be reminded of it while doing this task. Answer with the ids of the rules that
apply, copied exactly, or an empty list when none does."""


# -- the index ------------------------------------------------------------------------------


@dataclass
class _Pattern:
    rule: int  # index into PatternIndex.rules
    source: str
    literal: str
    _compiled: Any = None  # the RE2 program, compiled when first needed

    @property
    def regex(self) -> Any:
        if self._compiled is None:
            self._compiled = compile_pattern(self.source)
        return self._compiled


class PatternIndex:
    """Live rules with their patterns indexed by a required literal's rarest trigram."""

    def __init__(self, rules: list[StoredRule]) -> None:
        self.rules = rules
        self.by_trigram: dict[str, list[_Pattern]] = {}
        self.unindexed: list[_Pattern] = []
        self.intent_words: list[set[str]] = []
        patterns: list[_Pattern] = []
        for i, stored in enumerate(rules):
            skipped = {source for source, _ in stored.pattern_problems}
            for source in stored.rule.trigger_patterns:
                if source not in skipped:  # RE2 cannot run it: the library warned
                    patterns.append(_Pattern(i, source, required_literal(source)))
            self.intent_words.append(words(stored.rule.trigger_intent))
        counts: Counter[str] = Counter()
        for item in patterns:
            counts.update({item.literal[j : j + 3] for j in range(len(item.literal) - 2)})
        for item in patterns:
            if len(item.literal) < MIN_LITERAL:
                self.unindexed.append(item)
                continue
            grams = {item.literal[j : j + 3] for j in range(len(item.literal) - 2)}
            self.by_trigram.setdefault(min(grams, key=lambda g: (counts[g], g)), []).append(item)

    def matches(self, subject: str) -> dict[int, str]:
        """{rule index: the first pattern that matched} for `subject`."""
        low = subject.lower()
        seen: set[str] = set()
        hits: dict[int, str] = {}
        candidates: list[_Pattern] = list(self.unindexed)
        for j in range(len(low) - 2):
            gram = low[j : j + 3]
            if gram in seen:
                continue
            seen.add(gram)
            bucket = self.by_trigram.get(gram)
            if bucket:
                candidates.extend(p for p in bucket if p.literal in low)
        for item in candidates:
            if item.rule in hits:
                continue
            try:
                if item.regex.search(subject):
                    hits[item.rule] = item.source
            except PatternError:
                continue
        return hits


_REPORTED: set[tuple[str, str]] = set()  # (rule id, pattern) skipped and told, per process
_INDEXES: weakref.WeakKeyDictionary[RuleLibrary, tuple[tuple, PatternIndex]] = (
    weakref.WeakKeyDictionary()
)
_INDEX_LOCK = threading.Lock()


def index_for(library: RuleLibrary, live: list[StoredRule]) -> PatternIndex:
    """The index of `live`, rebuilt only when a rule file changed since the last call."""
    key = (library.generation, tuple((s.rule.id, s.status) for s in live))
    with _INDEX_LOCK:
        cached = _INDEXES.get(library)
        if cached and cached[0] == key:
            return cached[1]
        index = PatternIndex(live)
        _INDEXES[library] = (key, index)
        return index


# -- scope and words --------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def repo_key(path: str) -> str:
    """A repository path as compared in `scope.repos`: `~` expanded, absolute, resolved."""
    return os.path.realpath(os.path.expanduser(path))


def in_scope(rule: Rule, loop: str, paths: list[str], repo: str | None = None) -> bool:
    """Whether the rule's scope admits this loop, these changed paths and this repository.

    `repo` None: the repositories are not looked at (replay's breadth, `rules match`).
    """
    if rule.scope.nowhere:
        return False
    if repo is not None and rule.scope.repos:
        here = repo_key(repo)
        if not any(repo_key(r) == here for r in rule.scope.repos):
            return False
    loops = rule.scope.loops or ["*"]
    if loop and "*" not in loops and not any(fnmatch.fnmatchcase(loop, g) for g in loops):
        return False
    if rule.scope.paths and paths:
        return any(path_matches(g, p) for g in rule.scope.paths for p in paths)
    return True


def words(text: str) -> set[str]:
    out = set()
    for word in _WORD.findall(text.lower()):
        if word in _STOP:
            continue
        out.add(word[:-1] if len(word) > 4 and word.endswith("s") else word)
    return out


PROCESS_CACHE = JudgeCache()  # the daemon's: one per process, in memory


# -- selection ---------------------------------------------------------------------------------


@dataclass
class Fired:
    """A rule that fires for the task, and why."""

    rule: Rule
    status: Status
    why: Literal["pattern", "model"]
    detail: str  # the pattern that matched, or "model" / "model (cached)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.rule.id,
            "status": self.status,
            "severity": self.rule.severity,
            "why": self.why,
            "detail": self.detail,
            "rule": self.rule.rule,
            "how_to_apply": self.rule.how_to_apply,
        }


@dataclass
class Selection:
    """The rules that fire for one task; the caller stops the run on `refuse`/`escalate`."""

    fired: list[Fired] = field(default_factory=list)
    judge: str = "not needed"  # called | cached | failed: ... | no model | not needed
    model_calls: int = 0
    candidates: list[str] = field(default_factory=list)  # rule ids put to the judge
    lexical_seconds: float = 0.0

    @property
    def rules(self) -> list[Rule]:
        return [f.rule for f in self.fired]

    @property
    def ids(self) -> list[str]:
        return [f.rule.id for f in self.fired]

    @property
    def refuse(self) -> list[Fired]:
        return [f for f in self.fired if f.rule.severity == "refuse"]

    @property
    def escalate(self) -> list[Fired]:
        return [f for f in self.fired if f.rule.severity == "escalate"]

    @property
    def reminders(self) -> list[Rule]:
        return [f.rule for f in self.fired if f.rule.severity == "remind"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "fired": [f.to_dict() for f in self.fired],
            "judge": self.judge,
            "model_calls": self.model_calls,
            "candidates": self.candidates,
            "refuse": [f.rule.id for f in self.refuse],
            "escalate": [f.rule.id for f in self.escalate],
        }


def lexical_stage(
    index: PatternIndex, task_text: str, loop: str, paths: list[str], repo: str | None = None
) -> dict[int, str]:
    """{rule index: matched pattern} for the in-scope rules whose patterns match."""
    subject = task_text + ("\n" + "\n".join(paths) if paths else "")
    hits = index.matches(subject)
    return {i: p for i, p in hits.items() if in_scope(index.rules[i].rule, loop, paths, repo)}


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a)) or 1.0
    nb = math.sqrt(sum(y * y for y in b)) or 1.0
    return dot / (na * nb)


def _prefilter(
    index: PatternIndex,
    rest: list[int],
    task_text: str,
    client: StructuredModel,
    cfg: VerifierConfig,
    cache: JudgeCache,
) -> list[int]:
    limit = cfg.judge_candidates
    if len(rest) <= limit:
        return rest
    if cfg.embeddings_model:
        rules = [index.rules[i].rule for i in rest]
        missing = [r for r in rules if cache.vector(r) is None]
        vectors = client.embeddings(
            [task_text] + [r.trigger_intent for r in missing],
            timeout=cfg.judge_timeout.total_seconds(),
        )
        for rule, vector in zip(missing, vectors[1:], strict=True):
            cache.put_vector(rule, vector)
        task_vector = vectors[0]
        scored = [
            (_cosine(task_vector, cache.vector(r) or []), i)
            for r, i in zip(rules, rest, strict=True)
        ]
    else:
        task_words = words(task_text)
        scored = [(len(task_words & index.intent_words[i]), i) for i in rest]
    scored.sort(key=lambda pair: (-pair[0], -index.rules[pair[1]].rule.confidence, pair[1]))
    return [i for _, i in scored[:limit]]


def _judge_prompt(task_text: str, loop: str, paths: list[str], rules: list[Rule]) -> str:
    listing = "\n".join(f"- {r.id}: {r.trigger_intent} (rule: {r.rule})" for r in rules)
    changed = "\n".join(paths[:50]) or "(none known)"
    return (
        f"# Task\n<task>\n{task_text}\n</task>\n\n# Loop\n{loop}\n\n"
        f"# Changed paths\n{changed}\n\n# Rules (id: intent)\n{listing}"
    )


def select_rules(
    library: RuleLibrary,
    task_text: str,
    loop: str,
    paths: list[str],
    client: StructuredModel | None,
    cfg: VerifierConfig,
    events: EventLog | None,
    now: datetime,
    *,
    run: str | None = None,
    cache: JudgeCache | None = None,
    repo: str | None = None,
) -> Selection:
    """The rules that fire for a task; `rule_fired` events when `events` is given.

    `repo`: the run's repository, for the rules' `scope.repos` (None: not looked at).
    """
    cache = cache if cache is not None else PROCESS_CACHE
    live = [s for s in library.rules() if not s.rule.expired(now)]
    index = index_for(library, live)
    started = time.perf_counter()
    hits = lexical_stage(index, task_text, loop, paths, repo)
    selection = Selection(lexical_seconds=time.perf_counter() - started)
    for i, pattern in sorted(hits.items()):
        selection.fired.append(
            Fired(index.rules[i].rule, index.rules[i].status, "pattern", pattern)
        )

    rest = [
        i
        for i, s in enumerate(index.rules)
        if i not in hits and s.rule.trigger_intent.strip() and in_scope(s.rule, loop, paths, repo)
    ]
    if rest and client is not None and cfg.judge_candidates > 0:
        _judge(selection, index, rest, task_text, loop, paths, client, cfg, cache, events, now, run)
    elif rest:
        selection.judge = "no model"

    if events is not None:
        _report_skipped(live, events, now, loop, run)
        for fired in selection.fired:
            events.append(
                "rule_fired",
                now,
                loop=loop,
                run=run,
                rule=fired.rule.id,
                why=fired.why,
                detail=fired.detail,
                severity=fired.rule.severity,
            )
    return selection


def _report_skipped(
    live: list[StoredRule], events: EventLog, now: datetime, loop: str, run: str | None
) -> None:
    """One `rule_pattern_skipped` event per pattern RE2 cannot run, once per process."""
    for stored in live:
        for pattern, why in stored.pattern_problems:
            key = (stored.rule.id, pattern)
            with _INDEX_LOCK:
                if key in _REPORTED:
                    continue
                _REPORTED.add(key)
            events.append(
                "rule_pattern_skipped",
                now,
                loop=loop,
                run=run,
                rule=stored.rule.id,
                pattern=pattern,
                reason=why,
            )


def _judge(
    selection: Selection,
    index: PatternIndex,
    rest: list[int],
    task_text: str,
    loop: str,
    paths: list[str],
    client: StructuredModel,
    cfg: VerifierConfig,
    cache: JudgeCache,
    events: EventLog | None,
    now: datetime,
    run: str | None,
) -> None:
    key = task_key(task_text, loop, paths)
    try:
        chosen = _prefilter(index, rest, task_text, client, cfg, cache)
        selection.candidates = [index.rules[i].rule.id for i in chosen]
        cached = {i: cache.get(key, index.rules[i].rule) for i in chosen}
        ask = [i for i in chosen if cached[i] is None]
        matched: set[int] = {i for i in chosen if cached[i]}
        answers: dict[int, bool] = {}
        if ask:
            rules = [index.rules[i].rule for i in ask]
            selection.model_calls = 1
            reply = client.structured(
                "trigger_matches",
                TriggerMatches,
                JUDGE_SYSTEM,
                _judge_prompt(task_text, loop, paths, rules),
                timeout=cfg.judge_timeout.total_seconds(),
            )
            said = set(reply.matches)
            answers = {i: index.rules[i].rule.id in said for i in ask}
            cache.put(key, [(index.rules[i].rule, hit) for i, hit in answers.items()])
            selection.judge = "called"
        else:
            selection.judge = "cached"
    except Exception as exc:  # noqa: BLE001 - any failure of the judge means lexical only
        selection.judge = f"failed: {exc}"
        if events is not None:
            events.append(
                "rule_judge_failed",
                now,
                loop=loop,
                run=run,
                reason=str(exc)[:500],
                candidates=len(selection.candidates),
            )
        return
    for i in chosen:
        if i in matched or answers.get(i):
            stored = index.rules[i]
            detail = "model (cached)" if i in matched else "model"
            selection.fired.append(Fired(stored.rule, stored.status, "model", detail))


def render_rules(rules: list[Rule]) -> str:
    """The body of the prompt's `# Rules from earlier runs` section ('' when no rule fired)."""
    items = []
    for rule in rules:
        items.append(f"- {rule.rule}\n  How to apply: {rule.how_to_apply}")
    return "\n".join(items) + ("\n" if items else "")

"""Rule selection at 10, 100, 1,000 and 10,000 generated rules: lexical-stage time, model calls.

Targets: the lexical stage <= 20 ms at 10,000 rules, and at most one
model call per task at every size. The model is the scripted OpenAI-compatible server of
tests/model_server.py, reached through the real ModelClient; the judge's cache is fresh for
each task so that every task really asks.
Usage: python bench/rule_selection.py [--tasks N] [--sizes N ...] [--smoke]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from verdict import verdict  # noqa: E402

from daemon.config import VerifierConfig  # noqa: E402
from daemon.model.client import ModelClient  # noqa: E402
from daemon.rules.evaluator import JudgeCache, index_for, lexical_stage, select_rules  # noqa: E402
from daemon.rules.library import RuleLibrary  # noqa: E402
from daemon.rules.rulefile import Rule, dump_rule, make_id  # noqa: E402
from tests.model_server import ScriptedModelServer  # noqa: E402

NOW = datetime(2026, 11, 29, 2, 14, tzinfo=UTC)
SIZES = (10, 100, 1_000, 10_000)
WORDS = (
    "migration schema endpoint review refactor cache queue worker parser lexer token auth "
    "session cookie billing invoice refund payment report export import upload download "
    "thumbnail image video audio search index shard replica backup restore deploy rollback "
    "release changelog docs readme tutorial lint format typecheck coverage flaky timeout "
    "retry backoff webhook cron scheduler config secret rotate certificate dns proxy "
    "socket stream buffer encoding unicode locale timezone calendar currency rounding"
).split()
TASKS = [
    "Review app.py and list concrete problems with line numbers.",
    "Make the failing tests pass without weakening them.",
    "Add a refund endpoint to the billing service and document it.",
    "Fix the flaky timeout in the upload worker tests.",
    "Rotate the webhook secret and update the deploy docs.",
    "Speed up the search index rebuild; keep the schema migration reversible.",
    "Write the changelog for the release and bump the version.",
    "Find why the cron scheduler skips runs across a timezone change.",
]


def generate(folder: Path, size: int, rng: random.Random) -> None:
    active = folder / "active"
    active.mkdir(parents=True)
    for n in range(1, size + 1):
        a, b, c = rng.sample(WORDS, 3)
        patterns = [
            rf"(?i)\b{a}\w*\s+{b}",
            rf"(?i)\b{c}-{a}\b",
            rf"(?i)\b(?:{b}|{c})_{n}\b",
        ]
        rule = Rule(
            id=make_id(n, f"{a} {b} {c}"),
            trigger_intent=f"Tasks that change the {a} {b} of the {c} code",
            trigger_patterns=patterns,
            rule=f"Run `make check-{a}` after editing `{b}/{c}.py`.",
            why=f"The {c} checks failed in run {n}.",
            how_to_apply=f"Run `make check-{a}` and read its output.",
        )
        (active / f"{rule.id}.md").write_text(dump_rule(rule))


def measure(size: int, server: ScriptedModelServer, tasks: int) -> dict[str, float]:
    rng = random.Random(size)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "rules"
        generate(folder, size, rng)
        library = RuleLibrary(folder)
        started = time.perf_counter()
        live = library.rules()
        cold_load = time.perf_counter() - started
        started = time.perf_counter()
        live = library.rules()
        warm_load = time.perf_counter() - started
        started = time.perf_counter()
        index = index_for(library, live)
        build = time.perf_counter() - started
        lexical = []
        for task in (TASKS * ((tasks // len(TASKS)) + 1))[:tasks]:
            started = time.perf_counter()
            lexical_stage(index, task, "bench", [])
            lexical.append(time.perf_counter() - started)
        cfg = VerifierConfig(base_url=server.base_url, model="judge", judge_timeout="5s")
        client = ModelClient(cfg, environ={})
        calls = []
        for task in TASKS:
            before = len(server.chat_requests())
            select_rules(library, task, "bench", [], client, cfg, None, NOW, cache=JudgeCache())
            calls.append(len(server.chat_requests()) - before)
        return {
            "size": size,
            "cold_load_ms": cold_load * 1000,
            "warm_load_ms": warm_load * 1000,
            "index_build_ms": build * 1000,
            "lexical_median_ms": statistics.median(lexical) * 1000,
            "lexical_max_ms": max(lexical) * 1000,
            "calls_per_task": statistics.mean(calls),
            "max_calls": max(calls),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=40, help="tasks timed per size")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--smoke", action="store_true", help="3 tasks, 10 and 100 rules")
    args = parser.parse_args(argv)
    if args.smoke:
        args.tasks, args.sizes = 3, [10, 100]
    results: dict[int, dict[str, float]] = {}
    print(
        f"{'rules':>6} {'lexical median':>15} {'lexical max':>12} {'calls/task':>11} "
        f"{'index build':>12} {'load cold':>10} {'load warm':>10}"
    )
    with ScriptedModelServer(default={"json": {"matches": []}}) as server:
        for size in args.sizes:
            r = results[size] = measure(size, server, args.tasks)
            print(
                f"{size:>6} {r['lexical_median_ms']:>12.2f} ms {r['lexical_max_ms']:>9.2f} ms "
                f"{r['calls_per_task']:>6.2f} (max {int(r['max_calls'])}) "
                f"{r['index_build_ms']:>7.0f} ms {r['cold_load_ms']:>7.0f} ms "
                f"{r['warm_load_ms']:>7.0f} ms",
                flush=True,
            )
    largest = max(results)
    lexical = results[largest]["lexical_median_ms"]
    calls = max(r["max_calls"] for r in results.values())
    figure = f"lexical stage at {largest:,} rules: {lexical:.2f} ms; model calls a task: {calls:g}"
    met = lexical <= 20 and calls <= 1
    return verdict(figure, "<= 20 ms at 10,000 rules; <= 1 call", met, args.smoke)


if __name__ == "__main__":
    sys.exit(main())

"""`loopd replay` on a home with 200 recorded runs and 50 live rules: its time (target 5 s).

The home is generated: runs of five loops over 30 days, each with its task, a ref for some,
an outcome, and cached semantic answers for a few tasks; the rules include one learned in
loop `app` whose pattern reaches into two other loops. The figure is the wall time of the
real `loopd replay --json` subprocess (interpreter start included) and the replay's own
time as it reports it. Usage: python bench/replay.py [--runs N] [--rules N] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from daemon.rules.judge_cache import JudgeCache, task_key  # noqa: E402
from daemon.rules.library import RuleLibrary  # noqa: E402
from daemon.rules.rulefile import Rule, Scope  # noqa: E402
from daemon.state.records import AttemptRecord, RunRecord, RunTrigger, make_run_id  # noqa: E402
from daemon.state.store import StateStore  # noqa: E402

# Each loop's task; {n} makes some tasks differ from run to run.
LOOPS = {
    "app": "Make the failing tests in tests/test_calc.py pass without weakening them.",
    "api": "Fix the API handler so that the integration tests pass (case {n}).",
    "web": "Update the web styles; run the visual tests when the layout changes ({n}).",
    "docs": "Proofread README.md and fix broken links in docs/ ({n}).",
    "cli": "Add a --verbose flag to the command line parser ({n}).",
}
CACHED_LOOP = "cli"  # a few of its tasks have a cached semantic answer naming the rule
LEARNED = "r-0001-run-the-tests-you-touched"


def learned_rule(repo: str) -> Rule:
    """The rule under study: learned in loop app, its pattern matches any task naming tests."""
    return Rule(
        id=LEARNED,
        kind="failure",
        trigger_intent="Tasks that make failing tests pass",
        trigger_patterns=[r"(?i)\btests?\b"],
        scope=Scope(repos=[repo]),
        source_run=make_run_id("app", datetime(2026, 11, 1, tzinfo=UTC)),
        source_task=LOOPS["app"],
        rule="Run `python3 -m pytest -q tests/test_calc.py` before you stop.",
        why="The agent stopped while `tests/test_calc.py` failed.",
        how_to_apply="Run it and read the failures.",
    )


def build_home(root: Path, now: datetime, runs: int = 200, rules: int = 50) -> dict[str, int]:
    """A home with `runs` recorded runs and `rules` live rules; returns the expected counts."""
    home = root / "home"
    for sub in ("loops", "rules/active", "rules/trial", "rules/rejected", "rules/retired"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    (home / "loopd.toml").write_text(f'[limits]\nworktrees = "{root / "worktrees"}"\n')
    store = StateStore(home / "state")
    library = RuleLibrary(home / "rules")
    library.add(learned_rule(str(root / "repo-app")), "trial")
    for n in range(2, rules + 1):
        library.add(
            Rule(
                id=f"r-{n:04d}-filler-{n}",
                trigger_intent=f"Tasks about subsystem {n}",
                trigger_patterns=[rf"(?i)\bsubsystem-{n}\b", rf"(?i)\bmodule_{n}\b"],
                rule=f"Read `module_{n}.py` first.",
                why=f"module_{n} was misread.",
                how_to_apply="Open it.",
            ),
            "active",
        )
    cache = JudgeCache(store.root / "cache" / "trigger-matches.json")
    stored = library.get(LEARNED).rule
    names = list(LOOPS)
    expected = {"runs": runs, "fired": 0, "unrelated": 0, "unrelated_fired": 0, "cached": 0}
    start = now - timedelta(days=29)
    for i in range(runs):
        loop = names[i % len(names)]
        started = start + timedelta(minutes=200 * i)
        text = LOOPS[loop].format(n=i % 7)
        ref = "refs/heads/main" if i % 3 == 0 else ""
        run = RunRecord(
            id=make_run_id(loop, started, i),
            loop=loop,
            task=text,
            trigger=RunTrigger(kind="schedule" if i % 2 else "push", ref=ref),
            started=started,
            finished=started + timedelta(minutes=12),
            outcome="succeeded" if i % 4 else "escalated",
            attempts=[AttemptRecord(n=1, started=started, checks_passed=bool(i % 4))],
            phase="idle",
        )
        store.save_run(run)
        subject = "\n".join([text] + ([ref] if ref else []))
        fires = "test" in text.lower()
        if loop == CACHED_LOOP and i % 7 == 3:
            cache.put(task_key(subject, loop, []), [(stored, True)])
            fires = True
            expected["cached"] += 1
        expected["fired"] += fires
        if loop != "app":
            expected["unrelated"] += 1
            expected["unrelated_fired"] += fires
    return expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rules", type=int, default=50)
    parser.add_argument("--smoke", action="store_true", help="20 runs, 5 rules: that it runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs, args.rules = 20, 5
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as tmp:
        expected = build_home(Path(tmp), now, args.runs, args.rules)
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "daemon.cli.main", "--home", f"{tmp}/home", "replay", "--json"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        wall = time.perf_counter() - started
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        return 1
    data = json.loads(proc.stdout)
    learned = next(r for r in data["rules"] if r["id"] == LEARNED)
    print(
        f"loopd replay: {data['runs']} runs x {len(data['rules'])} rules in {wall:.2f} s wall "
        f"(replay itself {data['seconds']:.2f} s; target 5 s)"
    )
    print(
        f"{LEARNED}: fires on {learned['fired']} runs (expected {expected['fired']}), breadth "
        f"{learned['breadth']:.0%} of {learned['unrelated_runs']} runs of other loops "
        f"(expected {expected['unrelated_fired']}/{expected['unrelated']}), "
        f"too broad: {learned['too_broad']}"
    )
    figure = f"loopd replay of {data['runs']} runs: {wall:.2f} s"
    return verdict(figure, "<= 5 s", wall <= 5, args.smoke)


if __name__ == "__main__":
    sys.exit(main())

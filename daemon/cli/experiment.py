"""`loopd replay` and `loopd experiment`: what the rules and the other supports are worth."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from daemon.cli.common import CommandError, home_of
from daemon.cli.jsonout import print_json
from daemon.cli.runs import foreground_loop, lock_loop
from daemon.clock import utc_now
from daemon.experiments.arms import arms_for, parse_supports
from daemon.experiments.report import ExperimentReport
from daemon.experiments.runner import Experiment, ExperimentRunner
from daemon.git.safe import Git, GitError
from daemon.processes import set_child_subreaper
from daemon.rules.library import RuleLibrary, StoredRule
from daemon.rules.replay import judge_cache, recorded_tasks, replay
from daemon.rules.rulefile import LIVE, RuleFileError
from daemon.rules.verifier import candidate_from_file
from daemon.runparts.services import RunServices
from daemon.runs.budget import loop_hold
from daemon.service.stopdeadline import agent_grace
from daemon.units import parse_duration

FIRINGS_SHOWN = 10


def _rules_to_replay(home: Any, rule: str | None) -> list[Any]:
    """The rule named by --rule (a candidate file or an id), else every live rule."""
    library = RuleLibrary(home.rules_dir)
    if rule is None:
        return library.rules(LIVE)
    path = Path(rule)
    if path.is_file():
        try:
            # The type: ignore below: "candidate" is a status of the experiment alone, not of the
            # rule library's folders.
            return [StoredRule(candidate_from_file(path), "candidate", path)]  # type: ignore[arg-type]
        except (OSError, RuleFileError) as exc:
            raise CommandError(f"{path}: {exc}") from None
    stored = library.find(rule)
    if stored is None:
        raise CommandError(
            f"--rule {rule}: no such file, and no rule with that id in rules/. "
            "Fix: give a rule file's path, or an id from `loopd rules list`"
        )
    return [stored]


def replay_cmd(args: argparse.Namespace) -> int:
    """Where rules would have fired on recorded runs' tasks, and how broadly (no model call)."""
    home = home_of(args)
    loaded = home.load()
    if not loaded.daemon_ok:
        raise CommandError("\n".join(str(e) for e in loaded.errors if e.file == home.config_path))
    try:
        window = parse_duration(args.since)
    except ValueError as exc:
        raise CommandError(f"--since: {exc}") from None
    rules = _rules_to_replay(home, args.rule)
    store = home.state(loaded.daemon.limits.events_rotate)
    started = time.perf_counter()
    since = utc_now() - window
    tasks = recorded_tasks(store, since)
    max_breadth = loaded.daemon.rules.max_breadth
    results = replay(rules, tasks, judge_cache(store), max_breadth)
    seconds = time.perf_counter() - started
    too_broad = bool(args.rule) and any(r.too_broad for r in results)
    if args.json:
        print_json(
            {
                "since": since,
                "runs": len(tasks),
                "seconds": round(seconds, 3),
                "max_breadth": max_breadth,
                "rules": [r.to_dict() for r in results],
            }
        )
        return 1 if too_broad else 0
    print(
        f"Replayed {len(tasks)} recorded runs since {since:%Y-%m-%d %H:%M}Z in {seconds:.2f} s "
        "(patterns and cached model answers; no model call)."
    )
    if not results:
        print("No rules to replay.")
    for result in results:
        _print_replay(result, rules)
    return 1 if too_broad else 0


def _print_replay(result: Any, rules: list[Any]) -> None:
    kind = next((s.rule.kind for s in rules if (s.rule.id or "(candidate)") == result.id), "")
    outcomes = ", ".join(f"{n} {o}" for o, n in sorted(result.outcomes.items())) or "none"
    print(
        f"{result.id} ({result.status}, {kind}): fires on {len(result.firings)} of "
        f"{result.runs} runs ({outcomes})"
    )
    others = f"loops other than {result.source_loop}" if result.source_loop else "any loop"
    if result.breadth is None:
        print(f"    breadth: no runs of {others} on record")
    else:
        print(
            f"    breadth {result.breadth:.0%}: {result.unrelated_fired} of "
            f"{result.unrelated_runs} runs of {others}"
            + (f"  ** {result.reason()}" if result.too_broad else "")
        )
    for firing in result.firings[:FIRINGS_SHOWN]:
        print(f"    {firing.run}  {firing.outcome}  {firing.why}")
    if len(result.firings) > FIRINGS_SHOWN:
        print(f"    ... {len(result.firings) - FIRINGS_SHOWN} more (--json lists every one)")


def _commit_of(loop: Any, at: str | None) -> str:
    name = at or loop.config.base
    try:
        return Git(loop.config.repo_path).out("rev-parse", "--verify", f"{name}^{{commit}}")
    except GitError as exc:
        raise CommandError(
            f"--at {name}: not a commit of {loop.config.repo_path}: {exc.stderr.strip()}"
        ) from None


def experiment_cmd(args: argparse.Namespace) -> int:
    """Paired runs of a loop with every support and without each one; a report with intervals."""
    home, loaded, loop = foreground_loop(args)
    without = _checked_without(args, loop)
    commit = _commit_of(loop, args.at)
    store = home.state(loaded.daemon.limits.events_rotate)
    hold = loop_hold(store, loaded.daemon, loop, utc_now())
    if hold is not None:
        # As `loopd once`: nothing started yet, so say so now rather than wait unseen.
        print(f"not run: {hold.why}; new runs of {loop.name} wait {hold.wait_text()}")
        return 1
    lock = lock_loop(store, loop)
    set_child_subreaper()
    # No notifications: an experiment never notifies or escalates.
    services = RunServices(home=home, config=loaded.daemon, store=store)
    parallel = loaded.daemon.limits.max_concurrent_runs
    experiment = Experiment(loop, commit, arms_for(without), args.repeat, parallel)

    def told(run: Any) -> None:
        arm = run.experiment.arm if run.experiment else "?"
        print(f"  {arm}: {run.id} {run.outcome} ({len(run.attempts)} attempts)", flush=True)

    def held(hold: Any) -> None:
        print(f"  waiting {hold.wait_text()}: {hold.why}", flush=True)

    runner = ExperimentRunner(services, experiment, on_run=told, on_hold=held)
    print(experiment.id, flush=True)
    print(
        f"{len(experiment.arms)} arms x {args.repeat} runs of {loop.name} at {commit[:12]}, "
        f"{parallel} at a time",
        flush=True,
    )
    grace = loaded.daemon.limits.shutdown_grace.total_seconds()
    presses: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        presses.append(signum)
        runner.stop(agent_grace(grace) if len(presses) == 1 else 0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        report = runner.run()
    finally:
        lock.release()
    _print_arms(report)
    print(f"report: {runner.path / 'report.md'}")
    if report.stopped:
        print(f"loopd: experiment stopped early: {report.stopped}", file=sys.stderr)
        return 1
    return 0


def _checked_without(args: argparse.Namespace, loop: Any) -> list[str]:
    """The supports `--without` leaves out, once the arguments and the loop allow an
    experiment (a CommandError otherwise)."""
    try:
        without = parse_supports(args.without)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if args.repeat < 1:
        raise CommandError("--repeat must be at least 1 (runs per arm)")
    if loop.config.isolation == "in-place":
        raise CommandError(
            f'loop {loop.name!r} uses isolation = "in-place": an experiment\'s runs work side '
            'by side from one commit. Fix: set isolation = "worktree" in its loop file'
        )
    return without


def _print_arms(report: ExperimentReport) -> None:
    """Each arm's successes, their 95% interval, tokens, nudges and escalations."""
    for arm in report.arms:
        low, high = arm.interval
        rate = "-" if arm.success_rate is None else f"{arm.success_rate:.0%}"
        print(
            f"{arm.arm}: {arm.succeeded}/{arm.runs} succeeded, {rate} "
            f"(95% interval {low:.0%} to {high:.0%}), {arm.tokens} tokens, "
            f"{arm.nudges} nudges, {arm.escalations} escalations"
        )

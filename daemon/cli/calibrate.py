"""`loopd calibrate`: measure how often the judge passes a bad attempt or fails a good one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from daemon.calibration.cases import CaseError
from daemon.calibration.field import field_figures, field_line, field_warning
from daemon.calibration.record import home_record_cases
from daemon.calibration.run import JudgeError, calibrate, resolve_judges, shipped_or
from daemon.cli.common import CommandError, home_of
from daemon.cli.jsonout import print_json
from daemon.clock import utc_now
from daemon.model.client import ModelUnavailable


def calibrate_cmd(args: argparse.Namespace) -> int:
    """Judge labelled attempts with the verifier; print false-pass and false-fail rates."""

    home = home_of(args)
    loaded = home.load()
    if not loaded.daemon_ok:
        raise CommandError("\n".join(str(e) for e in loaded.errors if e.file == home.config_path))
    if getattr(args, "field", False):
        return _field(home, loaded, args.json)
    if args.home_record and args.cases:
        raise CommandError("--cases and --home-record name two sets of cases: give one")
    if args.limit is not None and args.limit < 1:
        raise CommandError(f"--limit {args.limit}: give a whole number of cases, 1 or more")
    try:
        judges = resolve_judges(loaded.daemon, home.config_path, args.model or [])
        if args.home_record:
            cases, source = home_record_cases(home.state(), args.limit), "home record"
        else:
            cases, source = shipped_or(Path(args.cases) if args.cases else None, args.limit)
    except (JudgeError, CaseError) as exc:
        raise CommandError(str(exc)) from None
    if not cases:
        raise CommandError(
            "no labelled attempts to judge: the home's record has no attempt whose outcome is "
            "known yet; run `loopd calibrate` without --home-record to use the shipped set"
        )

    def progress(profile: str, done: int, total: int) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"\r{profile}: {done}/{total} cases judged", end="", file=sys.stderr)

    try:
        pair = not args.model and bool(loaded.daemon.verifier.second)
        outcomes = calibrate(judges, cases, source, args.threshold, home.state_dir, progress, pair)
    except ModelUnavailable as exc:
        raise CommandError(f"the judge did not answer, so nothing was measured: {exc}") from None
    if args.json:
        print_json({"models": [o.figures.as_json() for o in outcomes]})
        return 0
    for outcome in outcomes:
        print(_render(outcome, source))
    return 0


def _render(outcome: Any, source: str) -> str:
    """One judge's figures as a few lines of text."""
    f, kept = outcome.figures, outcome.kept
    pass_low, pass_high = f.false_pass_ci
    fail_low, fail_high = f.false_fail_ci
    return "\n".join(
        [
            f"{f.model}: {f.cases} cases ({f.bad_cases} bad, {f.good_cases} good; {source}), "
            f"threshold {outcome.calibration.threshold}",
            f"  false-pass rate   {f.false_pass_rate:6.1%}  (95% CI {pass_low:.1%} to "
            f"{pass_high:.1%}): bad attempts the judge passed",
            f"  false-fail rate   {f.false_fail_rate:6.1%}  (95% CI {fail_low:.1%} to "
            f"{fail_high:.1%}): good attempts the judge failed",
            f"  agrees with checks {f.agreement_with_checks:5.1%}",
            f"  order disagreement {f.order_disagreement:5.1%}: cases whose verdict changed "
            "when the evidence came in the other order",
            f"  latency {f.latency_ms_mean:.0f} ms a call on average; {f.tokens} tokens",
            *(
                [f"  {f.invalid_replies} replies still invalid after a repair, scored 0 (fail)"]
                if f.invalid_replies
                else []
            ),
            f"  kept in {kept}",
        ]
    )


def _field(home: Any, loaded: Any, as_json: bool) -> int:
    """The judge in the field: landed runs it passed that a person reverted (its records as
    `loopd aftermath` last brought them up to date)."""
    store = home.state(loaded.daemon.limits.events_rotate)
    thresholds = {n: lp.config.critic_threshold for n, lp in loaded.loops.items()}
    figures = field_figures(store, loaded.daemon, thresholds, utc_now())
    warning = field_warning(figures)
    if as_json:
        print_json({"field": figures.model_dump(mode="json"), "warning": warning})
        return 0
    print(field_line(figures))
    if figures.reverted:
        print("  reverted: " + ", ".join(figures.reverted))
    if warning:
        print(f"warning: {warning}")
    return 0

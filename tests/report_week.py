"""A week of nights in a home's state/, for the HTML report's tests and its screenshot in docs/.

`build_week(tmp, now, nights)` writes runs (run.toml, attempt folders with diffstat.json),
rule files with their lifecycle events, escalations, and a git repository holding the
branches of some succeeded runs, from a plain description; the test counts from the same
description what each chart must draw.

`python3 -m tests.report_week docs/report-week.png` makes the screenshot the README shows.
"""

from __future__ import annotations

import json
import sys
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import tomli_w

from daemon.people.escalation import write_escalation
from daemon.rules.rulefile import Rule, dump_rule
from daemon.state.records import AttemptRecord, DiffStat, FileChange, RunRecord, RunTrigger
from daemon.state.store import StateStore
from tests.helpers import git, make_home, make_repo

# The text of a run's reason that a page must show as text, never as markup.
HOSTILE = '</td></table><script>document.title="pwned"</script><img src=x onerror="alert(1)">[bold]'


@dataclass
class RunSpec:
    night: int  # days before now's date: the evening the night began
    hour: int  # UTC hour; 12-23 on that evening, 0-11 the next morning
    loop: str
    outcome: str
    attempts: int = 1
    tokens: int = 0
    cost: float = 0.0
    branch_kept: bool = True  # the run's branch still exists (succeeded runs)
    landed: bool | None = None
    reason: str = ""
    cause: str = ""  # run.toml's `cause` (a daemon.state.causes.Cause value), or none
    task: str = ""  # the run's task; "" for "The nightly task of LOOP."


@dataclass
class RuleSpec:
    id: str
    status: str  # where the file is now
    created: int  # days before now
    moves: list[tuple[int, str, str, str]] = field(default_factory=list)  # (days, event, from, to)
    kind: str = "failure"


def run_start(now: datetime, spec: RunSpec) -> datetime:
    evening = (now - timedelta(days=spec.night)).replace(hour=0, minute=0, second=0, microsecond=0)
    day = evening if spec.hour >= 12 else evening + timedelta(days=1)
    return day.replace(hour=spec.hour, minute=7)


def build_week(
    tmp: Path, now: datetime, runs: list[RunSpec], rules: list[RuleSpec]
) -> tuple[Path, Path, list[RunRecord]]:
    """A home and a repository under `tmp` holding `runs` and `rules`; returns both and the runs."""
    home = make_home(tmp / "home", "[limits]\nmax_concurrent_runs = 1\n")
    repo = make_repo(tmp / "repo", {"app.py": "print('hi')\n", "tests/test_app.py": "x = 1\n"})
    store = StateStore(home / "state")
    records = []
    for i, spec in enumerate(runs):
        started = run_start(now, spec)
        run_id = f"{started:%Y%m%dT%H%M%SZ}-{spec.loop}-{i:04x}"
        attempts = []
        for n in range(1, spec.attempts + 1):
            passed = spec.outcome == "succeeded" and n == spec.attempts
            attempts.append(
                AttemptRecord(
                    n=n,
                    started=started + timedelta(minutes=10 * (n - 1)),
                    finished=started + timedelta(minutes=10 * n - 1),
                    exit_code=0,
                    checks_passed=passed,
                    score=8 if passed else 4,
                    verdict="the checks pass" if passed else "the checks fail",
                    judged=True,
                    tokens=spec.tokens // spec.attempts,
                )
            )
            folder = store.attempt_dir(run_id, n)
            stat = DiffStat(
                files=[FileChange(path="app.py", added=3 * n, removed=n)],
                total_files=1,
                added=3 * n,
                removed=n,
            )
            (folder / "diffstat.json").write_text(stat.model_dump_json())
        branch = f"loopd/{spec.loop}/{run_id}"
        record = RunRecord(
            id=run_id,
            loop=spec.loop,
            task=spec.task or f"The nightly task of {spec.loop}.",
            trigger=RunTrigger(kind="schedule", reason="scheduled", ts=started),
            started=started,
            finished=started + timedelta(minutes=10 * spec.attempts),
            outcome=spec.outcome,  # type: ignore[arg-type]
            reason=spec.reason or f"{spec.outcome} after {spec.attempts} attempt(s)",
            cause=spec.cause or None,  # type: ignore[arg-type]
            branch=branch,
            tokens=spec.tokens,
            cost_usd=spec.cost,
            attempts=attempts,
            phase="idle",
            repo=str(repo),
        )
        store.save_run(record)
        if spec.landed is not None:
            # As a later loopd writes it: a top-level key of run.toml.
            path = store.run_dir(run_id) / "run.toml"
            data = tomllib.loads(path.read_text())
            data["landed"] = spec.landed
            path.write_text(tomli_w.dumps(data))
        if spec.outcome == "succeeded" and spec.branch_kept:
            git(repo, "branch", branch)
        if spec.outcome in ("escalated", "error", "refused"):
            write_escalation(store, record, record.finished or started)
        records.append(record)
    events = []
    for rule in rules:
        created = now - timedelta(days=rule.created)
        text = dump_rule(
            Rule(
                id=rule.id,
                kind=rule.kind,  # type: ignore[arg-type]
                created=created,
                rule=f"Rule {rule.id}.",
                why="Because a run showed it.",
                how_to_apply="Do it.",
            )
        )
        folder = home / "rules" / rule.status
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{rule.id}.md").write_text(text)
        for days, kind, before, to in rule.moves:
            ts = (now - timedelta(days=days)).astimezone(UTC)
            event = {"ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "type": kind, "loop": "app"}
            event.update(run=None, rule=rule.id, kind=rule.kind)
            if before:
                event["from"] = before
            if to:
                event["to"] = to
            events.append(event)
    events.sort(key=lambda e: e["ts"])
    with (home / "state" / "events.jsonl").open("a") as fh:
        for event in events:
            fh.write(json.dumps(event) + "\n")
    return home, repo, records


def realistic_week(now: datetime) -> tuple[list[RunSpec], list[RuleSpec]]:
    """Three loops over seven nights, as a person might see them."""
    runs: list[RunSpec] = []
    plan = {
        "app": [
            "succeeded",
            "escalated",
            "succeeded",
            "succeeded",
            "succeeded",
            "escalated",
            "succeeded",
        ],
        "docs": [
            "succeeded",
            "succeeded",
            "cancelled",
            "succeeded",
            "succeeded",
            "succeeded",
            "succeeded",
        ],
        "review": [
            "succeeded",
            "succeeded",
            "succeeded",
            "interrupted",
            "succeeded",
            "succeeded",
            "error",
        ],
    }
    for loop, outcomes in plan.items():
        for night, outcome in zip(range(7, 0, -1), outcomes, strict=True):
            attempts = {"succeeded": 1 + (night % 3 == 0) + (loop == "app" and night % 2 == 0)}.get(
                outcome, 3 if outcome == "escalated" else 1
            )
            tokens = 0 if outcome == "cancelled" else 40_000 * attempts + 9_000 * night
            runs.append(
                RunSpec(
                    night=night,
                    hour={"app": 1, "docs": 2, "review": 23}[loop],
                    loop=loop,
                    outcome=outcome,
                    attempts=attempts,
                    tokens=tokens,
                    cost=round(tokens * 0.0000021, 4),
                    branch_kept=night <= 3,
                )
            )
    runs.append(
        RunSpec(night=2, hour=14, loop="app", outcome="succeeded", tokens=52_000, cost=0.11)
    )
    rules = [
        RuleSpec("r-0001-grep-count-is-not-a-line-number", "active", 30),
        RuleSpec("r-0002-a-stub-file-has-nothing-to-review", "active", 30),
        RuleSpec("r-0003-cite-only-lines-that-exist", "active", 30),
        RuleSpec(
            "r-0010-run-the-migrations-first",
            "active",
            6,
            [(6, "rule_accepted", "", "trial"), (3, "rule_promoted", "trial", "active")],
        ),
        RuleSpec("r-0011-keep-the-fixture-order", "trial", 5, [(5, "rule_accepted", "", "trial")]),
        RuleSpec(
            "r-0012-do-not-mock-the-clock",
            "retired",
            5,
            [(5, "rule_accepted", "", "trial"), (2, "rule_demoted", "trial", "retired")],
        ),
        RuleSpec("r-0013-be-careful", "rejected", 4, [(4, "rule_rejected", "", "rejected")]),
        RuleSpec("r-0014-pin-the-lockfile", "trial", 1, [(1, "rule_accepted", "", "trial")]),
    ]
    return runs, rules


def main(out: Path) -> None:
    import subprocess
    import tempfile

    from tests.chromium import screenshot
    from tests.helpers import loopd

    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="loopd-") as tmp:
        runs, rules = realistic_week(now)
        home, _, _ = build_week(Path(tmp), now, runs, rules)
        page = Path(tmp) / "report.html"
        proc = loopd(home, "report", "--html", str(page), env={"TZ": "UTC"})
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        shot = Path(tmp) / "shot.png"
        screenshot(page, shot, size=(1000, 2400))
        out.write_bytes(shot.read_bytes())
        subprocess.run(["ls", "-la", str(out)], check=False)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

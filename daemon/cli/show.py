"""`loopd runs` and `loopd show RUN_ID`: the record of runs, queued, parked and past."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from daemon.cli.common import CommandError, console, engine_control, home_of
from daemon.cli.engine_views import engine_record, show_runs
from daemon.cli.jsonout import print_json
from daemon.cli.runview import runs_table
from daemon.clock import utc_now
from daemon.landing.branches import HandMerges
from daemon.people.digest import checks_word
from daemon.people.landstate import landing_state
from daemon.people.terminal import clean
from daemon.people.terminal import markup as m
from daemon.state.agentrecords import read_decisions, read_evidence
from daemon.state.pruned import PrunedRun, find_pruned, newest_pruned
from daemon.state.records import RunRecord
from daemon.state.store import UnreadableFile


def runs(args: argparse.Namespace) -> int:
    """List runs: queued and parked ones first, then the rest, newest first."""
    home = home_of(args)
    loaded = home.load()  # read once: which engine, and how events rotate
    control = engine_control(home, loaded)
    if control is not None:  # the engine holds every machine's runs
        return show_runs(control, args)
    store = home.state(loaded.daemon.limits.events_rotate)
    if args.loop and not (home.loops_dir / f"{args.loop}.toml").exists():
        if not store.run_ids(args.loop) and not newest_pruned(store.root, args.loop, 1):
            raise CommandError(f"unknown loop {args.loop!r}: no loop file and no runs")
    queued = [p for p in store.load_queue().pending if args.loop in (None, p.loop)]
    queued = [p for p in queued if not (store.run_dir(p.id) / "run.toml").exists()]
    parked = _parked_runs(store, args.loop)
    shown = {r.id for r in parked}
    records = []
    for run in store.iter_runs(args.loop):
        if run.id not in shown:
            records.append(run)
        if len(records) >= args.limit:
            break
    _notice_hand_merges(store, records)
    # Then what retain_days folded away, newest first: older than every run still kept.
    room = args.limit - len(records)
    listed = {r.id for r in records}
    pruned = [p for p in newest_pruned(store.root, args.loop, max(room, 0)) if p.run not in listed]
    if args.json:
        print_json(
            [_queued_summary(p) for p in queued]
            + [_run_summary(r) for r in parked]
            + [_run_summary(r) for r in records]
            + [_pruned_summary(p) for p in pruned]
        )
        return 0

    rows: list[tuple[str, str, str, str, str, str]] = []
    for p in queued:
        merged = f", {p.merged_count} merged" if p.merged_count else ""
        queued_at = f"queued {p.queued_at:%Y-%m-%d %H:%M}Z{merged}"
        rows.append((p.id, p.trigger.kind, "queued", "0", "-", queued_at))
    for r in [*parked, *records]:
        last = r.attempts[-1] if r.attempts else None
        reason = r.reason
        resume_at = getattr(r, "resume_at", None)
        if r.phase == "waiting":
            parked_until = f"parked until {resume_at:%Y-%m-%d %H:%M}Z" if resume_at else "parked"
            reason = "; ".join(part for part in (parked_until, reason) if part)
        if r.outcome == "succeeded":
            reason = "; ".join(part for part in (reason, landing_state(r).line()) if part)
        score = "-" if last is None or last.score is None else str(last.score)
        rows.append(
            (r.id, r.trigger.kind, r.outcome or r.phase, str(len(r.attempts)), score, reason)
        )
    for p in pruned:
        reason = "; ".join(part for part in (f"pruned {p.pruned:%Y-%m-%d}", p.reason) if part)
        rows.append((p.run, p.trigger, p.outcome or "-", str(p.attempts), "-", reason))
    out = console()
    out.print(runs_table(f"runs in {home.root}", rows, out.width))
    return 0


def _pruned_summary(p: PrunedRun) -> dict[str, Any]:
    """A pruned run with the keys of `_run_summary`, phase `pruned`."""
    landing = (
        {"state": "landed", "how": p.landed, "why": "", "run": ""}
        if p.landed
        else {"state": "none", "how": "", "why": "the run was pruned", "run": ""}
    )
    return {
        "run": p.run,
        "id": p.run,
        "loop": p.loop,
        "trigger": p.trigger,
        "started": p.started,
        "finished": p.finished,
        "outcome": p.outcome,
        "phase": "pruned",
        "reason": p.reason,
        "attempts": p.attempts,
        "branch": "" if p.branch_deleted else p.branch,
        "tokens": p.tokens,
        "landing": landing,
        "pruned": p.pruned,
    }


def _show_pruned(p: PrunedRun, as_json: bool) -> int:
    """`loopd show` of a run retain_days folded away: what its line keeps."""
    if as_json:
        print_json({**p.model_dump(mode="json"), "phase": "pruned"})
        return 0
    from rich.panel import Panel

    branch = p.branch or "-"
    if p.branch and p.branch_deleted:
        branch += " (deleted)"
    head = [
        p.line(),
        f"loop: {p.loop}",
        f"task: {p.task}",
        f"trigger: {p.trigger} {p.trigger_reason}".rstrip(),
        f"started: {p.started or '-'}   finished: {p.finished or '-'}",
        f"outcome: {p.outcome or '-'}   {p.reason}",
        f"attempts: {p.attempts}   branch: {branch}   tokens: {p.tokens}",
        f"landing: {f'landed ({p.landed})' if p.landed else 'not landed'}",
    ]
    console().print(Panel(m("\n".join(head)), title=m(p.run)))
    return 0


def _notice_hand_merges(store: Any, records: list[Any]) -> None:
    """Runs whose branch a person merged by hand are recorded landed before they are shown."""
    hands = HandMerges(store, utc_now())  # each repository's branches read once
    for run in records:
        if run.outcome == "succeeded" and not run.landed:
            hands.notice(run)


def _parked_runs(store: Any, loop: str | None) -> list[Any]:
    """Runs parked in phase `waiting` (a quota, a budget): live runs whose record says so."""
    out = []
    for run_id in store.live_runs():
        try:
            run = store.load_run(run_id)
        except (FileNotFoundError, UnreadableFile):
            continue
        if run.phase == "waiting" and loop in (None, run.loop):
            out.append(run)
    return out


def _queued_summary(pending: Any) -> dict[str, Any]:
    return {
        "run": pending.id,
        "id": pending.id,  # the same as `run`, kept for scripts written before it
        "loop": pending.loop,
        "trigger": pending.trigger.kind,
        "started": None,
        "finished": None,
        "outcome": None,
        "phase": "queued",
        "reason": pending.trigger.reason,
        "queued_at": pending.queued_at,
        "merged": pending.merged_count,
        "attempts": 0,
        "branch": "",
        "tokens": 0,
        "landing": {"state": "none", "how": "", "why": "the run has not started", "run": ""},
    }


def _run_summary(run: Any) -> dict[str, Any]:
    return {
        "run": run.id,
        "id": run.id,  # the same as `run`, kept for scripts written before it
        "loop": run.loop,
        "trigger": run.trigger.kind,
        "started": run.started,
        "finished": run.finished,
        "outcome": run.outcome,
        "phase": run.phase,
        "reason": run.reason,
        "attempts": len(run.attempts),
        "branch": run.branch,
        "tokens": run.tokens,
        "landing": _landing(run),
    }


def _landing(run: Any) -> dict[str, str]:
    return landing_state(run).model_dump()


def show(args: argparse.Namespace) -> int:
    """Show one run: trigger, attempts with checks, score, verdict, feedback; --diff: changes."""
    home = home_of(args)
    loaded = home.load()  # read once: how events rotate, and which engine
    store = home.state(loaded.daemon.limits.events_rotate)

    control = engine_control(home, loaded)
    if control is not None:  # the engine holds every machine's runs
        run = engine_record(control, args.run_id)
    elif not (store.run_dir(args.run_id) / "run.toml").exists():
        pruned = find_pruned(store.root, args.run_id)
        if pruned is None:
            raise CommandError(f"unknown run {args.run_id!r}; `loopd runs` lists them")
        if args.diff:
            raise CommandError(f"run {args.run_id} was {pruned.line()}, its diff with them")
        return _show_pruned(pruned, args.json)
    else:
        try:
            run = store.load_run(args.run_id)
        except UnreadableFile as exc:
            raise CommandError(f"{exc}; the file is left as it is", code=1) from None
        _notice_hand_merges(store, [run])
    if args.diff:
        return _show_diff(store, run, args.attempt)
    if args.json:
        print_json({"run": run.id, **run.model_dump(mode="json")})
        return 0
    from rich.panel import Panel
    from rich.table import Table

    out = console()
    head = _head_lines(run)
    out.print(Panel(m("\n".join(head)), title=m(run.id)))
    table = Table(show_lines=True)
    for col in ("#", "exit", "nudges", "stalls", "checks", "score", "verdict", "feedback"):
        table.add_column(col)
    for a in run.attempts:
        table.add_row(
            str(a.n),
            "-" if a.exit_code is None else str(a.exit_code),
            str(a.nudges),
            m(", ".join(s.kind for s in a.stalls) or "-"),
            checks_word(a.checks_passed),
            "-" if a.score is None else str(a.score),
            m(a.verdict + ("".join(f"\n! {v}" for v in a.violations))),
            m(a.feedback),
        )
    out.print(table)
    _show_records(out, store.run_dir(run.id))
    if run.attempts:
        # Whole lines: a wrapped RUN_ID cannot be copied.
        for hint in (
            f"what the agent did: loopd logs {run.id}",
            f"its changes: loopd show {run.id} --diff",
        ):
            out.print(hint, markup=False, highlight=False, soft_wrap=True)
    return 0


def _show_records(out: Any, run_dir: Any) -> None:
    """What the agent recorded through its tools: each claim with what loopd saw, decisions."""
    from rich.panel import Panel

    lines = []
    for item in read_evidence(run_dir):
        status = "timed out" if item.timed_out else f"exit {item.exit_code}"
        verdict = "REFUTED" if item.refuted else "holds"
        where = f"{status}, attempt {item.attempt}, {item.commit[:12]}"
        lines.append(f"[{verdict}] {clean(item.claim)}\n    $ {clean(item.command)}   ({where})")
    if lines:
        out.print(Panel(m("\n".join(lines)), title="the agent's evidence (evidence.jsonl)"))
    decisions = read_decisions(run_dir).strip()
    if decisions:
        out.print(Panel(m(clean(decisions)), title="the agent's decisions (decisions.md)"))


def _head_lines(run: RunRecord) -> list[str]:
    """The lines of the run's panel: loop, task, trigger, times, outcome, branch, landing,
    and its retry, park and rules when it has them."""
    merged = max(run.trigger.merged_count, len(run.trigger.merged))
    head = [
        f"loop: {run.loop}",
        f"task: {run.task.strip()}",
        f"trigger: {run.trigger.kind} {run.trigger.reason}".rstrip()
        + (f" ({merged} merged)" if merged else ""),
        f"started: {run.started}   finished: {run.finished or '-'}",
        f"outcome: {run.outcome or run.phase}   {run.reason}",
        f"branch: {run.branch or '-'}   tokens: {run.tokens}"
        + (f"   cost: ${run.cost_usd:.4f}" if run.cost_usd else ""),
        f"landing: {landing_state(run).line()}",
    ]
    if run.retry_not_run:
        head.append(f"its retry could not run: {run.retry_not_run}")
    if run.phase == "waiting" and run.resume_at and run.park:
        head.append(
            f"parked on the usage limit of agent profile {run.park.profile!r} until "
            f"{run.resume_at}: {run.park.message[-200:]}"
        )
    if run.waited:
        head.append(f"parked {run.waited}s in all on usage limits")
    if run.rules_fired:
        head.append("rules fired: " + ", ".join(run.rules_fired))
    return head


def _show_diff(store: Any, run: Any, only: int | None) -> int:
    """Each attempt's diff.patch (what loopd committed of it), control sequences removed."""
    attempts = [a.n for a in run.attempts if only is None or a.n == only]
    if only is not None and not attempts:
        raise CommandError(f"run {run.id} has no attempt {only}")
    styled = sys.stdout.isatty()
    out = console() if styled else None
    for n in attempts:
        path = store.run_dir(run.id) / f"attempt-{n}" / "diff.patch"
        header = f"# attempt {n}: {path}"
        if not path.exists() or path.stat().st_size == 0:
            print(f"{header}\n# (no changes)", flush=True)
            continue
        print(header, flush=True)
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                line = clean(raw.rstrip("\n"))
                if out is None:
                    sys.stdout.write(line + "\n")
                    continue
                from rich.text import Text

                style = ""
                if line.startswith(("+++", "---", "diff --git", "index ")):
                    style = "bold"
                elif line.startswith("+"):
                    style = "green"
                elif line.startswith("-"):
                    style = "red"
                elif line.startswith("@@"):
                    style = "cyan"
                out.print(Text(line, style=style), soft_wrap=True, highlight=False)
    sys.stdout.flush()
    return 0

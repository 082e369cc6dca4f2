"""`loopd escalations list|show|resolve`: runs handed to a person."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.cli.common import CommandError, engine_control, home_of
from daemon.cli.engine_views import report_routed
from daemon.cli.jsonout import print_json
from daemon.cli.plainescalations import print_list, print_shown
from daemon.cli.queued import report_run_id
from daemon.clock import utc_now
from daemon.people.escalation import (
    AlreadyResolved,
    Escalation,
    EscalationNotFound,
    list_escalations,
    load_escalation,
    resolve,
)
from daemon.state.events import EventTail


def _store(args: argparse.Namespace):  # noqa: ANN202 - StateStore
    return home_of(args).state()


def _not_found(run_id: str, store: Any = None) -> CommandError:
    held_by = _counted_in(store, run_id) if store is not None else ""
    if held_by:
        return CommandError(
            f"run {run_id} escalated while escalation {held_by} of the same task was open, "
            f"so it counts in that one. Fix: `loopd escalations show {held_by}`"
        )
    return CommandError(
        f"no escalation for run {run_id!r} (no state/escalations/{run_id}.md). "
        "Fix: `loopd escalations list --all` shows the run ids that have one"
    )


def _counted_in(store: Any, run_id: str) -> str:
    """The escalation a repeat run counts in ("" when none, or no such run)."""
    if "/" in run_id or run_id.startswith("."):
        return ""
    try:
        run = store.load_run(run_id)
    except Exception:  # noqa: BLE001 - only a better message is at stake
        return ""
    return run.escalation if run.escalation != run_id else ""


def list_escalations_cmd(args: argparse.Namespace) -> int:
    """List the escalations waiting for a person (--all: resolved ones too)."""
    home = home_of(args)
    loaded = home.load()  # read once: which engine, and how events rotate
    control = engine_control(home, loaded)
    if control is not None:  # the home answers through the engine, from any machine
        reply = control.escalations({"action": "list", "all": getattr(args, "all", False)})
        items = [Escalation.model_validate(item) for item in reply.get("items", [])]
    else:
        items = list_escalations(home.state(loaded.daemon.limits.events_rotate))
    if not getattr(args, "all", False):
        items = [e for e in items if e.is_open]
    if getattr(args, "json", False):
        print_json([e.model_dump(mode="json") for e in items])
        return 0
    print_list([e.model_dump() for e in items], getattr(args, "all", False))
    return 0


def show_escalation_cmd(args: argparse.Namespace) -> int:
    """Show one escalation file: what happened and what to do next."""
    control = engine_control(home_of(args))
    if control is not None:
        reply = control.escalations({"action": "show", "run_id": args.run_id})
        if reply.get("error"):
            raise _not_found(args.run_id)
        meta, text = Escalation.model_validate(reply["meta"]), reply["text"]
    else:
        store = _store(args)
        try:
            meta, text = load_escalation(store, args.run_id)
        except EscalationNotFound:
            raise _not_found(args.run_id, store) from None
    if args.json:
        data: dict[str, Any] = meta.model_dump(mode="json")
        data["text"] = text
        print_json(data)
        return 0

    print_shown(text)
    return 0


def resolve_escalation_cmd(args: argparse.Namespace) -> int:
    """Resolve an escalation; --retry queues a new run whose prompt carries --note."""
    home = home_of(args)
    control = engine_control(home)
    if control is not None and args.verdict:
        raise CommandError(
            "--verdict is recorded in the home's own state/escalations/ only (the local "
            "engine); resolve without it here"
        )
    if control is not None:
        request = {"action": "resolve", "run_id": args.run_id, "note": args.note or ""}
        reply = control.escalations({**request, "retry": args.retry})
        if reply.get("error") == "not_found":
            raise _not_found(args.run_id)
        if reply.get("error"):
            raise CommandError(reply.get("message") or reply["error"], 1)
        print(f"resolved {args.run_id}", flush=True)
        if reply.get("trigger"):
            loop = reply.get("loop") or ""
            return report_routed(control, loop, control.routed(loop, reply["trigger"]))
        return 0
    store = home.state()
    now = utc_now()
    tail = EventTail(store.events.path)  # from before the retry exists: its answer is seen
    try:
        by = getattr(args, "by", "")  # the console says who; the command line does not
        note = args.note or ""
        trigger = resolve(store, args.run_id, now, note, args.retry, args.verdict or "", by)
    except EscalationNotFound:
        raise _not_found(args.run_id, store) from None
    except AlreadyResolved as exc:
        raise CommandError(str(exc), 1) from None
    print(f"resolved {args.run_id}", flush=True)
    if trigger is not None:
        return report_run_id(home, tail, trigger.id, trigger.loop)
    return 0

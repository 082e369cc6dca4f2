"""What `loopd status` shows, built from two things: the configuration's facts (a JSON-able
dict: `config_facts` of cli/daemon.py, or its cache read by the plain path) and a
`StatusReader` of `state/` (the models' one in cli/daemon.py, the plain one in
cli/plainstatus.py). One builder for both paths, so they cannot say different things;
it imports no model."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from daemon.clock import utc_now
from daemon.plain.digest import file_digest
from daemon.plain.overlap import overlaps


class StatusReader(Protocol):
    """What `status` reads of `state/`, in the shapes the builder takes."""

    def status(self) -> dict[str, Any]:
        """status.toml: `daemon` (its values as read), `loops` (each as JSON), `verifier` and
        `budget` (as JSON, or None)."""
        ...

    def paused(self) -> set[str]: ...

    def newest(self, loops: set[str]) -> dict[str, str]:
        """The newest run id of each loop in `loops` (of others too, if at hand)."""
        ...

    def newest_finished(self, loop: str, newest: str) -> tuple[str, str] | None:
        """(run id, outcome) of the loop's newest finished run."""
        ...

    def live(self) -> dict[str, tuple[str, str, int]]:
        """Each loop's live run, when no daemon runs: (phase, run id, attempts)."""
        ...

    def open_escalations(self) -> list[dict[str, Any]]:
        """The open escalations, oldest first: run, loop, task, count, latest_run."""
        ...

    def held(self, tasks: dict[str, str]) -> dict[str, str]:
        """For each loop (name -> task), the run of the open escalation holding its schedule."""
        ...

    def usage(self) -> dict[str, Any] | None: ...

    def has_escalation_files(self) -> bool: ...

    def landing_queues(self) -> list[dict[str, Any]]:
        """Each target's landing queue that holds a run: repo, target, runs (run_id, loop,
        step: queued, landing or moving), in the order they entered."""
        ...


def status_data(root: Path, facts: dict[str, Any], reader: StatusReader, pid: int | None) -> dict:
    """`status --json`: the daemon, each loop, the errors, escalations, the verifier, the
    budget, the home's size, the landing queues and the loops whose recent runs overlap."""
    status = reader.status()
    data: dict[str, Any] = {
        "home": str(root),
        "daemon": _daemon_info(status["daemon"], facts, pid),
        "loops": {},
        "errors": [e["text"] for e in facts["errors"]],
    }
    loops = facts["loops"]
    paused = reader.paused()
    newest = reader.newest(set(loops))
    # No daemon: a run under way is a `loopd once` (or one a dead daemon left).
    live = reader.live() if pid is None else {}
    names = set(loops) | (set(status["loops"]) if pid else set())
    for name in sorted(names):
        entry = status["loops"].get(name) if pid else None
        info = dict(entry) if entry is not None else {}
        if pid and entry is None:
            info["note"] = (
                "not loaded by the daemon yet; it reloads within seconds (`loopd reload`)"
            )
        if name in loops:
            info.setdefault("enabled", loops[name]["enabled"])
            info.setdefault("phase", "paused" if name in paused else "idle")
            if name in live:
                phase, run, attempts = live[name]
                info.update(phase=phase, run=run, attempt=attempts)
            if not info.get("last_run") and name in newest:
                last = reader.newest_finished(name, newest[name])
                if last is not None:
                    info["last_run"], info["last_outcome"] = last
        info["paused"] = name in paused
        _loaded_note(info, loops.get(name), entry)
        if info.get("loaded") is False:
            info["phase"] = "not-loaded"
        data["loops"][name] = info
    _unloaded_files(facts, data["loops"])
    has_files = reader.has_escalation_files()
    escalations = reader.open_escalations() if has_files else []
    data["open_escalations"] = len(escalations)
    if pid is not None:
        for part in ("verifier", "budget"):
            if status[part] is not None:
                data[part] = status[part]
    _schedules(reader, loops, data["loops"], has_files)
    for meta in escalations:  # oldest first: the newest wins
        if meta["loop"] in data["loops"]:
            data["loops"][meta["loop"]]["escalation"] = {
                "run": meta["run"],
                "count": meta["count"],
                "latest_run": meta["latest_run"],
            }
    _aftermath_parts(root, data)
    data["state"] = reader.usage()
    _landing_parts(root, reader, loops, data, utc_now())
    return data


def _landing_parts(
    root: Path, reader: StatusReader, loops: dict[str, Any], data: dict[str, Any], now: datetime
) -> None:
    """The landing queues, and the loops on one target whose recent runs changed the same
    files (plain/overlap.py)."""
    data["landing"] = [_queue_info(q) for q in reader.landing_queues()]
    data["overlaps"] = overlaps(root / "state", loops, now)


def _queue_info(queue: dict[str, Any]) -> dict[str, Any]:
    """A target's queue for `status`: the run landing now and the runs queued behind it."""
    runs = queue.get("runs", [])
    now = next((r for r in runs if r.get("step", "queued") != "queued"), None)
    return {
        "repo": queue.get("repo", ""),
        "target": queue.get("target", ""),
        "landing": now["run_id"] if now else "",
        "step": now.get("step", "") if now else "",
        "queued": [r["run_id"] for r in runs if r is not now],
    }


def _aftermath_parts(root: Path, data: dict[str, Any]) -> None:
    """The loops held at `land = "branch"` by reverts and the judge's field figures."""
    for name, hold in _land_holds(root).items():
        if name in data["loops"]:
            data["loops"][name]["land_held"] = hold
    field = _plain_toml(root / "state" / "calibration-field.toml")
    if field.get("landed"):
        data["judge_field"] = field


def _plain_toml(path: Path) -> dict[str, Any]:
    """A small state file as plain TOML; {} when none or cut by a crash (`loopd check` reads
    it with the models and says so)."""
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def _land_holds(root: Path) -> dict[str, Any]:
    """Loops held at `land = "branch"` by reverted landings (state/landholds.py), read plainly:
    each as `was`, `runs`, `escalation`, `since`."""
    loops = _plain_toml(root / "state" / "land-holds.toml").get("loops", {})
    return {
        name: {
            "was": str(hold.get("was", "")),
            "runs": [str(r) for r in hold.get("runs", [])],
            "escalation": str(hold.get("escalation", "")),
            "since": str(hold.get("since", "")),
        }
        for name, hold in loops.items()
        if isinstance(hold, dict)
    }


def _daemon_info(daemon: dict[str, Any], facts: dict[str, Any], pid: int | None) -> dict:
    """The daemon part of `status`: running or not, its version and times, warnings (the
    calibration's too), the sandbox runs get, the limits."""
    warnings = list(daemon["warnings"]) + facts["warnings"]
    # The daemon says which sandbox its runs get; without one, what a run would get now.
    sandbox = daemon["sandbox"] if pid is not None else ""
    if not sandbox:
        choice = facts["sandbox"]
        sandbox = choice["summary"]
        warnings = [w for w in (choice["warning"], choice["refusal"]) if w] + warnings
    return {
        "running": pid is not None,
        "pid": pid,
        "version": daemon["version"],
        "started": daemon["started"],
        "heartbeat": daemon["heartbeat"],
        "warnings": list(dict.fromkeys(warnings)),
        "sandbox": sandbox,
        "limits": facts["limits"],
    }


def _loaded_note(info: dict[str, Any], loop: dict[str, Any] | None, entry: Any) -> None:
    """Say when the running daemon has not loaded a loop file as it is on disk, and why."""
    if entry is None:
        return  # no daemon: the files are what runs next
    if not entry["loaded"]:
        why = " ".join(entry["error"].split()) or "its file does not load"
        info["note"] = f"not loaded: {why} (fix the file; the daemon reloads it)"
    elif entry["stale"]:
        info["note"] = "stale: its file does not load; the daemon runs its last good version"
    elif loop is not None and entry["digest"] != file_digest(Path(loop["path"])):
        info["note"] = "changed on disk; the daemon reloads it within seconds (`loopd reload`)"


def _unloaded_files(facts: dict[str, Any], loops: dict[str, dict[str, Any]]) -> None:
    """Loop files that do not load: a row of their own (phase `not-loaded`), with why."""
    for error in facts["errors"]:
        name = error["stem"]
        if not error["in_loops"] or name in loops:
            continue
        why = " ".join(error["text"].split())
        loops[name] = {
            "enabled": False,
            "phase": "not-loaded",
            "loaded": False,
            "error": error["text"],
            "note": f"not loaded: {why}",
            "paused": False,
        }
    for name in facts.get("unchecked", []):
        if name in loops:
            continue  # the running daemon has it, from before loopd.toml broke
        loops[name] = {
            "enabled": False,
            "phase": "not-loaded",
            "loaded": False,
            "error": "",
            "note": "not checked: loopd.toml does not load (its error is below)",
            "paused": False,
        }
    for name in sorted(loops):  # keep the rows in name order with the new ones in place
        loops[name] = loops.pop(name)


def _schedules(
    reader: StatusReader,
    loops: dict[str, dict[str, Any]],
    shown: dict[str, dict[str, Any]],
    has_files: bool,
) -> None:
    """Each scheduled loop's next fire in its own zone, or the escalation holding it back."""
    scheduled = {
        name: loop
        for name, loop in loops.items()
        if name in shown and loop["enabled"] and loop["schedule"]
    }
    # Only with escalations on disk: without them no schedule is held.
    held = {}
    if scheduled and has_files:
        held = reader.held({n: loop["task"] for n, loop in scheduled.items()})
    for name, loop in scheduled.items():
        info = shown[name]
        info["timezone"] = loop["timezone"]
        fire = info.get("next_fire")
        if fire:
            when = datetime.fromisoformat(fire) if isinstance(fire, str) else fire
            local = when.astimezone(ZoneInfo(loop["timezone"]))
            info["next_fire_local"] = f"{local:%a %d %b %H:%M} {local.tzname()}"
        if name in held:
            info["held_by"] = held[name]
    for name, info in shown.items():
        fire = info.get("next_fire")
        if fire and name not in scheduled:
            # A loop whose file does not load: the daemon fires it on its last good
            # configuration, whose zone this file cannot tell; UTC, said as the others are.
            when = datetime.fromisoformat(fire) if isinstance(fire, str) else fire
            info["next_fire_local"] = f"{when.astimezone(UTC):%a %d %b %H:%M} UTC"

"""`state/status.toml` of a home on Temporal: what the engine says of each loop, written as the
local daemon writes it (the verifier's reachability, the day's budget, holds and parks, the
loop files kept stale), every few seconds and when something changed."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any, get_args

import daemon as package
from daemon.sandbox.registry import choose
from daemon.service.holds import Holds
from daemon.service.status import HEARTBEAT_EVERY, StatusWrites, add_unloaded_loops
from daemon.service.verifier import VerifierWatch
from daemon.state.records import DaemonStatus, LoopStatus, Phase, StatusFile

__all__ = ["HEARTBEAT_EVERY", "EngineStatusBoard"]


class EngineStatusBoard:
    """Builds status.toml from the engine's view (the commands' own) and the home's state/."""

    def __init__(self, ctx: Any, control: Any, holds: Holds, started: datetime) -> None:
        self.ctx = ctx
        self.control = control  # daemon.engine.temporal.control.EngineControl
        self.holds = holds
        self.verifier = VerifierWatch(ctx)
        self.started = started
        self._writes = StatusWrites()

    async def write(self, client: Any, now: datetime) -> None:
        """Ask the engine, then rewrite status.toml when it changed or the heartbeat is due."""
        ctx = self.ctx
        self.control.loaded = ctx.config
        self.verifier.tick(now)
        view = await self.control._status(client)  # noqa: SLF001 - the commands' own view
        sandbox = choose(ctx.config.daemon.sandbox)
        warnings = [w for w in (sandbox.warning, sandbox.refusal) if w] + ctx.config.warnings
        held = self.holds.held(now)
        status = StatusFile(
            daemon=DaemonStatus(
                pid=os.getpid(),
                version=package.__version__,
                started=self.started,
                heartbeat=now,
                running=True,
                warnings=warnings,
                sandbox=sandbox.summary(),
            ),
            verifier=self.verifier.status(),
            budget=self.holds.budget_status(),
        )
        for name, info in view["loops"].items():
            status.loops[name] = self._loop(name, info, held.get(name))
        add_unloaded_loops(status, ctx.config.errors)
        self._writes.save(ctx, status)

    def _loop(self, name: str, info: dict[str, Any], hold: Any) -> LoopStatus:
        ctx = self.ctx
        phase = info.get("phase") or "idle"
        waiting_for = info.get("waiting_for") or (hold.why if hold else "")
        resume_at = _when(info.get("resume_at")) or (hold.until if hold else None)
        if hold is not None and hold.until is None:
            resume_at = None  # a refused login: the engine's next ask is no resume time
        if info.get("run") and phase == "waiting":  # a run parked on its agent's usage limit
            try:
                run = ctx.store.load_run(info["run"])
            except (OSError, ValueError):
                run = None
            if run is not None and run.park is not None:
                waiting_for = f"the usage limit of agent profile {run.park.profile!r}"
                resume_at = run.resume_at
        elif hold and phase == "queued":
            phase = "waiting"
        return LoopStatus(
            phase=phase if phase in _PHASES else "idle",
            run=info.get("run") or "",
            attempt=info.get("attempt") or 0,
            last_outcome=info.get("last_outcome") or "",
            last_run=info.get("last_run") or "",
            next_fire=_when(info.get("next_fire")),
            paused=bool(info.get("paused")),
            enabled=bool(info.get("enabled", True)),
            pending=info.get("pending") or 0,
            waiting_for=waiting_for,
            resume_at=resume_at,
            stale=name in ctx.files.stale,
            error=ctx.files.stale.get(name, ""),
            digest=ctx.files.digests.get(name, ""),
        )


_PHASES = set(get_args(Phase))


def _when(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else value or None

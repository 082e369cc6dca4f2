"""The Temporal engine: schedules and runs on a Temporal cluster, attempts on `loopd worker`s."""

from __future__ import annotations

from daemon.engine.base import Engine
from daemon.engine.temporal.control import EngineControl


class TemporalEngine(Engine):
    """`loopd run` is the home's process; `loopd worker` runs attempts on any machine."""

    kind = "temporal"

    def serve(self) -> int:
        from daemon.engine.temporal.service import serve

        return serve(self.home, "home")

    def work(self, queue: str | None, metrics: str = "") -> int:
        from daemon.engine.temporal.service import serve

        return serve(self.home, "worker", queue, metrics)

    def control(self) -> EngineControl:
        return EngineControl(self.home)

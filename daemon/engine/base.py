"""The engine: what runs a home's loops. One small interface, one module per kind."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from daemon.home import Home
    from daemon.state.records import RunRecord


class EngineError(Exception):
    """The engine cannot do what was asked; the message says why and what to do."""


# A Protocol, so the interface names no engine: each kind's view (temporal/control.py) has it.
class EngineControl(Protocol):
    """Where the commands read and act when it is not the home's own state/."""

    def status(self) -> dict[str, Any]: ...
    def runs(self, loop: str | None, limit: int) -> list[dict[str, Any]]: ...
    def record(self, run_id: str) -> RunRecord | str | None: ...
    def cancel(self, run_id: str) -> tuple[int, str]: ...
    def pause(self, loop: str, paused: bool) -> None: ...
    def trigger(
        self, loop: str, reason: str, wait: bool, emit: Any, force: bool = False
    ) -> RunRecord | str: ...
    def routed(self, loop: str, trigger_id: str) -> str: ...
    def escalations(self, request: dict[str, Any]) -> dict[str, Any]: ...


class Engine(ABC):
    """`loopd run` (`serve`), `loopd worker` (`work`), and where the commands read (`control`)."""

    kind: ClassVar[str]

    def __init__(self, home: Home) -> None:
        self.home = home

    @abstractmethod
    def serve(self) -> int:
        """`loopd run`: run the home's loops until SIGTERM; the exit code."""

    def work(self, queue: str | None, metrics: str = "") -> int:
        """`loopd worker`: run attempts for the home that owns the engine; /metrics at HOST:PORT."""
        raise EngineError(
            f'loopd worker needs [engine] kind = "temporal" in {self.home.config_path}; '
            "the local engine runs every attempt inside `loopd run`"
        )

    def control(self) -> EngineControl | None:
        """What `status`, `runs`, `show`, `cancel`, `pause`, `trigger` and `escalations` act
        on, when it is not this home's own state/ (None: the home's state/)."""
        return None

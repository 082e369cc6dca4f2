"""The engine: what runs a home's loops. One small interface, one module per kind."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from daemon.engine.temporal.control import EngineControl
    from daemon.home import Home


class EngineError(Exception):
    """The engine cannot do what was asked; the message says why and what to do."""


class Engine(ABC):
    """`loopd run` (`serve`), `loopd worker` (`work`), and where the commands read (`control`)."""

    kind: ClassVar[str]

    def __init__(self, home: Home) -> None:
        self.home = home

    @abstractmethod
    def serve(self) -> int:
        """`loopd run`: run the home's loops until SIGTERM; the exit code."""

    def work(self, queue: str | None) -> int:
        """`loopd worker`: run attempts for the home that owns the engine."""
        raise EngineError(
            f'loopd worker needs [engine] kind = "temporal" in {self.home.config_path}; '
            "the local engine runs every attempt inside `loopd run`"
        )

    def control(self) -> EngineControl | None:
        """What `status`, `runs`, `show`, `cancel`, `pause`, `trigger` and `escalations` act
        on, when it is not this home's own state/ (None: the home's state/)."""
        return None

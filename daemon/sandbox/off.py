"""No sandbox: the command runs as loopd's user with what that user can see and write."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from daemon.sandbox.base import Availability, Exposure, Launch, Sandbox


class OffSandbox(Sandbox):
    """Starts the command as it is; only its environment is loopd's choice."""

    name: ClassVar[str] = "off"
    confines: ClassVar[bool] = False

    @classmethod
    def availability(cls) -> Availability:
        return Availability(ok=True)

    def launch(self, argv: list[str], env: Mapping[str, str], exposure: Exposure) -> Launch:
        return Launch(argv=list(argv), env=dict(env))

"""`[engine]` of loopd.toml: where schedules and runs happen, and what to warn about it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from daemon.config.base import StrictModel, _queue_name
from daemon.units import duration

ENGINES = ("local", "temporal")


class EngineConfig(StrictModel):
    """`[engine]`: where scheduling and runs happen; `local` is everything in this process."""

    kind: Literal[ENGINES] = "local"  # type: ignore[valid-type]
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "loopd"
    remote: str = Field("", examples=["ssh://git.example.com/srv/loopd/{loop}.git"])
    heartbeat_timeout: duration("1s", "1h") = "60s"  # type: ignore[valid-type]
    tls_cert: str = Field("", examples=["engine/client.pem"])
    tls_key: str = Field("", examples=["engine/client.key"])
    tls_ca: str = Field("", examples=["engine/ca.pem"])
    api_key_file: str = Field("", examples=["engine/api-key"])

    _task_queue = field_validator("task_queue")(_queue_name)

    @field_validator("address")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f'{value!r} is not HOST:PORT, e.g. "127.0.0.1:7233"')
        return value

    @property
    def temporal(self) -> bool:
        return self.kind == "temporal"

    @property
    def secured(self) -> bool:
        """A client certificate or an API key authenticates loopd to the engine."""
        return bool(self.tls_cert or self.api_key_file)


def engine_warnings(home: Path, engine: EngineConfig) -> list[str]:
    """What a person should know about `[engine]`: an engine any agent could reach."""
    if not engine.temporal or engine.secured:
        return []
    return [
        f"loopd.toml: [engine]: no tls_cert and no api_key_file, so the engine at "
        f"{engine.address} accepts anyone who can reach it, agents with network access "
        "included; loopd's own activities act only for runs this home started. Give the "
        "engine a client certificate or an API key (files in the home, hidden from agents)"
    ]

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

    kind: Literal[ENGINES] = Field(  # type: ignore[valid-type]
        "local", description="the engine"
    )
    address: str = Field(
        "127.0.0.1:7233",
        description="the Temporal frontend",
        json_schema_extra={"allowed": "`HOST:PORT`"},
    )
    namespace: str = Field(
        "default",
        description=(
            "one home per namespace: workflow ids are `loopd/LOOP` and `loopd/LOOP/RUN_ID`"
        ),
        json_schema_extra={"allowed": "a namespace of the cluster"},
    )
    task_queue: str = Field(
        "loopd",
        description=(
            "the home's own queue (its controllers, runs, rules, prompts, progress "
            "notes, escalations); the workers' queues are named after it: "
            '`loopd-NAME` for `runs_on = "NAME"`, `loopd-default` for loops without '
            "`runs_on`"
        ),
        json_schema_extra={"allowed": "letters, digits, `-`, `_`, `.`"},
    )
    remote: str = Field(
        "",
        examples=["ssh://git.example.com/srv/loopd/{loop}.git"],
        description=(
            "each attempt's commit is pushed here as branch `loopd/LOOP/RUN_ID`, so "
            "another worker can continue the run; the home fetches the branch into "
            "your repository when the run ends. Empty: the loop's own `repo`, which "
            "only workers on this machine can reach"
        ),
        json_schema_extra={
            "allowed": (
                "a git URL or path every worker can reach; `{loop}` is replaced by the loop's name"
            )
        },
    )
    heartbeat_timeout: duration("1s", "1h") = Field(  # type: ignore[valid-type]
        "60s",
        description=(
            "an attempt whose worker is silent this long (killed, machine gone) is "
            "`interrupted` and retried once on another worker. A server outage longer"
            " than this also interrupts running attempts"
        ),
    )
    tls_cert: str = Field(
        "",
        examples=["engine/client.pem"],
        description=("the client certificate (PEM) loopd presents to the engine; with `tls_key`"),
        json_schema_extra={"allowed": "a file; relative to the home"},
    )
    tls_key: str = Field(
        "",
        examples=["engine/client.key"],
        description="the client certificate's private key (PEM)",
        json_schema_extra={"allowed": "a file; relative to the home"},
    )
    tls_ca: str = Field(
        "",
        examples=["engine/ca.pem"],
        description=(
            "the CA that signed the server's certificate; empty: the system's CAs "
            "(TLS is on when any `tls_*` key or `api_key_file` is set)"
        ),
        json_schema_extra={"allowed": "a file; relative to the home"},
    )
    api_key_file: str = Field(
        "",
        examples=["engine/api-key"],
        description=(
            "a file holding an API key for the engine (Temporal Cloud), instead of a certificate"
        ),
        json_schema_extra={"allowed": "a file; relative to the home"},
    )

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

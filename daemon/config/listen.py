"""`[listen]` (the daemon's HTTP listener) and `[remotes.NAME]` (hosted repositories)."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import Field, field_validator

from daemon.config.base import StrictModel
from daemon.units import duration, size

# Every `# type: ignore[valid-type]` below: `size(...)`, `duration(...)` and the Literal of a
# registry build their types when the module loads, which a type checker cannot read as types.

REMOTE_KINDS = ("github", "gitea", "gitlab")
RemoteKind = Literal[REMOTE_KINDS]  # type: ignore[valid-type]
# The repository as its service names it in a push: GitLab allows nested groups.
REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _bind(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f'{value!r} is not HOST:PORT, e.g. "127.0.0.1:8787"')
    return value


class ListenConfig(StrictModel):
    """`[listen]`: present turns the listener on."""

    bind: str = Field(
        "127.0.0.1:8787",
        description="where the listener listens; keep it on loopback behind a proxy",
        json_schema_extra={
            "allowed": (
                "`HOST:PORT`, port 0 to 65535 (0: any free port, named by the event `listening`)"
            )
        },
    )
    max_body: size("1KB", "100MB") = Field(  # type: ignore[valid-type]
        "1MB", description="a delivery's body over this is refused with 413 before it is read whole"
    )
    rate_limit: int = Field(
        120,
        ge=1,
        le=1_000_000,
        description=(
            "deliveries per source address per minute (a token bucket); more are "
            "refused with 429. The address is the connection's peer; behind a proxy, name "
            "it in `trusted_proxies` so that the client's address it forwards is used"
        ),
    )  # deliveries per source address per minute
    trusted_proxies: list[str] = Field(
        [],
        examples=[["127.0.0.1", "::1"]],
        description=(
            "the reverse proxies whose `X-Forwarded-For` is believed: a delivery whose peer is "
            "one of them is counted (rate limit, events) under the last address of that header "
            "that is not a trusted proxy. Empty: the header is ignored, every delivery is its "
            "peer's"
        ),
        json_schema_extra={"allowed": "IP addresses or networks (`10.0.0.0/8`)"},
    )
    read_timeout: duration("1s", "5m") = Field(  # type: ignore[valid-type]
        "10s",
        description=(
            "a connection must send a request's headers, and then its whole body, within this; "
            "a slower one is closed (headers) or refused with 408 (body)"
        ),
    )
    ui: bool = Field(
        False,
        description=(
            "serve the console's pages (`loopd web`'s, docs/console.md) under `/ui/` of this "
            "listener: the same login token (`state/web-token`), cookie, CSRF and Origin checks; "
            "needs the `web` extra"
        ),
    )
    # Apart from `bind`: the home's daemon and a worker may share one loopd.toml on one machine.
    worker_bind: str = Field(
        "",
        description=(
            "where `loopd worker` (Temporal) serves its own `/metrics` and `/healthz`, counting "
            "the attempts it runs; `loopd worker --metrics HOST:PORT` overrides it. A `[listen]` "
            "with only this key draws no warning on the Temporal engine"
        ),
        examples=["127.0.0.1:9464"],
        json_schema_extra={"allowed": "`HOST:PORT`, or empty (none)"},
    )

    _bind = field_validator("bind")(_bind)

    @field_validator("trusted_proxies")
    @classmethod
    def _trusted_proxies(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(
                    f'{item!r} is not an IP address or network, e.g. "127.0.0.1" or "10.0.0.0/8"'
                ) from None
        return value

    @field_validator("worker_bind")
    @classmethod
    def _worker_bind(cls, value: str) -> str:
        return _bind(value) if value else value

    @property
    def host(self) -> str:
        return self.bind.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.bind.rpartition(":")[2])


class RemoteConfig(StrictModel):
    """`[remotes.NAME]`: a repository on a hosting service that loops follow."""

    kind: RemoteKind = Field(description='the service; Forgejo is `"gitea"`')
    repository: str = Field(
        examples=["owner/name"],
        description=(
            "the repository as the service's push names it (`repository.full_name`, "
            "GitLab's `project.path_with_namespace`), compared without case"
        ),
        json_schema_extra={"allowed": "`OWNER/NAME` (GitLab: `GROUP/SUBGROUP/NAME`)"},
    )
    clone_url: str = Field(
        examples=["https://github.com/owner/name.git"],
        description=(
            "what loopd fetches pushed commits from and polls with `git ls-remote`; "
            "your own git credentials apply"
        ),
        json_schema_extra={
            "allowed": "a URL git can fetch (`https://`, `ssh://`, `git@host:path`, `file://`)"
        },
    )
    secret_env: str = Field(
        "",
        examples=["LOOPD_GITHUB_SECRET"],
        description=(
            "the variable holding the webhook secret; unset or empty, every delivery "
            "for this remote is refused (403). Polling needs none"
        ),
        json_schema_extra={"allowed": "an environment variable name"},
    )

    @field_validator("repository")
    @classmethod
    def _repository(cls, value: str) -> str:
        if not REPOSITORY.match(value):
            raise ValueError(f"{value!r} is not OWNER/NAME (GitLab: GROUP/SUBGROUP/NAME)")
        return value

    @field_validator("clone_url")
    @classmethod
    def _clone_url(cls, value: str) -> str:
        if not value.strip() or any(c.isspace() or ord(c) < 32 for c in value):
            raise ValueError("is empty or holds a space or a control character")
        if value.startswith("-"):
            raise ValueError("starts with '-': git would read it as an option")
        return value

    @field_validator("secret_env")
    @classmethod
    def _secret_env(cls, value: str) -> str:
        if value and not ENV_NAME.match(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

"""`[listen]` (the daemon's HTTP listener) and `[remotes.NAME]` (hosted repositories)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from daemon.config.base import StrictModel
from daemon.units import size

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
            "refused with 429. Behind a proxy every delivery comes from the proxy's "
            "address"
        ),
    )  # deliveries per source address per minute

    _bind = field_validator("bind")(_bind)

    @property
    def host(self) -> str:
        return self.bind.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.bind.rpartition(":")[2])


class RemoteConfig(StrictModel):
    """`[remotes.NAME]`: a repository on a hosting service that loops follow."""

    kind: RemoteKind = Field(description='the service; Forgejo is `"gitea"`')  # type: ignore[valid-type]
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

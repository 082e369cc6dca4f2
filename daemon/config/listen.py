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

    bind: str = "127.0.0.1:8787"
    max_body: size("1KB", "100MB") = "1MB"  # type: ignore[valid-type]
    rate_limit: int = Field(120, ge=1, le=1_000_000)  # deliveries per source address per minute

    _bind = field_validator("bind")(_bind)

    @property
    def host(self) -> str:
        return self.bind.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.bind.rpartition(":")[2])


class RemoteConfig(StrictModel):
    """`[remotes.NAME]`: a repository on a hosting service that loops follow."""

    kind: RemoteKind  # type: ignore[valid-type]
    repository: str = Field(examples=["owner/name"])
    clone_url: str = Field(examples=["https://github.com/owner/name.git"])
    secret_env: str = Field("", examples=["LOOPD_GITHUB_SECRET"])

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

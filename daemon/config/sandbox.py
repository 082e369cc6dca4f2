"""`[sandbox]` of loopd.toml: where agents and checks run (daemon/sandbox/ chooses)."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, field_validator

from daemon.config.base import StrictModel


def _host_paths(value: list[str]) -> list[str]:
    for path in value:
        if not os.path.isabs(os.path.expanduser(path)):
            raise ValueError(f"{path!r} is not a path from / or ~")
    return value


class SandboxConfig(StrictModel):
    mode: Literal["auto", "bwrap", "off"] = Field(
        "auto",
        description=(
            "`auto`: bubblewrap when it runs here, else no sandbox with a warning in "
            "`check`, `status` and every run's events; when loopd runs as root, "
            "`auto` refuses to start runs without a sandbox (outcome `error`, cause "
            "`sandbox-unavailable`). `bwrap`: refuse runs where bubblewrap cannot "
            "run. `off`: no sandbox, the agent has the access of loopd's user"
        ),
    )
    writable: list[str] = Field(
        [],
        examples=[["~/.cache/pip"]],
        description=(
            'extra paths the agent and the checks may write, e.g. `["~/.cache/pip"]`;'
            " `~` is your real HOME; a missing folder is created. Paths inside "
            "loopd's home are never visible"
        ),
        json_schema_extra={"allowed": "paths from `/` or `~`"},
    )
    readable: list[str] = Field(
        [],
        examples=[["~/.pyenv"]],
        description=(
            "extra paths they may read, e.g. a toolchain in your HOME that loopd does"
            ' not find by itself: `["~/.rustup"]` (the deny list below still wins)'
        ),
        json_schema_extra={"allowed": "paths from `/` or `~`"},
    )
    network: bool = Field(
        True,
        description=(
            "`false`: a network namespace of their own with only loopback, so no "
            "host, no internet and no endpoint on this machine (a local model server "
            "cannot be reached)"
        ),
    )
    unconfined_as_root: bool = Field(
        False,
        description=(
            'with `mode = "off"` while loopd runs as root, runs are refused (outcome '
            "`error`, cause `sandbox-unavailable`) unless this is `true`: an "
            "unconfined agent running as root can signal every process on the machine"
            " and read and write every file"
        ),
    )

    _writable = field_validator("writable")(_host_paths)
    _readable = field_validator("readable")(_host_paths)

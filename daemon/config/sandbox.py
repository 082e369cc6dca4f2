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
    mode: Literal["auto", "bwrap", "off"] = "auto"
    writable: list[str] = Field([], examples=[["~/.cache/pip"]])
    readable: list[str] = Field([], examples=[["~/.pyenv"]])
    network: bool = True
    unconfined_as_root: bool = False

    _writable = field_validator("writable")(_host_paths)
    _readable = field_validator("readable")(_host_paths)

"""`loops/NAME.toml`: one loop's model (its setup and landing keys: daemon/config/land.py)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from daemon.config.base import StrictModel, _queue_name
from daemon.config.errors import ConfigError
from daemon.config.land import RunEnds
from daemon.scheduling.cron import CronExpression, parse_timezone
from daemon.units import duration

LOOP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# A loop's name is in every RUN_ID and branch name a person reads and copies.
LOOP_NAME_MAX = 32


class LoopConfig(StrictModel, RunEnds):
    """`loops/NAME.toml` (its setup and landing keys: daemon/config/land.py)."""

    repo: str = Field(examples=["~/src/app"])
    task: str = Field(examples=["Make the failing tests pass without weakening them."])
    agent: str = "qwen"
    enabled: bool = True
    schedule: list[str] = Field([], examples=[["0 2 * * *"]])
    timezone: str = "UTC"
    catch_up: duration("0s", "365d") = "1h"  # type: ignore[valid-type]
    on_push: list[str] = Field([], examples=[["main"]])
    on_change: list[str] = Field([], examples=[["src/**"]])
    hosted: str = Field("", examples=["origin"])  # a [remotes.NAME]; `remote` is landing's
    on_remote_push: list[str] = Field([], examples=[["main"]])
    poll: duration("0s", "1d") = "0s"  # type: ignore[valid-type]
    debounce: duration("0s", "1d") = "10s"  # type: ignore[valid-type]
    overlap: Literal["coalesce", "skip", "queue"] = "coalesce"
    max_queued: int = Field(10, ge=1, le=100_000)
    isolation: Literal["clone", "worktree", "in-place"] = "clone"
    base: str = "HEAD"
    done_when: list[str] = Field([], examples=[["python3 -m pytest -q"]])
    check_timeout: duration("1s", "1d") = "10m"  # type: ignore[valid-type]
    allow_fewer_tests: list[str] = Field([], examples=[["python3 -m pytest -q tests/slow"]])
    protect: list[str] = Field([], examples=[["tests/**"]])
    max_attempts: int = Field(3, ge=1, le=100)
    attempt_timeout: duration("1s", "7d") = "45m"  # type: ignore[valid-type]
    stall_after: duration("0s", "1d") = "5m"  # type: ignore[valid-type]
    max_nudges: int = Field(2, ge=0, le=100)
    nudge: str = "Continue the task. If something blocks you, say exactly what."
    max_tokens: int = Field(0, ge=0, le=10_000_000_000)
    daily_tokens: int = Field(0, ge=0, le=10**15)
    critic: Literal["on", "off"] = "on"
    critic_threshold: int = Field(7, ge=0, le=10)
    notify_on: list[Literal["escalated", "succeeded", "failed-attempt", "waiting"]] = ["escalated"]
    runs_on: str = Field("", examples=["gpu"])

    _runs_on = field_validator("runs_on")(_queue_name)
    env: dict[str, str] = Field({}, examples=[{"PYTHONPATH": "{tree}/src"}])
    checks_env: list[str] = Field([], examples=[["DATABASE_URL"]])

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            _variable_name(name)
        return value

    @field_validator("checks_env")
    @classmethod
    def _checks_env_names(cls, value: list[str]) -> list[str]:
        for name in value:
            _variable_name(name)
        return value

    @field_validator("allow_fewer_tests")
    @classmethod
    def _allowed_are_checks(cls, value: list[str], info: ValidationInfo) -> list[str]:
        checks = info.data.get("done_when") or []
        for command in value:
            if command not in checks:
                raise ValueError(
                    f"{command!r} is not one of done_when's commands; write it exactly as "
                    "done_when does"
                )
        return value

    @field_validator("task")
    @classmethod
    def _task_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("task is empty; say what the agent should do")
        return value

    @field_validator("schedule")
    @classmethod
    def _valid_cron(cls, value: list[str]) -> list[str]:
        for expression in value:
            CronExpression.parse(expression)
        return value

    @field_validator("timezone")
    @classmethod
    def _valid_timezone(cls, value: str) -> str:
        parse_timezone(value)
        return value

    @property
    def repo_path(self) -> Path:
        return Path(os.path.expanduser(self.repo)).resolve()


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _variable_name(name: str) -> str:
    """An environment variable loopd may set for a run's processes."""
    if not ENV_NAME.match(name):
        raise ValueError(f"{name!r} is not an environment variable name (letters, digits, _)")
    if name == "HOME":
        raise ValueError("HOME is set by loopd: a fresh one for each run")
    if name == "NOTIFY_SOCKET" or name.startswith("LOOPD_"):
        raise ValueError(f"{name} is loopd's own and never reaches an agent or a check")
    return name


@dataclass
class Loop:
    """A valid loop file, with its name."""

    name: str
    path: Path
    config: LoopConfig
    notes: list[str] = field(default_factory=list)  # problems that do not disable it
    # A disabled loop's problems (errors were it enabled): `loopd once --force` refuses on them.
    problems: list[ConfigError] = field(default_factory=list)

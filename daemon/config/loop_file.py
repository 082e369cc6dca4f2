"""`loops/NAME.toml`: one loop's model (its setup and landing keys: daemon/config/land.py)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

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

    repo: str = Field(
        examples=["~/src/app"],
        description=(
            "the repository to work on; `~` is expanded, a relative path is relative to the home"
        ),
        json_schema_extra={"allowed": "a git repository"},
    )
    task: str = Field(
        examples=["Make the failing tests pass without weakening them."],
        description="what the agent should do; the first section of every prompt",
        json_schema_extra={"allowed": "not empty"},
    )
    agent: str = Field(
        "qwen",
        description="who does it",
        json_schema_extra={"allowed": "a profile of loopd.toml or an adapter's name"},
    )
    enabled: bool = Field(
        True,
        description=(
            "a disabled loop gets no triggers; its problems are reported but do not stop the others"
        ),
    )
    schedule: list[str] = Field(
        [],
        examples=[["0 2 * * *"]],
        description="when to run",
        json_schema_extra={"allowed": "five-field cron expressions (see [Cron](#cron))"},
    )
    timezone: str = Field(
        "UTC",
        description="the zone `schedule` is read in",
        json_schema_extra={"allowed": 'an IANA time zone name, e.g. `"Europe/Berlin"`'},
    )
    catch_up: duration("0s", "365d") = Field(  # type: ignore[valid-type]
        "1h",
        description=(
            "a scheduled fire missed while loopd was down (or the machine slept) runs"
            " once at start if it is at most this old; 0s: never"
        ),
    )
    on_push: list[str] = Field(
        [],
        examples=[["main"]],
        description=(
            "run when one of these branches is updated; needs the hooks of `loopd hooks install`"
        ),
        json_schema_extra={"allowed": "branch globs (see [Globs](#globs))"},
    )
    on_change: list[str] = Field(
        [],
        examples=[["src/**"]],
        description="run when files under these paths change in the repository",
        json_schema_extra={"allowed": "path globs"},
    )
    hosted: str = Field(
        "",
        examples=["origin"],
        description=(
            'the hosted repository `on_remote_push` and `poll` watch, e.g. `"origin"`'
            ' (not `remote`, which is where `land = "push"` pushes)'
        ),
        json_schema_extra={"allowed": "a `[remotes.NAME]` of loopd.toml"},
    )  # a [remotes.NAME]; `remote` is landing's
    on_remote_push: list[str] = Field(
        [],
        examples=[["main"]],
        description=(
            "run when one of these branches of `hosted` is pushed (a webhook, or "
            "`poll`); the pushed commit is fetched first into "
            '`refs/remotes/REMOTE/BRANCH` of `repo`, so `base = "REMOTE/main"` starts'
            " the run from it"
        ),
        json_schema_extra={"allowed": "branch globs"},
    )
    poll: duration("0s", "1d") = Field(  # type: ignore[valid-type]
        "0s",
        description=(
            "where no webhook can reach: watch `hosted` with `git ls-remote` this "
            "often (`0s`: webhooks only). One poll per remote whatever the number of "
            "loops (the shortest `poll` wins); failures back off, doubling up to an "
            "hour (events `remote_poll_failed`, `remote_poll_backoff`, "
            "`remote_poll_recovered`). The first poll after a start takes what "
            "`refs/remotes/REMOTE/BRANCH` already holds as seen"
        ),
    )
    debounce: duration("0s", "1d") = Field(  # type: ignore[valid-type]
        "10s", description="`on_change` fires once no new change has come for this long"
    )
    overlap: Literal["coalesce", "skip", "queue"] = Field(
        "coalesce",
        description=(
            "a trigger arriving while a run of this loop is pending or running: "
            "merged into one pending run, dropped, or queued"
        ),
    )
    max_queued: int = Field(
        10,
        ge=1,
        le=100_000,
        description=(
            'with `overlap = "queue"`: at most this many pending runs; later triggers'
            " are dropped with an event"
        ),
    )
    isolation: Literal["clone", "worktree", "in-place"] = Field(
        "clone",
        description=(
            "where the agent works (see [Isolation](#isolation)). `clone`: a private "
            "clone of `repo` per run under `[limits] worktrees`, on branch "
            "`loopd/NAME/RUN_ID`, which loopd fetches into `repo` after each attempt;"
            " the agent's refs, config and hooks are the clone's own. `worktree`: a "
            "git worktree of `repo` per run, on that branch; the agent's git is your "
            "repository's. `in-place`: the checked-out branch itself (refused when it"
            " has uncommitted changes). Loops that did not set it used to get "
            '`"worktree"`'
        ),
    )
    base: str = Field(
        "HEAD",
        description="what a run starts from",
        json_schema_extra={"allowed": "a branch, tag or commit of `repo`"},
    )
    done_when: list[str] = Field(
        [],
        examples=[["python3 -m pytest -q"]],
        description=(
            "the checks: all must exit 0. Run by loopd (never by the agent) with "
            "`/bin/sh -c` after each attempt, on a clean tree of the attempt's commit"
            " (see [Checks](#checks)), never in the agent's tree"
        ),
        json_schema_extra={"allowed": "shell commands"},
    )
    check_timeout: duration("1s", "1d") = Field(  # type: ignore[valid-type]
        "10m", description="one check over this is stopped and fails"
    )
    allow_fewer_tests: list[str] = Field(
        [],
        examples=[["python3 -m pytest -q tests/slow"]],
        description=(
            "checks not weighed by the weakened-tests rule (see [Checks](#checks)): "
            "for a check whose test count may drop by design. Each time one would "
            "have failed, the event `checks_weakened_allowed` says so. A report that "
            "does not match what ran, or failed tests in a check that exited 0, fail even so"
        ),
        json_schema_extra={"allowed": "commands of `done_when`, as written there"},
    )
    protect: list[str] = Field(
        [],
        examples=[["tests/**"]],
        description=(
            "the agent may not change these; a change fails the attempt and is undone"
            " before the next"
        ),
        json_schema_extra={"allowed": "path globs"},
    )
    max_attempts: int = Field(
        3, ge=1, le=100, description="attempts per run before it is escalated"
    )
    attempt_timeout: duration("1s", "7d") = Field(  # type: ignore[valid-type]
        "45m",
        description=(
            "one attempt's agent session, nudges included; its whole process tree is killed at this"
        ),
    )
    stall_after: duration("0s", "1d") = Field(  # type: ignore[valid-type]
        "5m",
        description=(
            "no output and no file change for this long is a stall (a nudge follows);"
            " 0s: never a silence stall. A run whose attempts are used up after "
            "stalls is escalated with cause `stalled`, its headline saying so before "
            "the failing checks (a protected path changed comes first)"
        ),
    )
    max_nudges: int = Field(
        2,
        ge=0,
        le=100,
        description=("follow-up messages per attempt when the agent stalls, asks, or stops early"),
    )
    nudge: str = Field(
        "Continue the task. If something blocks you, say exactly what.",
        description="the follow-up message",
    )
    max_tokens: int = Field(
        0,
        ge=0,
        le=10_000_000_000,
        description="a run using more tokens is stopped and escalated; 0: no cap",
    )
    daily_tokens: int = Field(
        0,
        ge=0,
        le=10**15,
        description=(
            "tokens this loop's runs may spend a day (the day in the loop's "
            "`timezone`); once spent, its new runs wait until the next day; a run in "
            "progress finishes. 0: no budget"
        ),
    )
    critic: Literal["auto", "on", "off"] = Field(
        "auto",
        description=(
            "whether the verifier's model scores each attempt: `auto` when loopd.toml has "
            "a `[verifier]` (without one, attempts are judged by their checks alone, said "
            "once by `loopd check`); `on` asks for it (a warning when there is no "
            "`[verifier]`); `off` never"
        ),
    )
    critic_threshold: int = Field(
        7,
        ge=0,
        le=10,
        description=(
            "an attempt passes when its checks pass, nothing protected changed, and "
            "the critic's score is at least this"
        ),
    )
    notify_on: list[Literal["escalated", "succeeded", "failed-attempt", "waiting"]] = Field(
        ["escalated"],
        description=(
            "what `[notify]` tells you about; escalations are always notified. "
            '`"waiting"`: once a park, a run parked on its agent\'s usage limit'
        ),
    )
    runs_on: str = Field(
        "",
        examples=["gpu"],
        description=(
            'with `[engine] kind = "temporal"`: the workers that run this loop\'s '
            "attempts, those started with `loopd worker --queue NAME` (queue "
            "`loopd-NAME`); empty: the default queue, which `loopd run` itself also "
            "serves. Ignored by the local engine"
        ),
        json_schema_extra={"allowed": "letters, digits, `-`, `_`, `.`"},
    )

    _runs_on = field_validator("runs_on")(_queue_name)
    env: dict[str, str] = Field(
        {},
        examples=[{"PYTHONPATH": "{tree}/src"}],
        description=(
            "added to the environment of the agent and of the checks; in a value "
            "`{tree}` is the run's tree and `{PATH}` the `PATH` they get, e.g. `env ="
            ' { PYTHONPATH = "{tree}/src", PATH = "/opt/tools/bin:{PATH}" }`'
        ),
        json_schema_extra={"allowed": "variable names (not `HOME`, `LOOPD_*`, `NOTIFY_SOCKET`)"},
    )
    checks_env: list[str] = Field(
        [],
        examples=[["DATABASE_URL"]],
        description=(
            "variables passed from loopd's own environment to the checks (never to "
            'the agent), e.g. `["DATABASE_URL"]`; by default the checks get none'
        ),
        json_schema_extra={"allowed": "variable names"},
    )

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

    @field_validator("schedule", mode="wrap")
    @classmethod
    def _valid_cron(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> list[str]:
        expressions = handler(value)
        # Every bad expression is reported, each at its place (schedule[N]), not the first alone.
        problems = []
        for n, expression in enumerate(expressions):
            try:
                CronExpression.parse(expression)
            except ValueError as exc:
                problems.append(
                    InitErrorDetails(
                        type=PydanticCustomError("value_error", "{error}", {"error": str(exc)}),
                        loc=(n,),
                        input=expression,
                        ctx={"error": str(exc)},
                    )
                )
        if problems:
            raise ValidationError.from_exception_data("schedule", problems)
        return expressions

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

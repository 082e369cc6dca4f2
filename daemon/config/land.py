"""The loop keys of a run's start and end: `setup`, `skip_if_done`, `build_on` and landing.

They join `LoopConfig` (daemon/config/loop_file.py) as a base model; the checks here need
the loop's repository (what branch `base` names) and the engine, so they run where
`check_loop` does.
The user's reference is `docs/configuration.md`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from daemon.config.errors import ConfigError
from daemon.git.safe import Git, GitError
from daemon.globs import glob_problem
from daemon.units import duration


# A Protocol, not LoopConfig: loop_file.py builds LoopConfig on RunEnds from here.
class LandingLoop(Protocol):
    """What the landing checks read of a loop: a LoopConfig."""

    @property
    def land(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def base(self) -> str: ...
    @property
    def isolation(self) -> str: ...
    @property
    def repo_path(self) -> Path: ...


# What a run may not land without the loop's `land_allow` naming the glob: files that run
# programs on a person's machine or in CI as soon as they are merged or pushed.
LAND_GUARDED = (
    ".github/workflows/**",
    ".gitlab-ci.yml",
    ".envrc",
    ".vscode/**",
    ".pre-commit-config.yaml",
    ".gitmodules",
    ".githooks/**",
    ".husky/**",
)
PR_FIELDS = ("{branch}", "{target}", "{title}", "{body_file}")


class RunEnds(BaseModel):
    """`setup`, `skip_if_done`, `build_on`, `land` and its keys (a part of a loop file)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    setup: list[str] = Field([], examples=[["python3 -m venv .venv", ".venv/bin/pip install -e ."]])
    setup_timeout: duration("1s", "7d") = "20m"  # type: ignore[valid-type]
    skip_if_done: bool = True
    build_on: Literal["base", "last-success"] = "base"
    land: Literal["branch", "merge", "push"] = "branch"
    target: str = Field("", examples=["main"])
    remote: str = "origin"
    pr_command: list[str] = Field(
        [],
        examples=[["gh", "pr", "create", "--head", "{branch}", "--base", "{target}",
                   "--title", "{title}", "--body-file", "{body_file}"]],
    )  # fmt: skip
    land_allow: list[str] = Field([], examples=[[".github/workflows/**"]])

    @field_validator("setup")
    @classmethod
    def _setup_commands(cls, value: list[str]) -> list[str]:
        if any(not command.strip() for command in value):
            raise ValueError("holds an empty command")
        return value

    @field_validator("pr_command")
    @classmethod
    def _pr_argv(cls, value: list[str]) -> list[str]:
        if any(not part.strip() for part in value):
            raise ValueError("holds an empty argument")
        return value

    @field_validator("land_allow")
    @classmethod
    def _globs(cls, value: list[str]) -> list[str]:
        for pattern in value:
            problem = glob_problem(pattern)
            if problem:
                raise ValueError(f"{pattern!r}: {problem}")
        return value

    @field_validator("target")
    @classmethod
    def _branch_name(cls, value: str) -> str:
        name = value.removeprefix("refs/heads/")
        if value and (not name or name.startswith("-") or any(c in name for c in " ~^:?*[\\")):
            raise ValueError(f"{value!r} is not a branch name")
        return name

    @field_validator("remote")
    @classmethod
    def _remote(cls, value: str) -> str:
        if not value.strip() or value.startswith("-"):
            raise ValueError(f"{value!r} is not a remote name or URL")
        return value


def branch_of_base(repo: Path, base: str) -> str:
    """The branch `base` names in `repo` ("HEAD": the checked-out branch); "" when it names a
    tag, a commit, a detached HEAD or nothing."""
    git = Git(repo, plain=True)
    try:
        if base in ("HEAD", "@"):
            return git.out("symbolic-ref", "-q", "--short", "HEAD", check=False)
        name = base.removeprefix("refs/heads/")
        if git.run("show-ref", "-q", "--verify", f"refs/heads/{name}", check=False).returncode:
            return ""
        if base.startswith("refs/heads/"):
            return name
        # "v1" naming a tag and a branch at once is the tag for git: not a branch.
        tag = git.run("show-ref", "-q", "--verify", f"refs/tags/{base}", check=False)
        return "" if tag.returncode == 0 else name
    except GitError:
        return ""


def land_target(repo: Path, config: LandingLoop) -> str:
    """The branch a run lands on: `target`, else the branch `base` names ("" when none)."""
    return config.target or branch_of_base(repo, config.base)


def check_run_ends(path: Path, config: LandingLoop) -> list[ConfigError]:
    """What a loop's landing keys need of its repository (`setup` runs on either engine)."""
    errors = []
    if config.land != "branch" and config.isolation == "in-place":
        errors.append(
            ConfigError(
                path,
                "land",
                f'land = "{config.land}" with isolation = "in-place": an in-place run works on '
                "the checked-out branch itself, so there is no run branch to land",
                'use isolation = "clone" (the default), or land = "branch"',
            )
        )
    repo = config.repo_path
    is_repo = (repo / ".git").exists() or (repo / "HEAD").is_file()
    if config.land != "branch" and not config.target and is_repo:
        if not branch_of_base(repo, config.base):
            errors.append(
                ConfigError(
                    path,
                    "target",
                    f"base = {config.base!r} is not a branch of {repo} (a tag, a commit or a "
                    f'detached HEAD), so land = "{config.land}" has no branch to land on',
                    'name the branch: target = "main"',
                )
            )
    return errors

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
# What happens to a succeeded run's work; landing/land.py dispatches on it exhaustively.
LandMode = Literal["branch", "merge", "push"]


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

    setup: list[str] = Field(
        [],
        examples=[["python3 -m venv .venv", ".venv/bin/pip install -e ."]],
        description=(
            "run with `/bin/sh -c` in the run's tree before the first attempt, one "
            "after the other, in the run's sandbox with the checks' environment (the "
            'loop\'s `env` included), e.g. `["python3 -m venv .venv", ".venv/bin/pip '
            'install -e ."]`; output in `state/runs/RUN_ID/setup.log`. What they '
            "create in the tree is read-only for the agent and kept out of loopd's "
            "commits. A failure ends the run as `error` (cause `setup-failed`), "
            'escalated with the log\'s tail. With `[engine] kind = "temporal"` it runs'
            " on the worker, in every tree a worker makes for the run (before the "
            "skip check, and again before each attempt, since the next attempt may "
            "run on another machine); setup.log is in that worker's "
            "`state/runs/RUN_ID/`, and its tail in the home's"
        ),
        json_schema_extra={"allowed": "shell commands"},
    )
    setup_timeout: duration("1s", "7d") = Field(  # type: ignore[valid-type]
        "20m",
        description=(
            "the time all of `setup` may take; a command still running then is stopped and fails"
        ),
    )
    skip_if_done: bool = Field(
        True,
        description=(
            "with `done_when` set: after `setup`, run the checks on the commit the "
            "run starts from (after `build_on`); when all pass the run ends `skipped`"
            ' ("already done") with no agent and no tokens. `loopd once --force` and '
            "`loopd trigger --force` run anyway; retries and experiments are never "
            "skipped. Loops written before it existed used to start the agent anyway."
            ' With `[engine] kind = "temporal"` the check runs once, before the first'
            " attempt, on a worker of the loop's queue (`runs_on`)"
        ),
    )
    build_on: Literal["base", "last-success"] = Field(
        "base",
        description=(
            "`last-success`: start from the branch of this loop's newest run that "
            "succeeded and has not landed, when it still contains `base`; landing the"
            " new run marks that one landed too"
        ),
    )
    land: LandMode = Field(
        "branch",
        description=(
            "what happens to a succeeded run's work. `branch`: it stays on "
            "`loopd/NAME/RUN_ID` for you to review. `merge`: `target` is "
            "fast-forwarded to it (after merging a moved target into it in a fresh "
            "tree and running `setup` and the checks there again). `push`: the branch"
            " is pushed to `remote` and `pr_command` runs. See [Landing](#landing). "
            'An error with `isolation = "in-place"`'
        ),
    )
    land_commits: Literal["squash", "keep"] = Field(
        "squash",
        description=(
            "how a run's work lands. `squash`: as one commit on `target` (on the branch "
            'pushed, for `land = "push"`: see [Landing](#landing)), its message composed '
            "from the loop, the task, the run id and the checks that passed, with `setup` "
            "and the checks run on that very commit; the run's branch then points at it "
            "(its old tip is in `state/ref-ledger.jsonl`). `keep`: the attempts' commits "
            "land as they are (a fast-forward, or a merge when `target` moved)"
        ),
    )
    revert_limit: int = Field(
        2,
        ge=1,
        description=(
            '`land = "merge"` or `"push"`: after this many of the loop\'s landings are '
            'reverted by a person within 7 days, its runs land as `land = "branch"` until '
            "you resolve the escalation that says so (`loopd escalations resolve ID`); "
            "your loop file is not changed. See [Aftermath](aftermath.md)"
        ),
    )
    target: str = Field(
        "",
        examples=["main"],
        description=(
            "the branch `land` moves or a pull request names; empty: the branch "
            '`base` names (`"HEAD"`: the branch checked out when the run starts). A '
            "`base` that is a tag or a commit needs it (`check` says so). Fixed when "
            "each run starts"
        ),
        json_schema_extra={"allowed": "a branch name"},
    )
    remote: str = Field(
        "origin",
        description=(
            '`land = "push"`: where the run\'s branch is pushed, by your own git with '
            "your config and credentials (hooks off)"
        ),
        json_schema_extra={"allowed": "a remote's name or URL"},
    )
    pr_command: list[str] = Field(
        [],
        examples=[["gh", "pr", "create", "--head", "{branch}", "--base", "{target}",
                   "--title", "{title}", "--body-file", "{body_file}"]], description=(
            "`land = \"push\"`: run in the repository after the push, with `{branch}`, "
            "`{target}`, `{title}` and `{body_file}` replaced, e.g. `[\"gh\", \"pr\", "
            "\"create\", \"--head\", \"{branch}\", \"--base\", \"{target}\", \"--title\", "
            "\"{title}\", \"--body-file\", \"{body_file}\"]`; its output in "
            "`state/runs/RUN_ID/land.log`"
        ), json_schema_extra={"allowed": "a program and its arguments"})  # fmt: skip
    land_allow: list[str] = Field(
        [],
        examples=[[".github/workflows/**"]],
        description=(
            "files a run may land although they run programs on your machine or in "
            "CI: by default a run that changed `.github/workflows/**`, "
            "`.gitlab-ci.yml`, `.envrc`, `.vscode/**`, `.pre-commit-config.yaml`, "
            "`.gitmodules`, `.githooks/**`, `.husky/**` or the repository's "
            "`core.hooksPath` folder (when inside the tree) does not land, nor a "
            "symlink in their place, into them or out of the repository (see "
            "[Landing](#landing)); list the glob here (e.g. "
            '`[".github/workflows/**"]`) to let it'
        ),
        json_schema_extra={"allowed": "path globs"},
    )

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


def known_target(config: LandingLoop) -> str:
    """`land_target` of the loop's own repository, without asking git of one that is not
    there ("" then: loading says what is wrong with it)."""
    repo = config.repo_path
    if config.target or (repo / ".git").exists() or (repo / "HEAD").is_file():
        return land_target(repo, config)
    return ""


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

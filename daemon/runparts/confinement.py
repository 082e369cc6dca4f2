"""What a run's processes may see, write and know: the sandbox in force, its paths, environments.

The agent and the checks (and later setup) run in the same sandbox, checks only after the
agent's processes are gone. They may write the run's tree, the agent its scratch folder (its
HOME and temporary folder), the checks and setup a scratch folder of their own beside it
(their HOME and TMPDIR; the agent's is hidden from them), and
`[sandbox] writable`; with `isolation = "worktree"` or `"in-place"` also the git folder of the
user's repository, which those trees need to commit. They may read the user's repository,
its git folder, `[sandbox] readable`, the installation of the program they start and the
existing paths named in the loop's `env`. loopd's home is never visible. Which git folders
are exposed is fixed before any agent runs (`exposure` in the run's record), so nothing an
agent writes into a tree or a git folder can widen what a later attempt sees.

Environments are allowlists. The agent gets PATH, LANG, TERM and the like, the profile's
`env`, the loop's `env` and its key; the checks get the same allowlist, the loop's `env`, the
variables `checks_env` names, a fresh HOME, PYTHONNOUSERSITE=1 and PYTHONDONTWRITEBYTECODE=1.
Neither gets anything else of loopd's (LOOPD_*, NOTIFY_SOCKET, the verifier's key), nor
loopd's own venv's `bin` on their PATH: its `python3` would take the place of the person's.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from daemon.agents.environment import (
    ALLOWED,
    ALLOWED_PREFIXES,
    agent_environment,
    is_forbidden,
    without_loopd_venv,
)
from daemon.config import LoopConfig
from daemon.git.tree import checks_scratch_dir, scratch_dir
from daemon.runparts.exposure import ProgramHidden, denied_for, loopd_itself, refusal
from daemon.runparts.services import RunServices
from daemon.sandbox.base import Exposure, Launch, Sandbox
from daemon.sandbox.commandline import programs
from daemon.sandbox.limits import run_limits
from daemon.sandbox.mounts import hidden_conflicts
from daemon.sandbox.paths import home_folders, value_paths
from daemon.sandbox.programs import resolve_program
from daemon.sandbox.registry import Choice, choose
from daemon.state.atomic import ensure_dir
from daemon.state.eventtypes import Event
from daemon.state.records import RunExposure, RunRecord


class SandboxUnavailable(Exception):
    """The configured sandbox cannot run here and runs must not start without it."""


def choose_sandbox(services: RunServices, journal: Any) -> None:
    """Say which sandbox the run's processes get here (event `sandbox`, the record's
    `sandbox`); SandboxUnavailable when its runs are refused here."""
    choice = choose(services.config.sandbox)
    fields = {"warning": choice.warning} if choice.warning else {}
    journal.event(Event.SANDBOX, mode=choice.mode, in_force=choice.name, **fields)
    if choice.refusal:
        raise SandboxUnavailable(choice.refusal)
    # In a sandboxed clone the user's repository is read-only to the agent: its guards
    # (refs, config, hooks, info) are not needed there.
    journal.run.sandbox = choice.name


def common_git_dir(repo: Path) -> Path | None:
    """The git folder holding the objects and refs of `repo` (read, never asked of git)."""
    dotgit = repo / ".git"
    try:
        if dotgit.is_dir():
            gitdir = dotgit
        elif dotgit.is_file():
            text = dotgit.read_text(encoding="utf-8", errors="replace").strip()
            if not text.startswith("gitdir:"):
                return None
            gitdir = repo / text[len("gitdir:") :].strip()  # an absolute path stays as it is
        elif (repo / "HEAD").is_file() and (repo / "objects").is_dir():
            gitdir = repo  # a bare repository
        else:
            return None
        pointer = gitdir / "commondir"  # a linked worktree's git folder names the common one
        if pointer.is_file():
            gitdir = gitdir / pointer.read_text(encoding="utf-8", errors="replace").strip()
        return Path(os.path.realpath(gitdir))
    except OSError:
        return None


def run_exposure(repo: Path, isolation: str, admin: str = "", branch: str = "") -> RunExposure:
    """The git folders of a run, fixed before its agent works.

    `clone`: the user's git folder read-only. `in-place`: writable (the tree is the person's
    checkout). `worktree`: read-only but for what the run's worktree writes when its agent
    commits: the object store (its `objects/info`, where alternates live, read-only again),
    the worktree's admin folder (`admin`: its HEAD, index, merge state) and the folder of the
    run's ref and of its log. The person's index, `MERGE_HEAD`, `shallow`, config, hooks,
    `modules/` and other refs stay as they are.
    """
    common = common_git_dir(repo)
    if common is None:
        return RunExposure()
    if isolation == "in-place" or (isolation == "worktree" and not (admin and branch)):
        return RunExposure(git_writable=[str(common)])
    if isolation == "worktree":
        ref_folder = Path(branch).parent.as_posix()
        writable = [common / "objects", Path(admin), common / "refs" / "heads" / ref_folder]
        writable.append(common / "logs" / "refs" / "heads" / ref_folder)
        return RunExposure(
            git_readable=[str(common)],
            git_writable=[str(p) for p in writable if p.is_dir()],
            read_only=[str(common / "objects" / "info")],
        )
    return RunExposure(git_readable=[str(common)])


def expand(value: str, tree: Path, search_path: str) -> str:
    """A loop `env` value with `{tree}` and `{PATH}` replaced."""
    return value.replace("{tree}", str(tree)).replace("{PATH}", search_path)


def _fresh_dir(path: Path) -> Path:
    """An empty folder at `path`, whatever an agent left there (a symlink included)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    return ensure_dir(path)


def _refuse_run_folders_in_home(
    services: RunServices, tree: Path, scratch: Path, exposure: Exposure
) -> None:
    """SandboxUnavailable when the run's own folders are inside the home, which a confining
    sandbox hides from the agent."""
    # The run's own folders; `writable` paths in the home are dropped (`check` says so).
    own = Exposure(cwd=tree, writable=(scratch,), hidden=exposure.hidden)
    conflicts = hidden_conflicts(own)
    if conflicts:
        raise SandboxUnavailable(
            f"{conflicts[0]} is inside the home {services.home.root}, which agents never "
            "see. Fix: set [limits] worktrees in loopd.toml to a folder outside the home"
        )


@dataclass
class Confinement:
    """One run's sandbox and environments; `for_run` builds it."""

    choice: Choice
    sandbox: Sandbox
    exposure: Exposure
    scratch: Path
    checks_scratch: Path  # the checks' and setup's HOME and TMPDIR, outside the agent's
    tree: Path
    loop_env: dict[str, str]
    checks_names: tuple[str, ...]
    homes: set[Path]
    environ: Mapping[str, str]
    record: RunExposure  # the run's, saved with its record

    @classmethod
    def for_run(
        cls,
        services: RunServices,
        cfg: LoopConfig,
        run: RunRecord,
        tree: Path,
        environ: Mapping[str, str] = os.environ,
    ) -> Confinement:
        """The run's confinement; SandboxUnavailable when its runs are refused here."""
        config = services.config.sandbox
        choice = choose(config)
        if choice.refusal:
            raise SandboxUnavailable(choice.refusal)
        worktrees = services.config.limits.worktrees_path
        scratch = ensure_dir(scratch_dir(worktrees, run.loop, run.id))
        checks_scratch = ensure_dir(checks_scratch_dir(worktrees, run.loop, run.id))
        search_path = without_loopd_venv(environ.get("PATH", os.defpath))
        loop_env = {k: expand(v, tree, search_path) for k, v in cfg.env.items()}
        homes = home_folders(environ)
        if run.exposure is None:
            # Saved with the run's record before the agent starts (and before it could
            # change anything that decides what is exposed).
            run.exposure = run_exposure(
                Path(run.repo or cfg.repo_path), run.isolation, run.agent_git_dir, run.branch
            )
        paths = run.exposure
        writable = [tree, scratch, *(Path(p) for p in paths.git_writable)]
        for extra in config.writable:
            writable.append(ensure_dir(Path(os.path.expanduser(extra))))
        readable = [Path(run.repo or cfg.repo_path), *(Path(p) for p in paths.git_readable)]
        readable += [Path(p) for p in paths.read_only]
        readable += [Path(os.path.expanduser(p)) for p in config.readable]
        readable += value_paths(loop_env.values(), homes)
        exposure = Exposure(
            cwd=tree,
            writable=tuple(writable),
            readable=tuple(readable),
            hidden=(services.home.root,),
            network=config.network,
            denied=denied_for(homes),
            limits=run_limits(services.config.limits),
        )
        if choice.sandbox().confines:
            _refuse_run_folders_in_home(services, tree, scratch, exposure)
        return cls(
            choice=choice,
            sandbox=choice.sandbox(),
            exposure=exposure,
            scratch=scratch,
            checks_scratch=checks_scratch,
            tree=tree,
            loop_env=loop_env,
            checks_names=tuple(cfg.checks_env),
            homes=homes,
            environ=environ,
            record=paths,
        )

    @property
    def gated(self) -> bool:
        """Whether the agent's sandbox is set up and waits for its start (`on_start`
        returning): what must be durable before the agent runs is saved meanwhile."""
        return self.sandbox.confines and self.sandbox.gates()

    def keep_read_only(self, paths: list[Path]) -> None:
        """Make `paths` read-only for the run's processes from now on, inside the tree too
        (what setup made: a venv the agent must not replace); the run's record keeps them."""
        for path in paths:
            if str(path) not in self.record.read_only:
                self.record.read_only.append(str(path))
        self.exposure = self.exposure.adding(readable=paths)

    # -- folders in the scratch folder ------------------------------------------------------

    @property
    def agent_home(self) -> Path:
        """The agent's HOME for the whole run."""
        return self.scratch / "home"

    def tmpdir(self) -> Path:
        """The run's temporary folder (on disk, removed with the scratch folder)."""
        return ensure_dir(self.scratch / "tmp")

    # -- environments ---------------------------------------------------------------------

    def _allowlisted(self) -> dict[str, str]:
        env = {
            name: value
            for name, value in self.environ.items()
            if name in ALLOWED or name.startswith(ALLOWED_PREFIXES)
        }
        if "PATH" in env:
            env["PATH"] = without_loopd_venv(env["PATH"])
        return env

    def agent_env(
        self,
        profile_env: Mapping[str, str],
        invocation_env: Mapping[str, str],
        home: Path,
        withhold: list[str],
    ) -> dict[str, str]:
        """The agent's environment: the allowlist, the profile's and the loop's `env`, what
        the adapter sets (its key), the run's HOME and temporary folder."""
        env = agent_environment(
            {**profile_env, **self.loop_env},
            invocation_env,
            home,
            self.environ,
            withhold=withhold,
        )
        env["TMPDIR"] = str(self.tmpdir())
        return env

    def checks_env(self) -> dict[str, str]:
        """The checks' environment, with a HOME made fresh for this call."""
        env = self._allowlisted()
        env.update(self.loop_env)
        for name in self.checks_names:
            if name in self.environ:
                env[name] = self.environ[name]
        # Their own, never the agent's: a fixed copy it keeps in its HOME or TMPDIR must not
        # be what a check finds.
        env["HOME"] = str(_fresh_dir(self.checks_scratch / "home"))
        env["PYTHONNOUSERSITE"] = "1"
        # Bytecode the checks write would land in the tree, and in the next attempt's commit.
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        env["TMPDIR"] = str(ensure_dir(self.checks_scratch / "tmp"))
        return {k: v for k, v in env.items() if not is_forbidden(k)}

    # -- launches -------------------------------------------------------------------------

    def launch_agent(
        self,
        argv: list[str],
        env: Mapping[str, str],
        *,
        declared: list[str],
        tools: bool = False,
        gated: bool = False,
    ) -> Launch:
        """The agent's process, its program's installation visible, and the paths among
        `declared`: a `command` agent's arguments and `env` values as the profile writes them.
        `gated` (where the sandbox `gated` here): the command waits, set up, for
        `Launch.release()`; the caller must release it or the agent never starts.

        Never the prompt's words: they come from triggers (a commit message may name ~/.ssh).
        ProgramHidden when the program lies in a place of the deny list. `tools`: loopd's
        interpreter and package too, for the agent's tools (`loopd mcp`, `loopd-tool`).
        """
        extra: list[Path] = []
        venvs: list[Path] = []
        if tools and self.sandbox.confines:
            extra, venvs = loopd_itself(self.homes, self.exposure.denied)
        if argv and self.sandbox.confines:
            resolved = resolve_program(
                argv[0], env.get("PATH", ""), self.homes, self.exposure.denied
            )
            if resolved.problem and resolved.found is not None:
                raise ProgramHidden(refusal(resolved, "the agent's program"))
            extra += resolved.paths
            venvs += resolved.venvs
        extra += value_paths(declared, self.homes)
        exposure = self.exposure.adding(readable=extra, tools=venvs)
        exposure = replace(exposure, agent=True, gated=gated and self.gated)
        return self.sandbox.launch(argv, env, exposure)

    def launch_check(
        self, command: str, env: Mapping[str, str], writable: tuple[Path, ...] = ()
    ) -> Launch:
        """One check or setup command, `/bin/sh -c COMMAND`: each program it starts visible
        with its installation (through the PATH, links and `#!` lines), and absolute paths
        among its words; `writable`: loopd's folder for its test runner's report."""
        extra: list[Path] = []
        venvs: list[Path] = []
        if self.sandbox.confines:
            search_path = env.get("PATH", "")
            for program in programs(command):
                resolved = resolve_program(program, search_path, self.homes, self.exposure.denied)
                extra += resolved.paths
                venvs += resolved.venvs
            try:
                words = shlex.split(command)
            except ValueError:
                words = []
            extra += value_paths([w for w in words if w.startswith("/")], self.homes)
        argv = ["/bin/sh", "-c", command]
        exposure = self._checks_exposure().adding(readable=extra, writable=writable, tools=venvs)
        return self.sandbox.launch(argv, env, exposure)

    def _checks_exposure(self) -> Exposure:
        """The run's exposure for a check or setup: its own scratch folder writable, the
        agent's hidden (HOME, TMPDIR, the desk's socket)."""
        writable = [p for p in self.exposure.writable if p != self.scratch]
        return replace(
            self.exposure,
            writable=(*writable, self.checks_scratch),
            hidden=(*self.exposure.hidden, self.scratch),
        )

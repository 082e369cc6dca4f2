"""`loopd check` and a profile held for its refused login: the agent tried once, the hold
lifted when its login works.

The try is one real session of the profile's agent, started as a run starts it: its program
in the sandbox (`[sandbox]` as for runs, its `writable` and `readable` too), a HOME of its own
seeded with copies of the program's login files, the profile's `env` and key, a scratch git
folder as its tree, asked only "Reply with the single word OK." It costs one short request to
the provider (a few hundred to a few thousand tokens: most agents send their own system
prompt and tool list) and at most `TRY_TIMEOUT` seconds. It works unless it ends on a refused
login (agents/logins.py), fails before its stream begins, or gives no answer in time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.agents.environment import agent_environment
from daemon.agents.homes import seed_home
from daemon.agents.logins import failed_at_start, login_of
from daemon.agents.registry import adapter_class
from daemon.agents.supervisor import Supervisor
from daemon.agents.transcript import Transcript
from daemon.config import DaemonConfig
from daemon.people.escalation import AlreadyResolved, EscalationNotFound, resolve
from daemon.people.escalation_repeat import open_login
from daemon.redact import redact
from daemon.runparts.exposure import ProgramHidden, denied_for, refusal
from daemon.sandbox.base import Exposure, Launch
from daemon.sandbox.limits import run_limits
from daemon.sandbox.paths import account_home, home_folders
from daemon.sandbox.programs import resolve_program
from daemon.sandbox.registry import choose
from daemon.state.atomic import ensure_dir
from daemon.state.eventtypes import Event
from daemon.state.holds import lift_login, load_logins
from daemon.state.store import StateStore

PROMPT = "Reply with the single word OK."
TRY_TIMEOUT = 120.0  # seconds one try may take


@dataclass(frozen=True)
class LoginTry:
    """Whether a profile's login works, and what the agent said."""

    works: bool
    said: str


def try_login(
    config: DaemonConfig, name: str, home_root: Path, environ: Mapping[str, str] = os.environ
) -> LoginTry:
    """Start profile `name`'s agent once with a trivial prompt, as a run would; see the module."""
    profile = config.profile(name)
    if profile is None:
        return LoginTry(False, f"loopd.toml has no [agents.{name}]")
    choice = choose(config.sandbox)
    if choice.refusal:
        return LoginTry(False, choice.refusal)
    scratch = ensure_dir(Path(config.limits.worktrees_path))
    folder = Path(tempfile.mkdtemp(prefix=".login-check-", dir=scratch))
    try:
        return _try(config, profile, folder, home_root, environ)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _try(
    config: DaemonConfig, profile: Any, folder: Path, home_root: Path, environ: Mapping[str, str]
) -> LoginTry:
    work, tmp = ensure_dir(folder / "work"), ensure_dir(folder / "tmp")
    # Some agents want a git repository to work in, as a run's tree is.
    subprocess.run(["git", "init", "-q", str(work)], capture_output=True, check=False)
    cls = adapter_class(profile.adapter)
    home = ensure_dir(folder / "home").resolve()
    real_home = Path(environ.get("HOME") or account_home() or "/")
    seed_home(home, real_home, cls.login_files, cls.credential_files, cls.config_paths)
    adapter = cls(profile, home)
    adapter.scratch = folder
    invocation = adapter.invocation(PROMPT)
    withhold = [config.verifier.api_key_env]
    env = agent_environment(profile.env, invocation.env, home, environ, withhold=withhold)
    env["TMPDIR"] = str(tmp)
    launcher = _launcher(config, folder, home_root, environ)
    transcript = Transcript(folder / "transcript.jsonl", 1_000_000)
    try:
        supervisor = Supervisor(adapter, transcript, work, env, launcher=launcher)
        result = supervisor.run(invocation, timeout=TRY_TIMEOUT, stall_after=TRY_TIMEOUT)
    except ProgramHidden as exc:
        return LoginTry(False, str(exc))
    finally:
        transcript.close()
    return _verdict(adapter, result)


def _launcher(
    config: DaemonConfig, folder: Path, home_root: Path, environ: Mapping[str, str]
) -> Callable[[list[str], dict[str, str]], Launch]:
    """Launches the agent in the sandbox runs use: its folder writable, loopd's home hidden."""
    sandbox = choose(config.sandbox).sandbox()
    homes = home_folders(environ)
    denied = denied_for(homes)
    # As a run's: `[sandbox] writable` and `readable` too (an agent may keep its state there).
    writable = [folder, *(ensure_dir(_expand(p)) for p in config.sandbox.writable)]
    exposure = Exposure(
        cwd=folder / "work",
        writable=tuple(writable),
        readable=tuple(_expand(p) for p in config.sandbox.readable),
        hidden=(home_root,),
        network=config.sandbox.network,
        denied=denied,
        limits=run_limits(config.limits),
        agent=True,
    )

    def launch(argv: list[str], env: dict[str, str]) -> Launch:
        shown = exposure
        if argv and sandbox.confines:
            resolved = resolve_program(argv[0], env.get("PATH", ""), homes, denied)
            if resolved.problem and resolved.found is not None:
                raise ProgramHidden(refusal(resolved, "the agent's program"))
            shown = exposure.adding(readable=resolved.paths, tools=resolved.venvs)
        return sandbox.launch(argv, env, replace(shown, gated=False))

    return launch


def _expand(path: str) -> Path:
    return Path(os.path.expanduser(path))


def _verdict(adapter: Any, result: Any) -> LoginTry:
    """What one try says of the login."""
    if result.error:
        return LoginTry(False, f"the agent could not be started: {result.error}")
    refused = login_of(adapter, result)
    if refused is not None:
        return LoginTry(False, f"the login is still refused: {_short(refused.message)}")
    early = failed_at_start(adapter, result)
    if early:
        return LoginTry(False, f"the agent failed: {_short(early)}")
    if result.killed or result.timed_out:
        return LoginTry(False, f"the agent gave no answer within {TRY_TIMEOUT:.0f} s")
    return LoginTry(True, _short(result.final_text or "it answered"))


def _short(text: str) -> str:
    return " ".join(redact(text).split())[:300]


@dataclass(frozen=True)
class Lifted:
    """A held profile tried by `loopd check`."""

    profile: str
    tried: LoginTry
    escalation: str = ""  # resolved with the hold


def check_logins(
    store: StateStore, config: DaemonConfig, home_root: Path, now: datetime
) -> list[Lifted]:
    """Try each held profile's login; lift the holds of those that work and resolve their
    escalations."""
    out = []
    for profile, hold in sorted(load_logins(store).profiles.items()):
        tried = try_login(config, profile, home_root)
        if not tried.works:
            out.append(Lifted(profile, tried))
            continue
        lift_login(store, profile)
        escalation = _resolve(store, profile, hold.escalation, now)
        store.events.append(
            Event.LOGIN_LIFTED,
            now,
            profile=profile,
            held_by=hold.run,
            escalation=escalation,
        )
        out.append(Lifted(profile, tried, escalation))
    return out


def _resolve(store: StateStore, profile: str, escalation: str, now: datetime) -> str:
    """Resolve the profile's open agent-login escalation; its run id, or ""."""
    meta = open_login(store, profile)
    run_id = meta.run if meta is not None else escalation
    if not run_id:
        return ""
    note = f"`loopd check` found the login of agent profile {profile!r} working again"
    try:
        resolve(store, run_id, now, note=note)
    except (AlreadyResolved, EscalationNotFound):
        return ""
    return run_id

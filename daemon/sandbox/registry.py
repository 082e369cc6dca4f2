"""Sandboxes by name, and the choice `[sandbox] mode` makes on this machine.

`auto` takes bubblewrap when it runs here; where it does not (not installed, no user
namespaces, macOS) the runs go unconfined with a warning in `check`, `status` and each run's
events, except when loopd runs as root: then runs are refused rather than started
unsandboxed. `bwrap` refuses runs where bubblewrap cannot run; `off` never confines, and as
root it also needs `unconfined_as_root = true`, written by a person who knows what it means.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from daemon.config import SandboxConfig
from daemon.sandbox.base import Sandbox
from daemon.sandbox.bwrap import BwrapSandbox
from daemon.sandbox.off import OffSandbox

SANDBOXES: dict[str, type[Sandbox]] = {"bwrap": BwrapSandbox, "off": OffSandbox}
INSTALL = (
    "install bubblewrap (Debian, Ubuntu: `apt-get install bubblewrap`; "
    "Fedora: `dnf install bubblewrap`)"
)


UNCONFINED_ROOT = (
    '[sandbox] mode = "off" while loopd runs as root: an unconfined agent could then signal '
    "every process on this machine and read and write every file. Fix: install bubblewrap "
    'and remove mode (or write mode = "auto"), or write unconfined_as_root = true under '
    "[sandbox] to accept this"
)


def sandbox_class(name: str) -> type[Sandbox]:
    """The sandbox registered under `name`."""
    try:
        return SANDBOXES[name]
    except KeyError:
        raise KeyError(f"no sandbox {name!r}; known: {', '.join(SANDBOXES)}") from None


@dataclass(frozen=True)
class Choice:
    """The sandbox in force for a configuration here, and what a person must know about it."""

    mode: str  # as configured: auto, bwrap, off
    name: str  # in force: bwrap or off
    detail: str = ""  # bubblewrap's version, or why it cannot run
    warning: str = ""  # runs go unconfined although the configuration did not ask for that
    refusal: str = ""  # runs are not started at all

    def sandbox(self) -> Sandbox:
        return sandbox_class(self.name)()

    def summary(self) -> str:
        """One line for `check` and `status`."""
        if self.refusal:
            return f"sandbox: none; runs are refused: {self.refusal}"
        if self.name == "bwrap":
            how = "auto, " if self.mode == "auto" else ""
            return f"sandbox: bwrap ({how}{self.detail})"
        if self.mode == "off":
            return (
                'sandbox: off (mode = "off"): agents and checks run with the full access of '
                "loopd's user"
            )
        return f"sandbox: off: {self.warning}"


def choose(config: SandboxConfig, *, is_root: bool | None = None) -> Choice:
    """The choice of `config.mode` on this machine (bubblewrap is probed once per process)."""
    root = os.geteuid() == 0 if is_root is None else is_root
    if config.mode == "off":
        if root and not config.unconfined_as_root:
            return Choice(mode="off", name="off", refusal=UNCONFINED_ROOT)
        return Choice(mode="off", name="off")
    available = BwrapSandbox.availability()
    if available.ok:
        weaker = BwrapSandbox.weaker()
        detail = f"{available.detail}; {weaker}" if weaker else available.detail
        return Choice(mode=config.mode, name="bwrap", detail=detail)
    why = f"bubblewrap cannot run here ({available.detail})"
    if config.mode == "bwrap":
        return Choice(
            mode="bwrap",
            name="off",
            detail=available.detail,
            refusal=f'[sandbox] mode = "bwrap" but {why}. Fix: {INSTALL}',
        )
    if root:
        return Choice(
            mode="auto",
            name="off",
            detail=available.detail,
            refusal=(
                f"{why} and loopd runs as root, so agents are not started unsandboxed. Fix: "
                f'{INSTALL}, or write [sandbox] mode = "off" and unconfined_as_root = true in '
                "loopd.toml to run them as root without a sandbox"
            ),
        )
    return Choice(
        mode="auto",
        name="off",
        detail=available.detail,
        warning=(
            f"{why}: agents and checks run unconfined, with your user's access to the home "
            f"(rules, state), your files and your processes. Fix: {INSTALL}, or write "
            '[sandbox] mode = "off" in loopd.toml to accept this'
        ),
    )

"""The mount plan of a bubblewrap sandbox, on top of a read-only view of the whole system.

Masks (empty private folders) go over the places that hold host sockets and personal files:
`/tmp`, `/run` (`/var/run`), `$XDG_RUNTIME_DIR`, `/root`, `/home` and the real HOME; the
password hashes and the host's SSH keys are covered by an empty file; the deny list
(`deny.py`) is masked wherever a bind or the root's view would show it. Then the read-only and
the read-write binds (and `/etc/resolv.conf`, where it links into `/run`). bubblewrap applies
its mounts in order and a later mount over a folder hides what an earlier one put inside it,
so the plan is ordered by depth, shallow first: the most specific path wins (a tree under
`/tmp` stays visible, a home inside a bound repository is masked again). loopd's own home is
hidden whatever else is asked for: a bind inside it is dropped (but a program's virtual
environment, `Exposure.tools`), and its mask comes after every bind at its depth.

Every path is resolved (bubblewrap cannot mount onto a symlink such as `/var/run`), missing
masks and binds are skipped, and duplicates are merged.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from daemon.sandbox.base import Exposure
from daemon.sandbox.paths import account_home

MASKED_FOLDERS = ("/tmp", "/run", "/var/run", "/root", "/home")
MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/ssh/ssh_host_*_key")
# System files that are often links into a masked folder and must stay readable: with
# systemd-resolved or NetworkManager, /etc/resolv.conf points into /run (no DNS without it).
LINKED_FILES = ("/etc/resolv.conf",)

Kind = Literal["mask", "ro", "rw", "hide"]
_ORDER: dict[Kind, int] = {"mask": 0, "ro": 1, "rw": 2, "hide": 3}


@dataclass(frozen=True)
class Mount:
    """One mount of the plan: a mask, a read-only or read-write bind, loopd's hidden home."""

    kind: Kind
    path: str
    is_dir: bool = True

    def argv(self, tmp_size: int = 0) -> list[str]:
        """bubblewrap's words for it; a tmpfs of at most `tmp_size` bytes when given."""
        if self.kind in ("mask", "hide"):
            if not self.is_dir:
                return ["--ro-bind", "/dev/null", self.path]
            size = ["--size", str(tmp_size)] if tmp_size else []
            return [*size, "--tmpfs", self.path]
        return ["--ro-bind" if self.kind == "ro" else "--bind", self.path, self.path]


def _real(path: str | Path) -> str | None:
    """The resolved path when it exists, else None."""
    try:
        real = os.path.realpath(path)
        return real if os.path.lexists(real) else None
    except (OSError, ValueError):
        return None


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def host_masks(environ: Mapping[str, str]) -> list[str]:
    """The folders and files masked in every sandbox, as they are named on this machine."""
    names = list(MASKED_FOLDERS)
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        names.append(runtime)
    names += [h for h in (environ.get("HOME", ""), account_home()) if os.path.isabs(h)]
    for pattern in MASKED_FILES:
        names += glob.glob(pattern)
    return names


def host_files(names: Iterable[str] = LINKED_FILES) -> list[str]:
    """Where the system files that must stay readable really are (bound when masked)."""
    return [real for real in (_real(name) for name in names) if real]


def plan(exposure: Exposure, masks: Iterable[str]) -> list[Mount]:
    """The mounts for `exposure`, in the order bubblewrap must apply them."""
    hidden = [p for p in (_real(h) for h in exposure.hidden) if p]
    denied = [p for p in (_real(d) for d in exposure.denied) if p]
    masks = list(masks)
    wanted: dict[str, Kind] = {}

    def want(kind: Kind, path: str | Path, tool: bool = False) -> None:
        real = _real(path)
        if real is None or real == "/" or _inside(real, "/proc") or _inside(real, "/dev"):
            return  # the root is already visible; /proc and /dev are the sandbox's own
        if any(_inside(real, d) or _inside(d, real) for d in denied) and tool:
            return  # a tool's folder is shown whole or not at all
        closed = denied if tool else hidden + denied
        if kind in ("ro", "rw") and any(_inside(real, h) for h in closed):
            return  # never anything under loopd's home (but a tool), nor of the deny list
        if _ORDER[kind] >= _ORDER[wanted.get(real, kind)]:
            wanted[real] = kind

    for mask in masks:
        want("mask", mask)
    for asked in exposure.readable:
        want("ro", asked)
    for asked in exposure.writable:
        want("rw", asked)
    for asked in exposure.tools:
        want("ro", asked, tool=True)
    for path in hidden:
        wanted[path] = "hide"
    binds = [path for path, kind in wanted.items() if kind in ("ro", "rw")]
    masked = [m for m in (_real(m) for m in masks) if m]
    for path in denied:
        # Masked where a bind would show it, or where the root's view does.
        shown = any(_inside(path, b) for b in binds) or not any(_inside(path, m) for m in masked)
        if shown:
            wanted[path] = "hide"
    covering = [path for path, kind in wanted.items() if kind != "ro"]
    for path, kind in list(wanted.items()):
        if kind == "ro" and not any(_inside(path, c) for c in covering):
            del wanted[path]  # visible read-only already, through the root's view
    mounts = [Mount(kind, path, os.path.isdir(path)) for path, kind in wanted.items()]
    mounts.sort(key=lambda m: (len(Path(m.path).parts), _ORDER[m.kind], m.path))
    return mounts


def hidden_conflicts(exposure: Exposure) -> list[str]:
    """The working folder and writable paths that lie in loopd's home (they stay hidden)."""
    hidden = [p for p in (_real(h) for h in exposure.hidden) if p]
    out = []
    for path in (exposure.cwd, *exposure.writable):
        real = _real(path)
        if real and any(_inside(real, h) for h in hidden):
            out.append(str(path))
    return out

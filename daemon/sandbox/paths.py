"""Which host paths a sandboxed command needs to see: its program's installation and its paths.

A program is visible with the installation it belongs to: the outermost `node_modules` folder
of an npm package (its dependencies are hoisted beside it), the prefix above a `bin/` folder
(a Python or Node installation: `bin/python3` needs `lib/`), else the folder holding it. A
prefix directly inside a home folder (`~/.local`, `~/.cargo`) is never taken whole: it holds
credentials and keyrings besides programs, so only the `bin/` folder is. `programs.py`
follows a program through its links and `#!` lines and says why each folder is shown.

An argument or environment value that is an existing absolute path (a `PATH`-like value is
split at `:`) is visible too: a folder as it is, a file with the folder holding it, unless
that folder is `/`, a home folder or a masked one (`/tmp`, `/run`), where the file alone is.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

MAX_PATH = 4096
# Folders that are masked whole: a file directly inside one is bound alone, never its folder.
MASK_ROOTS = ("/", "/tmp", "/run", "/var/run", "/var/tmp", "/root", "/home", "/dev", "/proc")


def home_folders(environ: Mapping[str, str]) -> set[Path]:
    """The real HOME, the account's home, /root and every folder in /home, resolved."""
    found = {Path("/root")}
    for candidate in (environ.get("HOME", ""), account_home()):
        if candidate and os.path.isabs(candidate):
            found.add(Path(os.path.realpath(candidate)))
    try:
        found.update(Path(os.path.realpath(entry.path)) for entry in os.scandir("/home"))
    except OSError:
        pass
    return found


def account_home() -> str:
    """The home folder of the account loopd runs as."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return ""


def find_program(name: str, search_path: str) -> Path | None:
    """Where `name` is: itself when it holds a slash, else the first match on `search_path`."""
    if not name or len(name) > MAX_PATH or "\0" in name:
        return None
    if "/" in name:
        path = Path(os.path.expanduser(name))
        return path if path.is_file() else None
    found = shutil.which(name, path=search_path)
    return Path(found) if found else None


def install_root(program: Path, homes: set[Path], resolve: bool = True) -> Path:
    """The folder to make visible so that `program` runs (see the module docstring); with
    `resolve=False` for the link itself, where it lies (a venv's `bin/python3`)."""
    real = Path(os.path.realpath(program)) if resolve else program
    parts = real.parts
    if "node_modules" in parts:
        return Path(*parts[: parts.index("node_modules") + 1])
    folder = real.parent
    prefix = folder.parent
    if folder.name in ("bin", "sbin") and prefix not in homes and prefix.parent not in homes:
        if str(prefix) not in MASK_ROOTS:
            return prefix
    if str(folder) in MASK_ROOTS or folder in homes:
        return real  # a program lying loose in a home or in /tmp: the file alone
    return folder


def interpreter(program: Path, search_path: str) -> Path | None:
    """The program a script's `#!` line names (through `env`), or None for a binary."""
    try:
        with open(program, "rb") as fh:
            head = fh.read(512)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    first = Path(words[0])
    if first.name == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        return find_program(names[0], search_path) if names else None
    return first if first.is_file() else None


def value_paths(values: Iterable[str], homes: set[Path]) -> list[Path]:
    """The existing absolute paths among `values`, as the module docstring says to bind them."""
    out: list[Path] = []
    for value in values:
        if len(value) > 64 * 1024:  # a prompt, not a path list
            continue
        for part in value.split(os.pathsep):
            if not part.startswith("/") or len(part) > MAX_PATH or "\0" in part or "\n" in part:
                continue
            path = Path(part)
            try:
                if path.is_dir():
                    out.append(path)
                elif path.exists():
                    folder = Path(os.path.realpath(path.parent))
                    alone = str(folder) in MASK_ROOTS or folder in homes
                    out.append(path if alone else folder)
            except OSError:
                continue
    return out

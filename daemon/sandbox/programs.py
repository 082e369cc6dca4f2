"""What a program needs of the host to start in a sandbox: it, followed to the end, and why.

A program is found on the PATH and followed through every symbolic link and every `#!` line
(four interpreters deep). Each place on the way brings the installation it belongs to
(`paths.install_root`), and three kinds of place bring more, even when they lie in a home:

- a virtual environment (a `pyvenv.cfg` above its `bin/`): the environment whole, and the
  base interpreter its `home` line names (a venv made with `--copies` links nothing);
- a Python or Node installation (a real `pythonX.Y` or `node` in `PREFIX/bin/` with its
  standard library, `PREFIX/lib/pythonX.Y/os.py` or `PREFIX/lib/node_modules`): the prefix
  whole, which is `sys.base_prefix` for a Python (pyenv, uv, conda, asdf, mise, nvm);
- a version manager's shim (a program in a `shims/` folder: pyenv, rbenv, asdf, mise; volta's
  `volta-shim`): the manager's folder, which the shim runs from.

Never a home itself, and nothing of the deny list (`deny.py`): a program whose installation
lies in a denied place cannot be exposed; `Resolved.problem` says so, naming the path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from daemon.sandbox.deny import denied_holding
from daemon.sandbox.paths import MASK_ROOTS, find_program, install_root, interpreter

MAX_LINKS = 40  # as the kernel's own limit on a chain of links
MAX_INTERPRETERS = 4
_PYTHON = re.compile(r"python\d*(?:\.\d+)?")


@dataclass(frozen=True)
class Exposed:
    """One folder (or file) made visible read-only, and why: `interpreter of .venv/bin/python3`."""

    path: Path
    why: str
    venv: bool = False  # shown even inside loopd's home (a checkout's .venv)


@dataclass(frozen=True)
class Resolved:
    """A program as a command names it, where the PATH led, and what it needs to be visible."""

    program: str
    found: Path | None
    exposed: tuple[Exposed, ...] = ()
    problem: str = ""  # why it cannot start in the sandbox; "" when it can

    @property
    def paths(self) -> list[Path]:
        """The folders to show read-only, but virtual environments."""
        return [item.path for item in self.exposed if not item.venv]

    @property
    def venvs(self) -> list[Path]:
        """The virtual environments to show read-only, even inside loopd's home."""
        return [item.path for item in self.exposed if item.venv]


def shown(path: Path | str) -> str:
    """A path as a person reads it: the current HOME as `~`."""
    text = os.fspath(path)
    home = os.path.expanduser("~").rstrip("/")
    if home and home != "/" and (text == home or text.startswith(home + "/")):
        return "~" + text[len(home) :]
    return text


class _Walk:
    """The places one program leads to, in the order they were found."""

    def __init__(self, search_path: str, homes: set[Path]) -> None:
        self.search_path = search_path
        self.homes = homes
        self.found: dict[Path, Exposed] = {}

    def add(self, path: Path, why: str, venv: bool = False) -> None:
        if path in self.homes or str(path) in MASK_ROOTS or path == Path("/"):
            return  # a home or a masked root is never shown whole
        self.found.setdefault(path, Exposed(path, why, venv))

    def follow(self, start: Path, label: str, depth: int = 0) -> None:
        """Every hop from `start` to the real file, then its `#!` interpreter, and so on."""
        hop = Path(os.path.abspath(start))
        for _ in range(MAX_LINKS):
            here = Path(os.path.realpath(hop.parent)) / hop.name
            self.place(here, label)
            if not here.is_symlink():
                break
            try:
                hop = Path(os.path.normpath(here.parent / os.readlink(here)))
            except OSError:
                break
        real = Path(os.path.realpath(start))
        self.place(real, label)
        if depth < MAX_INTERPRETERS:
            script_interpreter = interpreter(real, self.search_path)
            if script_interpreter is not None:
                self.follow(script_interpreter, f"the interpreter of {label}", depth + 1)

    def place(self, here: Path, label: str) -> None:
        """What the file at `here` (a link or the real file) brings."""
        folder, prefix = here.parent, here.parent.parent
        if folder.name in ("bin", "Scripts") and (prefix / "pyvenv.cfg").is_file():
            self.add(prefix, f"virtual environment of {label}", venv=True)
            base = _venv_base(prefix / "pyvenv.cfg")
            if base is not None:
                self.add(base, f"interpreter of {label}")
        if folder.name == "bin" and not here.is_symlink() and _language_prefix(here):
            self.add(prefix, f"interpreter of {label}")
        if folder.name == "shims" or here.name == "volta-shim":
            manager = prefix if folder.name == "bin" else folder.parent
            self.add(manager, f"version manager of {label}")
        root = install_root(here, self.homes, resolve=False)
        self.add(root, label if root == here else f"installation of {label}")


def _venv_base(config: Path) -> Path | None:
    """The base interpreter's prefix a venv's `pyvenv.cfg` names (its `home` is a bin/)."""
    try:
        lines = config.read_text(encoding="utf-8", errors="replace").splitlines()[:50]
    except OSError:
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home" and value.strip().startswith("/"):
            home = Path(os.path.realpath(value.strip()))
            return home.parent if home.name in ("bin", "Scripts") else home
    return None


def _language_prefix(binary: Path) -> bool:
    """Whether a real interpreter binary sits in a whole Python or Node installation."""
    prefix = binary.parent.parent
    if _PYTHON.fullmatch(binary.name):
        return any(prefix.glob("lib/python3*/os.py"))
    if binary.name == "node":
        return (prefix / "lib" / "node_modules").is_dir() or (prefix / "include" / "node").is_dir()
    return False


def resolve_program(
    program: str, search_path: str, homes: set[Path], denied: Iterable[Path] = ()
) -> Resolved:
    """What `program` needs to be visible, and the problem when part of it may not be."""
    found = find_program(program, search_path)
    if found is None:
        return Resolved(program, None, problem=f"{program!r} is not on the PATH")
    walk = _Walk(search_path, homes)
    walk.follow(found, shown(found))
    denied = tuple(denied)
    exposed: list[Exposed] = []
    problem = ""
    for item in walk.found.values():
        holder = denied_holding(item.path, denied)
        if holder is None:
            exposed.append(item)
        elif not problem:
            problem = (
                f"{shown(item.path)} ({item.why}) lies in {shown(holder)}, which the sandbox "
                "never shows (the deny list)"
            )
    return Resolved(program, found, tuple(exposed), problem)

"""The deny list: places under a home that hold its secrets, never visible in a sandbox.

Whatever a command needs and whatever `[sandbox] readable` names, these stay out: a bind
that lies inside one is dropped (and the command that needed it refused with the path
named), and one that lies inside a bind is masked (an empty folder, or /dev/null for a
file). The list is documented in docs/configuration.md#sandbox; the agent CLIs' login and
credential files (the adapters' `login_files`) are added by the caller.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

# Relative to each home folder: keys, tokens and keyrings of the tools people use.
DENIED_IN_HOME = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".git-credentials",
    ".netrc",
    ".pypirc",
    ".npmrc",
    ".yarnrc",
    ".docker",
    ".kube",
    ".password-store",
    ".local/share/keyrings",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
)


def denied_paths(homes: Iterable[Path], extra: Iterable[str] = ()) -> tuple[Path, ...]:
    """Every denied path under every home (existing or not: a later one is denied too)."""
    names = (*DENIED_IN_HOME, *extra)
    out: list[Path] = []
    for home in sorted(homes):
        for name in names:
            out.append(home / name)
    return tuple(dict.fromkeys(out))


def inside(path: Path | str, folder: Path | str) -> bool:
    """Whether `path` is `folder` or lies below it (both taken as written)."""
    p, f = os.fspath(path), os.fspath(folder).rstrip("/")
    return p == f or p.startswith(f + "/")


def denied_holding(path: Path, denied: Iterable[Path]) -> Path | None:
    """The denied path that `path` lies in, if any."""
    real = Path(os.path.realpath(path))
    for item in denied:
        if inside(real, item) or inside(path, item):
            return item
    return None

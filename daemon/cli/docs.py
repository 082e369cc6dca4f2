"""`loopd docs`: where the documentation is; the site built with mkdocs when it is installed."""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import webbrowser
from pathlib import Path

from daemon.cli.common import CommandError
from daemon.extras import install_command

INSTALL = install_command("docs")
BUILD_TIMEOUT = 300.0


def source_root() -> Path | None:
    """The checkout holding `mkdocs.yml` and `docs/` beside the package, if this is one."""
    root = Path(__file__).resolve().parents[2]
    if (root / "mkdocs.yml").is_file() and (root / "docs").is_dir():
        return root
    return None


def site_dir(root: Path) -> Path:
    """Where the site of the checkout at `root` is built: loopd's cache, one folder a checkout."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    return cache / "loopd" / "docs" / f"{root.name}-{key}"


def newest_source(root: Path) -> float:
    """The newest modification time of what the site is built from."""
    files = [root / "mkdocs.yml", *(p for p in (root / "docs").rglob("*") if p.is_file())]
    return max(p.stat().st_mtime for p in files)


def mkdocs_installed() -> bool:
    """mkdocs and its material theme can be imported."""
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        return False
    return True


def build(root: Path, site: Path) -> None:
    """Build the site of `root` into `site` with mkdocs (no network: see mkdocs.yml)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    argv = [sys.executable, "-m", "mkdocs", "build", "--quiet", "--no-strict"]
    argv += ["--config-file", str(root / "mkdocs.yml"), "--site-dir", str(site)]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=BUILD_TIMEOUT, cwd=root
        )
    except subprocess.TimeoutExpired:
        raise CommandError(f"mkdocs did not build the site within {BUILD_TIMEOUT:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise CommandError(f"mkdocs could not build the site of {root}:\n{tail}", code=1)


def docs_cmd(args: argparse.Namespace) -> int:
    """Print where the documentation is: the built site's index.html (--open: in a browser)."""
    root = source_root()
    if root is None:
        raise CommandError(
            "this installation of loopd has no docs/ beside it (it was installed from a "
            "wheel). Fix: read the pages in docs/ of loopd's repository, or install loopd "
            "from a checkout (pip install -e .) and run `loopd docs` again",
            code=1,
        )
    if not mkdocs_installed():
        print(root / "docs")
        print(
            "mkdocs is not installed, so the site is not built; the pages above are Markdown "
            f"files (start with index.md). To build the site: {INSTALL}, then `loopd docs`",
            file=sys.stderr,
        )
        return 0
    site = site_dir(root)
    index = site / "index.html"
    if not index.is_file() or index.stat().st_mtime < newest_source(root):
        print(f"building the site into {site} ...", file=sys.stderr, flush=True)
        build(root, site)
    print(index)
    if args.open:
        webbrowser.open(index.as_uri())
    return 0

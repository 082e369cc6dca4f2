"""The documentation site: `mkdocs build --strict` makes every page of the nav (broken links
and anchors fail it), README.md and DEVELOPERS.md link only to files and headings that exist,
and `loopd docs` prints the built site or, without mkdocs, the docs/ folder."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.extras import install_command
from tests.helpers import ROOT

README_MAX_BYTES = 12_000


def _require_mkdocs() -> None:
    """Skip where mkdocs is not installed (in CI a skip fails: conftest.py)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")


def _nav_pages(nav: Any) -> list[str]:
    """Every page the nav of mkdocs.yml names."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def _config() -> dict[str, Any]:
    import yaml

    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def _quiet_env(**more: str) -> dict[str, str]:
    """This environment, without the banner mkdocs-material prints about MkDocs 2."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", **more}
    env.pop("LOOPD_HOME", None)
    return env


def test_the_site_builds_strictly_with_every_page(tmp_path: Path) -> None:
    _require_mkdocs()
    config = _config()
    assert config["theme"]["name"] == "material" and config["theme"]["font"] is False
    assert not {"social", "privacy", "material/social", "material/privacy"} & {
        p if isinstance(p, str) else next(iter(p)) for p in config.get("plugins", [])
    }, "a plugin that downloads at build time"
    pages = _nav_pages(config["nav"])
    written = sorted(
        p.relative_to(ROOT / "docs").as_posix()
        for p in ROOT.glob("docs/**/*.md")
        if "hooks" not in p.relative_to(ROOT / "docs").parts  # mkdocs' build hooks, no page
    )
    assert sorted(pages) == written, "every page of docs/ in the nav, and only those"
    assert "events.md" in pages
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=_quiet_env(),
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in pages:
        html = site / page.replace(".md", ".html")
        assert html.is_file() and "<h1" in html.read_text(), page
    assert (site / "report-week.png").is_file()
    assert not (site / "hooks").exists()


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub and mkdocs' toc make it."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s", "-", text)


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("name", ["README.md", "DEVELOPERS.md"])
def test_the_front_pages_link_only_to_what_exists(name: str) -> None:
    """A link of README.md or DEVELOPERS.md to a moved section or page fails here."""
    text = (ROOT / name).read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target, _, anchor = link.partition("#")
        path = ROOT / target if target else ROOT / name
        assert path.exists(), f"{name}: {link}: no such file"
        if anchor:
            assert anchor in _anchors(path), f"{name}: {link}: no such heading in {target}"


def test_the_readme_is_a_front_door() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= README_MAX_BYTES, len(readme.encode())
    for heading in ("## Two commands", "## A home of your own", "## The first morning"):
        assert f"\n{heading}\n" in readme, heading
    assert "docs/troubleshooting.md" in readme and "docs/configuration.md" in readme


def _loopd_docs(cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "docs", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=_quiet_env(XDG_CACHE_HOME=str(cache), **env),
        stdin=subprocess.DEVNULL,
    )


def test_loopd_docs_builds_the_site_once_and_again_when_it_is_older(tmp_path: Path) -> None:
    _require_mkdocs()
    cache = tmp_path / "cache"
    first = _loopd_docs(cache)
    assert first.returncode == 0, first.stderr
    index = Path(first.stdout.strip())
    assert index.name == "index.html" and index.is_file() and cache in index.parents
    assert "building the site" in first.stderr
    assert (index.parent / "troubleshooting.html").is_file()
    again = _loopd_docs(cache)
    assert again.returncode == 0 and again.stdout == first.stdout
    assert "building" not in again.stderr  # current: not built again
    os.utime(index, (0, 0))  # older than the docs
    stale = _loopd_docs(cache)
    assert stale.returncode == 0 and "building the site" in stale.stderr
    assert index.stat().st_mtime > 0


def test_loopd_docs_without_mkdocs_names_the_folder_and_how_to_build(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "mkdocs.py").write_text("raise ImportError('mkdocs is hidden by the test')\n")
    proc = _loopd_docs(tmp_path / "cache", PYTHONPATH=f"{hidden}{os.pathsep}{ROOT}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(ROOT / "docs")
    assert install_command("docs") in proc.stderr
    assert not (tmp_path / "cache").exists()


def test_troubleshooting_explains_every_cause_a_run_ends_with() -> None:
    """A new `Cause` (run.toml's `cause`) gets its row under "Why a run was escalated"."""
    from daemon.state.records import Cause

    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    table = page[page.index("## Why a run was escalated") :]
    fine = {Cause.PASSED, Cause.ALREADY_DONE, Cause.CANCELLED}
    missing = [c.value for c in Cause if c not in fine and f"`{c.value}`" not in table]
    assert missing == []


def _fix_texts(tree: ast.AST) -> list[str]:
    """The longest literal piece after `Fix: ` in each string of a module (f-strings too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if "Fix: " in text:
            pieces = [p.strip() for p in text.split("Fix: ", 1)[1].split("\0")]
            found.append(max(pieces, key=len)[:30])
    return [text for text in found if len(text) >= 10]


def test_troubleshooting_has_every_fix_loopd_prints() -> None:
    """Each `Fix: ...` of daemon/ is on the troubleshooting page (its first words, at least)."""

    def plain(text: str) -> str:
        return re.sub(r"\s+", " ", text.replace("`", "")).lower()

    page = plain((ROOT / "docs" / "troubleshooting.md").read_text())
    missing = [
        f"{path.relative_to(ROOT)}: {fix}"
        for path in sorted((ROOT / "daemon").rglob("*.py"))
        for fix in _fix_texts(ast.parse(path.read_text()))
        if plain(fix) not in page
    ]
    assert missing == []

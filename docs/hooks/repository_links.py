"""A mkdocs hook: links from docs/ to the repository's own files (../DEVELOPERS.md) work on
GitHub; in the site they become the file's name, and one to a missing file fails the build."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.repository_links")
# [text](../path) or [text](../path#anchor), outside code spans.
LINK = re.compile(r"\[([^\]]+)\]\(\.\./([^)#\s]+)(#[^)\s]*)?\)")


def _outside_docs(markdown: str, page_path: Path, repository: Path) -> str:
    """The page with each link to a repository file replaced by its text and the file's path."""

    def replace(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2)
        path = (page_path.parent / ".." / target).resolve()
        if not path.exists() or repository not in path.parents:
            log.warning("%s links to ../%s, which is not in the repository", page_path, target)
            return match.group(0)
        name = path.relative_to(repository).as_posix()
        return text if text.strip("`") == name else f"{text} (`{name}`)"

    return LINK.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Rewrite the page's links out of docs/ before mkdocs validates its links."""
    docs = Path(config["docs_dir"]).resolve()
    return _outside_docs(markdown, docs / page.file.src_path, docs.parent)

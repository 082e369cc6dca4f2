"""Symbolic links in a check tree that lead out of it: what the checks would read through
them is not what the commit holds (a fixed copy in the agent's HOME, a file of the host).

A link the commit adds or changes whose target, followed as the checks would follow it,
ends outside the tree fails the attempt (`link_out_of_tree`, naming it). A link the base
commit already holds with the same target is the repository's own and is left alone.
"""

from __future__ import annotations

import os
from pathlib import Path

from daemon.git.own import OwnGit

LINK_MODE = b"120000"
LISTED = 50  # links named at most, per check tree


def _links(own: OwnGit, commit: str) -> dict[bytes, bytes]:
    """Path to blob of every symbolic link `commit` holds."""
    out = own.bare.run("ls-tree", "-r", "-z", "--full-tree", commit).stdout
    found: dict[bytes, bytes] = {}
    for entry in out.split(b"\0"):
        head, _, path = entry.partition(b"\t")
        words = head.split()
        if len(words) == 3 and words[0] == LINK_MODE:
            found[path] = words[2]
    return found


def links_out(tree: Path, own: OwnGit, commit: str, base: str) -> list[tuple[str, str]]:
    """(path, target) of each link of `commit`, new since `base`, that leads out of `tree`."""
    links = _links(own, commit)
    if not links:
        return []
    before = _links(own, base) if base and base != commit else {}
    root = os.path.realpath(tree)
    found: list[tuple[str, str]] = []
    for raw, blob in sorted(links.items()):
        if before.get(raw) == blob:
            continue  # the repository's own link, unchanged
        path = tree / os.fsdecode(raw)
        resolved = os.path.realpath(path)
        if resolved == root or resolved.startswith(root + os.sep):
            continue
        try:
            target = os.readlink(path)
        except OSError:
            target = resolved
        found.append((os.fsdecode(raw), target))
        if len(found) >= LISTED:
            break
    return found

"""deny.py: the deny list under every home, what lies inside a denied path (as written and
through links), and the list's documented copy in docs/configuration.md."""

from __future__ import annotations

import re
from pathlib import Path

from daemon.sandbox.deny import DENIED_IN_HOME, denied_holding, denied_paths, inside
from tests.helpers import ROOT


def test_the_documented_deny_list_is_the_codes_in_order() -> None:
    """docs/configuration.md's sandbox section lists, for people, the paths never shown."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    start = text.index("under each home,", text.index("**deny list**"))
    listed = text[start : text.index("and every agent CLI", start)]
    assert tuple(re.findall(r"`([^`]+)`", listed)) == DENIED_IN_HOME
    for secret in (".ssh", ".gnupg", ".aws", ".kube", ".docker", ".netrc", ".git-credentials"):
        assert secret in DENIED_IN_HOME


def test_every_home_gets_every_name_once_and_extras_after() -> None:
    homes = [Path("/home/b"), Path("/home/a"), Path("/home/a")]
    denied = denied_paths(homes, extra=[".config/claude", ".ssh"])
    per_home = len(DENIED_IN_HOME) + 1  # .ssh given again is not listed twice
    assert len(denied) == 2 * per_home
    assert denied[0] == Path("/home/a/.ssh") and denied[per_home] == Path("/home/b/.ssh")
    assert denied[per_home - 1] == Path("/home/a/.config/claude")
    assert Path("/home/b/.kube") in denied and Path("/home/b/.cargo/credentials.toml") in denied
    assert denied_paths([]) == ()


def test_inside_is_the_folder_or_below_it_never_a_sibling_with_its_prefix() -> None:
    assert inside("/home/a/.ssh", "/home/a/.ssh")
    assert inside("/home/a/.ssh/id_ed25519", "/home/a/.ssh")
    assert inside(Path("/home/a/.ssh/x"), "/home/a/.ssh/")  # a folder written with its slash
    assert not inside("/home/a/.sshx", "/home/a/.ssh")
    assert not inside("/home/a/.ss", "/home/a/.ssh")
    assert not inside("/home/a", "/home/a/.ssh")
    assert inside("/anything", "/")
    # Only slashes are trimmed from the folder, whatever letter its name ends in.
    assert inside("/srv/LINUX/x", "/srv/LINUX") and not inside("/srv/LINU/x", "/srv/LINUX")


def test_a_path_is_denied_as_written_or_as_it_resolves(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("key")
    denied = denied_paths([home])
    assert denied_holding(home / ".aws" / "credentials", denied) == home / ".aws"
    assert denied_holding(home / ".aws", denied) == home / ".aws"
    # A denied path that does not exist yet is denied as written.
    assert denied_holding(home / ".gnupg" / "later", denied) == home / ".gnupg"
    # A link to it from elsewhere leads in: denied by where it resolves.
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "creds").symlink_to(home / ".aws" / "credentials")
    assert denied_holding(tmp_path / "work" / "creds", denied) == home / ".aws"
    # A link inside a denied folder that leads out is still inside it, as written.
    (home / ".ssh").mkdir()
    (home / ".ssh" / "out").symlink_to(tmp_path / "work")
    assert denied_holding(home / ".ssh" / "out", denied) == home / ".ssh"
    assert denied_holding(home / "project", denied) is None
    assert denied_holding(tmp_path / "work", denied) is None

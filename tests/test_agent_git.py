"""The agent's repository is untrusted data: loopd reads a clone's git directory outside the
sandbox only after an lstat walk shows no link, no special file and nothing that points git
elsewhere; what git says of it is escaped; files over `[limits] max_file_size` never reach the
person's repository. Hostile `command` agents under the real bubblewrap, real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

from daemon.git.agent import untrusted_git_dir
from daemon.git.integrity import too_large
from daemon.git.own import OwnGit
from tests.helpers import git, make_repo
from tests.sandboxing import once_record, require_bwrap, script_home, state_text

FILES = {"calc.py": "def add(a, b):\n    return a - b\n", "check.py": "import calc\n"
         "assert calc.add(2, 3) == 5\n"}  # fmt: skip


def _home(tmp_path: Path, script: str, limits: str = "") -> tuple[Path, Path]:
    return script_home(tmp_path, script, FILES, limits)


def _run(home: Path) -> dict:
    return once_record(home)


def test_links_and_alternates_in_the_agents_git_pull_nothing_into_the_persons_repo(
    tmp_path: Path,
) -> None:
    require_bwrap()
    secret = make_repo(tmp_path / "secret", {"secret.txt": "kept elsewhere\n"})
    hidden_commit = git(secret, "rev-parse", "HEAD")
    script = f"""
import os, pathlib, shutil
p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))
git = pathlib.Path('.git')
(git / 'objects' / 'info' / 'alternates').write_text({str(secret / ".git" / "objects")!r} + '\\n')
shutil.rmtree(git / 'refs' / 'heads')
os.symlink({str(secret / ".git" / "refs" / "heads")!r}, git / 'refs' / 'heads')
"""
    home, repo = _home(tmp_path, script)
    run = _run(home)
    assert (
        subprocess.run(
            ["git", "-C", str(repo), "cat-file", "-e", hidden_commit], capture_output=True
        ).returncode
        != 0
    ), "a commit of a repository the sandbox hides reached the person's"
    (attempt,) = run["attempts"]
    details = [v["detail"] for v in attempt["violations"] if v["kind"] == "git_dir"]
    assert details and ("symbolic link" in details[0] or "alternates" in details[0]), attempt


def test_a_packed_refs_link_to_a_host_file_puts_none_of_it_anywhere(tmp_path: Path) -> None:
    require_bwrap()
    host = tmp_path / "host-file"
    host.write_text("CANARY-LINE-OF-A-HOST-FILE\n")
    script = f"""
import os, pathlib
p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))
packed = pathlib.Path('.git') / 'packed-refs'
if packed.exists():
    packed.unlink()
os.symlink({str(host)!r}, packed)
"""
    home, _ = _home(tmp_path, script)
    run = _run(home)
    assert "CANARY-LINE-OF-A-HOST-FILE" not in state_text(home)
    prompt = "".join(p.read_text() for p in (home / "state").rglob("prompt.md"))
    assert "CANARY" not in prompt
    (attempt,) = run["attempts"]
    details = [v["detail"] for v in attempt["violations"] if v["kind"] == "git_dir"]
    assert details and "packed-refs" in details[0]


def test_the_walk_allows_loopds_own_clone_and_names_each_indirection(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    dot = repo / ".git"
    mine = f"{tmp_path / 'objects'}\n"
    assert untrusted_git_dir(dot, mine) == ""
    (dot / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (dot / "objects" / "info" / "alternates").write_text(mine)
    assert untrusted_git_dir(dot, mine) == ""  # the line loopd itself wrote
    (dot / "objects" / "info" / "alternates").write_text("/elsewhere/objects\n")
    assert "alternates" in untrusted_git_dir(dot, mine)
    (dot / "objects" / "info" / "alternates").write_text(mine)
    (dot / "commondir").write_text("/elsewhere\n")
    assert "commondir" in untrusted_git_dir(dot, mine)
    (dot / "commondir").unlink()
    with open(dot / "config", "a") as fh:
        fh.write("[include]\n\tpath = /etc/passwd\n")
    assert "includes" in untrusted_git_dir(dot, mine)


def test_a_file_over_max_file_size_is_named_and_kept_out(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "big.bin").write_bytes(b"x" * (2 << 20))
    (repo / "small.txt").write_text("fine\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "big")
    own = OwnGit(repo / ".git", repo)
    found = too_large(own, git(repo, "rev-parse", "HEAD"), base, 1 << 20)
    assert [(v.kind, v.target) for v in found] == [("too_large", "big.bin")]
    assert too_large(own, git(repo, "rev-parse", "HEAD"), base, 4 << 20) == []


def test_the_agent_cannot_write_a_file_over_max_file_size(tmp_path: Path) -> None:
    require_bwrap()
    script = """
import pathlib
try:
    with open('big.bin', 'wb') as fh:
        for _ in range(3):
            fh.write(b'x' * (1 << 20)); fh.flush()
    pathlib.Path('wrote.txt').write_text('all')
except OSError as exc:
    pathlib.Path('wrote.txt').write_text(f'refused {exc}')
"""
    home, repo = _home(tmp_path, script, 'max_file_size = "1MB"\n')
    run = _run(home)
    wrote = git(repo, "show", f"{run['branch']}:wrote.txt")
    assert wrote.startswith("refused"), wrote

"""An attempt's diff: numstat counted at commit time, the patch streamed, redacted and capped;
git that hangs is a GitError."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from daemon.git.diffs import numstat, record_diff
from daemon.git.safe import Git, GitError, GitTimeout
from daemon.people.digest import attempt_diffstat, format_stat
from tests.helpers import commit_all, git, make_repo

AWS_KEY = "AKIA" + "Z7Q3XK2M4N5P6R7T"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "repo",
        {"app.py": "def add(a, b):\n    return a - b\n", "old.txt": "one\ntwo\nthree\n"},
    )


def change(repo: Path) -> tuple[Git, str, str]:
    g = Git(repo)
    base = g.out("rev-parse", "HEAD")
    (repo / "app.py").write_text("def add(a, b):\n    return a + b\n")
    git(repo, "mv", "old.txt", "renamed.txt")
    (repo / "notes.md").write_text(f"one\nkey: {AWS_KEY}\n")
    (repo / "logo.bin").write_bytes(bytes(range(256)))
    head = commit_all(g, "loopd: attempt")
    assert head
    return g, base, head


def test_numstat_counts_each_file_with_its_status(repo: Path) -> None:
    g, base, head = change(repo)
    stat = numstat(g, base, head)
    by_path = {c.path: c for c in stat.files}
    assert by_path["app.py"].stat() == "app.py (+1 -1)"
    assert by_path["renamed.txt"].status == "renamed"
    assert by_path["notes.md"].stat() == "notes.md (+2 -0, added)"
    assert by_path["logo.bin"].stat() == "logo.bin (binary, added)"
    assert (stat.total_files, stat.added, stat.removed) == (4, 3, 1)


def test_record_diff_writes_the_counts_and_a_redacted_patch(repo: Path, tmp_path: Path) -> None:
    g, base, head = change(repo)
    folder = tmp_path / "attempt-1"
    stat = record_diff(g, base, head, folder)
    patch = (folder / "diff.patch").read_text()
    assert "+    return a + b" in patch and "GIT binary patch" in patch
    assert AWS_KEY not in patch and "[REDACTED:aws-access-key]" in patch
    assert not stat.patch_capped and stat.patch_bytes == len(patch.encode())
    assert attempt_diffstat(folder) == stat  # what `show` and the digest read
    assert json.loads((folder / "diffstat.json").read_text())["total_files"] == 4
    # What people read comes from the counts, not from the patch.
    (folder / "diff.patch").write_text("")
    assert attempt_diffstat(folder) == stat
    assert "4 files changed, +3 -1" in format_stat(stat)


def test_a_patch_over_its_cap_is_cut_on_a_line_and_marked(repo: Path, tmp_path: Path) -> None:
    g = Git(repo)
    base = g.out("rev-parse", "HEAD")
    (repo / "big.log").write_text("".join(f"line {i} of the log\n" for i in range(20000)))
    head = commit_all(g, "big")
    assert head
    folder = tmp_path / "attempt-1"
    stat = record_diff(g, base, head, folder, cap=10_000)
    patch = (folder / "diff.patch").read_text()
    body, marker = patch.rsplit("\n[... ", 1)
    assert len(body.encode()) <= 10_000 and body.endswith("\n")
    assert marker.startswith("diff.patch capped at 10000 bytes; the whole diff: git diff ")
    assert stat.patch_capped and stat.total_files == 1 and stat.added == 20000
    assert "(diff.patch was capped at" in format_stat(stat)[-1]


def test_a_patch_recorded_before_diffstat_json_is_counted_from_the_streamed_patch(
    repo: Path, tmp_path: Path
) -> None:
    g, base, head = change(repo)
    folder = tmp_path / "attempt-1"
    folder.mkdir()
    (folder / "diff.patch").write_text(
        git(repo, "diff", "--binary", "--no-renames", base, head) + "\n"
    )
    stat = attempt_diffstat(folder)
    assert stat is not None
    assert {c.path for c in stat.files} == {
        "app.py",
        "old.txt",
        "renamed.txt",
        "notes.md",
        "logo.bin",
    }


def hang_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `git` first on PATH that hangs on `status` and `diff`, like one stuck on a lock."""
    real = shutil.which("git")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "git"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in status|diff) exec sleep 60;; esac; done\n'
        f'exec {real} "$@"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_hung_git_command_is_a_git_error(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hang_git(tmp_path, monkeypatch)
    g = Git(repo)
    with pytest.raises(GitTimeout) as caught:
        g.run("status", "--porcelain", timeout=0.5)
    assert isinstance(caught.value, GitError) and "timed out" in str(caught.value)
    with pytest.raises(GitTimeout):
        list(g.stream("diff", "HEAD", timeout=0.5))


def test_a_failing_streamed_command_raises_after_its_output(repo: Path) -> None:
    with pytest.raises(GitError) as caught:
        list(Git(repo).stream("diff", "no-such-commit", "HEAD"))
    assert "no-such-commit" in caught.value.stderr

"""loopd's git on a tree whose config names programs: none of them may run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from daemon.git.diffs import record_diff
from daemon.git.guards import (
    changed_paths,
    check_refs,
    protect_violations,
    restore_paths,
    snapshot_refs,
)
from daemon.git.safe import Git
from tests.helpers import commit_all, git, make_repo


def booby_trap(repo: Path, marker: Path, filter_name: str = "evil", process: bool = True) -> None:
    """Point every repository-configured program at a script that creates `marker`."""
    script = repo.parent / "trap.sh"
    script.write_text(f'#!/bin/sh\necho "$0 $*" >> "{marker}"\ncat\n')
    os.chmod(script, 0o755)
    s = str(script)
    (repo / ".gitattributes").write_text(f"* filter={filter_name} diff=evil\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    for key, value in (
        ("core.fsmonitor", s),
        (f"filter.{filter_name}.clean", s),
        (f"filter.{filter_name}.smudge", s),
        (f"filter.{filter_name}.required", "true"),
        ("diff.evil.textconv", s),
        ("diff.evil.command", s),
        ("diff.external", s),
        ("core.pager", s),
        ("gpg.program", s),
        ("commit.gpgsign", "true"),
    ):
        git(repo, "config", key, value)
    if process:
        git(repo, "config", f"filter.{filter_name}.process", s)
    hooks = repo / ".git" / "hooks"
    for hook in ("pre-commit", "post-commit", "post-checkout", "reference-transaction"):
        (hooks / hook).write_text(f'#!/bin/sh\necho "{hook}" >> "{marker}"\n')
        os.chmod(hooks / hook, 0o755)


def exercise(repo: Path) -> None:
    g = Git(repo)
    base = g.out("rev-parse", "HEAD")
    refs = snapshot_refs(g)
    (repo / "tests").mkdir(exist_ok=True)
    (repo / "tests" / "t.txt").write_text("changed\n")
    (repo / "a.txt").write_text("a change\n")
    head = commit_all(g, "loopd: attempt")
    assert head
    stat = record_diff(g, base, head, repo.parent / "attempt")
    assert "changed" in (repo.parent / "attempt" / "diff.patch").read_text()
    assert [c.path for c in stat.files] == ["a.txt", "tests/t.txt"]
    assert sorted(changed_paths(g, base, head)) == ["a.txt", "tests/t.txt"]
    assert g.refs()["refs/heads/main"] == head
    assert g.is_clean()
    violations = protect_violations(g, base, head, ["tests/**"])
    assert violations == ["tests/t.txt"]
    restore_paths(g, base, violations)
    git(repo, "-c", "core.hooksPath=/dev/null", "tag", "moved")
    assert check_refs(g, refs, "main") == ["refs/tags/moved"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"tests/t.txt": "t\n", "a.txt": "a\n"})


def test_repository_programs_never_run(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    booby_trap(repo, marker)
    exercise(repo)
    assert not marker.exists(), marker.read_text()


def test_a_filter_named_lfs_that_is_not_git_lfs_never_runs(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    booby_trap(repo, marker, filter_name="lfs", process=False)
    exercise(repo)
    assert not marker.exists(), marker.read_text()


def test_changed_paths_lists_both_sides_of_a_rename(repo: Path) -> None:
    g = Git(repo)
    base = g.out("rev-parse", "HEAD")
    git(repo, "mv", "tests/t.txt", "t.txt")
    git(repo, "commit", "-q", "-m", "move out")
    assert "tests/t.txt" in changed_paths(g, base, g.out("rev-parse", "HEAD"))


def test_an_lfs_filter_that_only_starts_like_git_lfs_never_runs(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    (repo / ".gitattributes").write_text("*.txt filter=lfs\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    git(repo, "config", "filter.lfs.process", f"git-lfs filter-process; touch {marker}")
    git(repo, "config", "filter.lfs.clean", f"git-lfs clean -- %f; touch {marker}")
    git(repo, "config", "filter.lfs.smudge", "git-lfs smudge -- %f")
    git(repo, "config", "filter.lfs.required", "true")
    (repo / "a.txt").write_text("changed\n")
    assert commit_all(Git(repo), "loopd: attempt")
    assert not marker.exists()


def test_git_and_what_it_runs_get_a_minimal_environment(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("LOOPD_VERIFIER_KEY", "sk-not-for-git")
    monkeypatch.setenv("GIT_DIR", "/elsewhere")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/user/0/agent.sock")
    seen = Git(repo).out("-c", "alias.showenv=!env", "showenv")
    names = {line.split("=", 1)[0] for line in seen.splitlines() if "=" in line}
    assert not {"AWS_SECRET_ACCESS_KEY", "LOOPD_VERIFIER_KEY", "SSH_AUTH_SOCK"} & names
    assert "GIT_CONFIG_NOSYSTEM=1" in seen and "GIT_CONFIG_GLOBAL=/dev/null" in seen
    assert "GIT_NO_REPLACE_OBJECTS=1" in seen
    assert Git(repo).out("rev-parse", "--absolute-git-dir") == str(repo / ".git")

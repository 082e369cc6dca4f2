"""protect and refs guards on real repositories and worktrees."""

from __future__ import annotations

from pathlib import Path

from daemon.runs.git import Git
from daemon.runs.guards import (
    RESTORE_MESSAGE,
    check_refs,
    protect_violations,
    restore_paths,
    snapshot_refs,
)
from tests.helpers import git, make_repo

FILES = {
    "tests/test_app.py": "def test_ok():\n    assert 1 + 1 == 2\n",
    "tests/data/fixture.json": "{}\n",
    "src/app.py": "print('hi')\n",
    "README.md": "hello\n",
}


def worktree(tmp_path: Path) -> tuple[Path, Path, str]:
    repo = make_repo(tmp_path / "repo", FILES)
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "loopd/app/RUN1", str(wt))
    return repo, wt, git(repo, "rev-parse", "HEAD")


def test_protected_changes_are_found_and_restored(tmp_path: Path) -> None:
    _, wt, base = worktree(tmp_path)
    g = Git(wt)
    # The agent weakens a test, deletes a fixture, adds a test file, moves one out of tests/.
    (wt / "tests" / "test_app.py").write_text("def test_ok():\n    assert True\n")
    (wt / "tests" / "data" / "fixture.json").unlink()
    (wt / "tests" / "test_new.py").write_text("def test_new():\n    pass\n")
    (wt / "src" / "app.py").write_text("print('changed')\n")
    head = g.commit_all("loopd: attempt 1")
    assert head
    git(wt, "mv", "tests/test_app.py", "moved_out.py")
    git(wt, "commit", "-q", "-m", "rename out of tests")
    head = git(wt, "rev-parse", "HEAD")

    violations = protect_violations(g, base, head, ["tests/**"])
    assert violations == ["tests/data/fixture.json", "tests/test_app.py", "tests/test_new.py"]
    assert protect_violations(g, base, head, []) == []
    assert protect_violations(g, base, head, ["docs/**"]) == []

    restored = restore_paths(g, base, violations)
    assert restored == git(wt, "rev-parse", "HEAD")
    assert (
        git(wt, "log", "-1", "--format=%an <%ae> %s")
        == f"loopd <loopd@localhost> {RESTORE_MESSAGE}"
    )
    assert (wt / "tests" / "test_app.py").read_text() == FILES["tests/test_app.py"]
    assert (wt / "tests" / "data" / "fixture.json").read_text() == "{}\n"
    assert not (wt / "tests" / "test_new.py").exists()
    # Everything else the agent did stays: the next attempt builds on it.
    assert (wt / "src" / "app.py").read_text() == "print('changed')\n"
    assert (wt / "moved_out.py").exists()
    assert protect_violations(g, base, restored, ["tests/**"]) == []
    assert g.is_clean()
    assert restore_paths(g, base, violations) is None  # nothing left to put back


def test_restore_handles_awkward_path_names(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"tests/[a]*.py": "x = 1\n", "tests/b c.py": "y\n"})
    base = git(repo, "rev-parse", "HEAD")
    (repo / "tests" / "[a]*.py").write_text("x = 2\n")
    (repo / "tests" / "b c.py").unlink()
    (repo / "tests" / "-n.py").write_text("new\n")
    g = Git(repo)
    head = g.commit_all("agent")
    violations = protect_violations(g, base, head, ["tests/"])
    assert violations == ["tests/-n.py", "tests/[a]*.py", "tests/b c.py"]
    restore_paths(g, base, violations)
    assert (repo / "tests" / "[a]*.py").read_text() == "x = 1\n"
    assert (repo / "tests" / "b c.py").read_text() == "y\n"
    assert not (repo / "tests" / "-n.py").exists()


def test_moved_refs_are_found_and_left_where_they_are(tmp_path: Path) -> None:
    repo, wt, base = worktree(tmp_path)
    git(repo, "commit", "-q", "--allow-empty", "-m", "second on main")
    git(repo, "tag", "-a", "-m", "annotated", "v0")
    main_before = git(repo, "rev-parse", "main")
    g = Git(repo)
    before = snapshot_refs(g)
    assert before["refs/heads/main"] == main_before

    # The agent works on its branch (allowed), resets main, tags, deletes a tag, makes a
    # branch, and moves an earlier run's branch: loopd's own namespace is not trusted either.
    git(repo, "branch", "loopd/app/RUN0", base)
    before = snapshot_refs(g)
    git(wt, "commit", "-q", "--allow-empty", "-m", "agent work")
    git(wt, "update-ref", "refs/heads/main", "HEAD~1")
    git(wt, "tag", "evil")
    git(wt, "tag", "-d", "v0")
    git(wt, "branch", "sneaky", base)
    git(wt, "update-ref", "refs/heads/loopd/app/RUN0", "HEAD")
    # Another run's branch appearing meanwhile: loopd made it, and its ledger says so.
    git(repo, "branch", "loopd/other/RUN2", base)

    explained = {"refs/heads/loopd/other/RUN2": {base}}
    moved = check_refs(g, before, "loopd/app/RUN1", explained)
    assert moved == [
        "refs/heads/loopd/app/RUN0",
        "refs/heads/main",
        "refs/heads/sneaky",
        "refs/tags/evil",
        "refs/tags/v0",
    ]
    # Unexplained without the ledger's word; a ledger value other than the ref's is no excuse.
    assert "refs/heads/loopd/other/RUN2" in check_refs(g, before, "loopd/app/RUN1")
    wrong = {"refs/heads/main": {main_before}}
    assert "refs/heads/main" in check_refs(g, before, "loopd/app/RUN1", wrong)
    # Nothing was put back.
    assert git(repo, "rev-parse", "main") != main_before


def test_untouched_refs_are_no_violation(tmp_path: Path) -> None:
    repo, wt, _ = worktree(tmp_path)
    g = Git(repo)
    before = snapshot_refs(g)
    git(wt, "commit", "-q", "--allow-empty", "-m", "only its own branch")
    assert check_refs(g, before, "loopd/app/RUN1") == []
    assert check_refs(g, before, "refs/heads/loopd/app/RUN1") == []

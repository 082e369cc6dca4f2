"""protect and refs guards on real repositories and worktrees."""

from __future__ import annotations

from pathlib import Path

from daemon.git.guards import (
    RESTORE_MESSAGE,
    check_refs,
    protect_violations,
    restore_paths,
    snapshot_refs,
)
from daemon.git.safe import Git
from tests.helpers import commit_all, git, make_repo

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
    head = commit_all(g, "loopd: attempt 1")
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
    head = commit_all(g, "agent")
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


# -- the ref ledger --------------------------------------------------------------------------


def test_the_ledger_explains_only_loopds_moves_since_a_snapshot(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from daemon.state.ledger import LedgerEntry, RefLedger

    ledger = RefLedger(tmp_path / "state" / "ref-ledger.jsonl")
    t0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    ledger.record(
        [
            LedgerEntry(ts=t0 - timedelta(hours=1), repo="/r", ref="refs/heads/a", new="1"),
            LedgerEntry(ts=t0, repo="/r", ref="refs/heads/b", new="2"),
            LedgerEntry(ts=t0, repo="/other", ref="refs/heads/b", new="3"),
            LedgerEntry(ts=t0 + timedelta(seconds=5), repo="/r", ref="refs/heads/c", new=""),
        ]
    )
    (tmp_path / "state" / "ref-ledger.jsonl").open("a").write('{"torn": ')
    assert ledger.explains("/r", t0) == {"refs/heads/b": {"2"}, "refs/heads/c": {""}}
    assert ledger.explains("/r", None)["refs/heads/a"] == {"1"}
    assert ledger.trim(t0 + timedelta(days=7, seconds=-1)) == 2  # the old one, the torn line
    assert [e.ref for e in ledger.entries("/r")] == ["refs/heads/b", "refs/heads/c"]
    ledger.record([LedgerEntry(ts=t0, repo="/r", ref="refs/heads/d", new="4")])
    assert "refs/heads/d" in ledger.explains("/r", t0)


# -- config, hooks and info of the user's repository ----------------------------------------


def test_repository_files_are_put_back_links_and_folders_included(tmp_path: Path) -> None:
    import os

    from daemon.git.repofiles import restore_files, take_snapshot

    repo = make_repo(tmp_path / "repo", FILES)
    common = repo / ".git"
    shared = tmp_path / "shared-hooks"
    shared.mkdir()
    (shared / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    os.symlink(shared / "pre-commit", common / "hooks" / "pre-commit")  # the person's own link
    (common / "hooks" / "post-merge").write_text("#!/bin/sh\necho mine\n")
    (common / "hooks" / "post-merge").chmod(0o755)
    snapshot = take_snapshot(common)
    config = (common / "config").read_bytes()

    # The agent: new hook, a hook made non-executable, a link repointed, a new folder under
    # info/, the exclude file deleted, config changed.
    (common / "hooks" / "post-commit").write_text("#!/bin/sh\ntouch /tmp/x\n")
    (common / "hooks" / "post-merge").chmod(0o644)
    os.unlink(common / "hooks" / "pre-commit")
    os.symlink("/bin/true", common / "hooks" / "pre-commit")
    (common / "info" / "deep" / "er").mkdir(parents=True)
    (common / "info" / "deep" / "er" / "f").write_text("x")
    (common / "info" / "exclude").unlink()
    git(repo, "config", "core.fsmonitor", "/tmp/evil")

    found = restore_files(common, snapshot)
    assert sorted((v.kind, v.target) for v in found) == [
        ("repo_config", "config"),
        ("repo_hook", "hooks/post-commit"),
        ("repo_hook", "hooks/post-merge"),
        ("repo_hook", "hooks/pre-commit"),
        ("repo_info", "info/deep"),
        ("repo_info", "info/exclude"),
    ]
    assert (common / "config").read_bytes() == config
    assert not (common / "hooks" / "post-commit").exists()
    assert os.access(common / "hooks" / "post-merge", os.X_OK)
    assert os.readlink(common / "hooks" / "pre-commit") == str(shared / "pre-commit")
    assert (shared / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"
    assert not (common / "info" / "deep").exists() and (common / "info" / "exclude").exists()
    assert restore_files(common, snapshot) == []


def test_a_hooks_folder_replaced_by_a_link_is_put_back_without_touching_its_target(
    tmp_path: Path,
) -> None:
    import os
    import shutil

    from daemon.git.repofiles import restore_files, take_snapshot

    repo = make_repo(tmp_path / "repo", FILES)
    common = repo / ".git"
    snapshot = take_snapshot(common)
    before = sorted(p.name for p in (common / "hooks").iterdir())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not loopd's to delete\n")
    shutil.rmtree(common / "hooks")
    os.symlink(elsewhere, common / "hooks")
    found = restore_files(common, snapshot)
    assert [(v.kind, v.target) for v in found] == [("repo_hook", "hooks")]
    assert (common / "hooks").is_dir() and not (common / "hooks").is_symlink()
    assert sorted(p.name for p in (common / "hooks").iterdir()) == before
    assert (elsewhere / "keep.txt").read_text() == "not loopd's to delete\n"

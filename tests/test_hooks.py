"""Git hooks: real repositories, real commits and pushes, the real wrapper and hook script."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from daemon.globs import any_branch_matches
from daemon.scheduling import hook_script
from daemon.scheduling.hooks import (
    HOOK_NAMES,
    REFS_HOOKS,
    HookError,
    hooks_dir,
    install_hooks,
    uninstall_hooks,
)
from daemon.state.store import StateStore
from tests.helpers import (
    git,
    loopd,
    make_home,
    make_repo,
    start_daemon,
    stop_daemon,
    take_triggers,
    wait_for,
)

AGENT = '[agents.a]\nadapter = "command"\ncommand = ["true"]\n'


def loop_toml(repo: Path, on_push: list[str]) -> str:
    return f'repo = "{repo}"\ntask = "t"\nagent = "a"\non_push = {json.dumps(on_push)}\n'


def inbox(home: Path) -> list[dict]:
    """The triggers the hooks' records make, as the daemon's intake makes them."""
    folder = home / "state" / "inbox"
    if not folder.is_dir():
        return []
    hook_script.take_records(str(folder))
    return [
        json.loads(p.read_text())
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name.endswith(".json") and not p.name.startswith(".")
    ]


def folder_state(folder: Path) -> dict[str, tuple[bytes, int, bool]]:
    out = {}
    for p in sorted(folder.iterdir()):
        st = p.lstat()
        data = os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
        out[p.name] = (data, stat.S_IMODE(st.st_mode), p.is_symlink())
    return out


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "repo")
    home = make_home(tmp_path / "home", AGENT, {"app": loop_toml(repo, ["main", "release/*"])})
    return home, repo


def test_commit_on_watched_branch_is_one_trigger_and_other_branch_none(setup) -> None:
    home, repo = setup
    changed = install_hooks(home, repo, {"app": ["main", "release/*"]})
    assert {p.name for p in changed} >= set(REFS_HOOKS) | {"loopd-hooks.json"}
    # git 2.28+ reports each update to reference-transaction: no commit hook costs a process.
    assert not (hooks_dir(repo) / "post-commit").exists()
    old = git(repo, "rev-parse", "HEAD")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "work")
    new = git(repo, "rev-parse", "HEAD")
    triggers = inbox(home)
    assert len(triggers) == 1  # post-commit and reference-transaction both ran
    t = triggers[0]
    assert (t["loop"], t["kind"], t["ref"], t["old"], t["new"]) == (
        "app",
        "push",
        "refs/heads/main",
        old,
        new,
    )
    assert "main" in t["reason"]
    assert stat.S_IMODE((home / "state" / "inbox").stat().st_mode) == 0o700

    git(repo, "checkout", "-q", "-b", "feature/x")
    git(repo, "commit", "-q", "--allow-empty", "-m", "elsewhere")
    git(repo, "checkout", "-q", "-b", "loopd/app/20260101T000000Z-app-abcd")
    git(repo, "commit", "-q", "--allow-empty", "-m", "loopd's own branch")
    assert len(inbox(home)) == 1

    git(repo, "checkout", "-q", "-b", "release/2")
    git(repo, "commit", "-q", "--allow-empty", "-m", "release")
    assert [t["ref"] for t in inbox(home)][-1] == "refs/heads/release/2" or any(
        t["ref"] == "refs/heads/release/2" for t in inbox(home)
    )
    assert len(inbox(home)) == 2


def test_trigger_waits_in_inbox_and_parses_as_trigger(setup) -> None:
    home, repo = setup
    install_hooks(home, repo, {"app": ["main"]})
    git(repo, "commit", "-q", "--allow-empty", "-m", "no daemon runs")
    waiting = list((home / "state" / "inbox").glob("*.hook"))
    assert len(waiting) == 1 and waiting[0].read_text().endswith("\nend\n")  # whole, at once
    store = StateStore(home / "state")
    hook_script.take_records(str(store.inbox_dir))
    assert not list((home / "state" / "inbox").glob("*.hook"))
    taken = take_triggers(store)
    assert [(t.loop, t.kind, t.ref) for t in taken] == [("app", "push", "refs/heads/main")]
    assert taken[0].ts.tzinfo is not None
    assert take_triggers(store) == []


def test_amend_and_merge_are_triggers_once_each(setup) -> None:
    home, repo = setup
    install_hooks(home, repo, {"app": ["main"]})
    git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    git(repo, "commit", "-q", "--amend", "--allow-empty", "-m", "one, amended")
    git(repo, "checkout", "-q", "-b", "topic")
    git(repo, "commit", "-q", "--allow-empty", "-m", "topic work")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge topic", "topic")
    news = [t["new"] for t in inbox(home)]
    assert len(news) == len(set(news)) == 3
    assert news[-1] == git(repo, "rev-parse", "HEAD")


def test_push_into_bare_repository_is_one_trigger_per_matching_branch(tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    home = make_home(tmp_path / "home", AGENT, {"app": loop_toml(bare, ["main", "release/*"])})
    proc = loopd(home, "hooks", "install")
    assert proc.returncode == 0, proc.stderr
    assert (bare / "hooks" / "post-receive").is_file()

    work = make_repo(tmp_path / "work")
    git(work, "branch", "release/1")
    git(work, "branch", "feature/x")
    git(work, "remote", "add", "origin", str(bare))
    git(work, "push", "-q", "origin", "main", "release/1", "feature/x")
    triggers = inbox(home)
    assert sorted(t["ref"] for t in triggers) == ["refs/heads/main", "refs/heads/release/1"]
    assert all(t["old"] == "" for t in triggers)  # new branches: no old commit

    git(work, "commit", "-q", "--allow-empty", "-m", "more")
    git(work, "push", "-q", "origin", "main")
    triggers = inbox(home)
    assert len(triggers) == 3
    assert triggers[-1]["new"] == git(work, "rev-parse", "HEAD")
    # A deleted branch is no trigger.
    git(work, "push", "-q", "origin", ":release/1")
    assert len(inbox(home)) == 3


def test_existing_hooks_still_run_and_uninstall_restores_them(setup, tmp_path: Path) -> None:
    home, repo = setup
    folder = hooks_dir(repo)
    log = tmp_path / "user-hooks.log"
    (folder / "post-commit").write_text(f'#!/bin/sh\necho "post-commit $*" >> "{log}"\nexit 3\n')
    os.chmod(folder / "post-commit", 0o750)
    (folder / "reference-transaction").write_text(
        "#!/bin/sh\n"
        f'echo "rt $1 $(cat | wc -l)" >> "{log}"\n'
        'if [ -e BLOCK ] && [ "$1" = prepared ]; then exit 1; fi\n'
    )
    os.chmod(folder / "reference-transaction", 0o755)
    os.symlink("post-commit", folder / "post-merge")
    before = folder_state(folder)

    install_hooks(home, repo, {"app": ["main"]})
    install_hooks(home, repo, {"app": ["main"]})
    git(repo, "commit", "-q", "--allow-empty", "-m", "with user hooks")
    lines = log.read_text().splitlines()
    assert "post-commit " in lines
    # HEAD and refs/heads/main, on the user hook's stdin in both phases.
    assert "rt prepared 2" in lines and "rt committed 2" in lines
    assert len(inbox(home)) == 1

    # The user's reference-transaction exit code still matters: it can abort the update.
    (repo / "BLOCK").write_text("")
    head = git(repo, "rev-parse", "HEAD")
    proc = subprocess.run(
        ["git", "commit", "-q", "--allow-empty", "-m", "blocked"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert git(repo, "rev-parse", "HEAD") == head
    (repo / "BLOCK").unlink()

    changed = uninstall_hooks(home, repo)
    assert changed
    assert folder_state(folder) == before


def test_install_twice_changes_nothing_and_uninstall_leaves_no_trace(setup) -> None:
    home, repo = setup
    folder = hooks_dir(repo)
    before = folder_state(folder)
    install_hooks(home, repo, {"app": ["main"]})
    installed = folder_state(folder)
    mtimes = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert install_hooks(home, repo, {"app": ["main"]}) == []
    assert folder_state(folder) == installed
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == mtimes
    uninstall_hooks(home, repo)
    assert folder_state(folder) == before
    assert uninstall_hooks(home, repo) == []


def test_a_conflicting_leftover_is_refused_without_touching_anything(setup) -> None:
    home, repo = setup
    folder = hooks_dir(repo)
    (folder / "reference-transaction").write_text("#!/bin/sh\nexit 0\n")
    (folder / "reference-transaction.loopd-orig").write_text("#!/bin/sh\nexit 0\n")
    before = folder_state(folder)
    with pytest.raises(HookError, match="reference-transaction.loopd-orig"):
        install_hooks(home, repo, {"app": ["main"]})
    assert folder_state(folder) == before


def test_shell_metacharacters_in_branch_and_message_are_data(setup, tmp_path: Path) -> None:
    home, repo = setup
    install_hooks(home, repo, {"app": ["**"]})
    marker = tmp_path / "pwned"
    names = [
        'x";touch${IFS}/tmp/pwned;#',
        f'y";touch${{IFS}}{marker};#',
        f"z$(touch${{IFS}}{marker})",
        f"w`touch {marker}`".replace(" ", "-"),
    ]
    pwned_before = Path("/tmp/pwned").exists()
    for name in names:
        git(repo, "checkout", "-q", "-b", name, "main")
        git(repo, "commit", "-q", "--allow-empty", "-m", f'$(touch {marker}); `touch {marker}`; "')
    refs = [t["ref"] for t in inbox(home)]
    assert refs == [f"refs/heads/{n}" for n in names]
    assert not marker.exists()
    assert Path("/tmp/pwned").exists() == pwned_before


def test_a_broken_config_never_fails_git_and_is_logged(setup) -> None:
    home, repo = setup
    install_hooks(home, repo, {"app": ["main"]})
    (hooks_dir(repo) / "loopd-hooks.json").write_text("{not json")
    git(repo, "commit", "-q", "--allow-empty", "-m", "still works")
    assert inbox(home) == []
    assert "JSONDecodeError" in (hooks_dir(repo) / "loopd-hooks.log").read_text()


def test_a_vanished_home_never_fails_git(setup) -> None:
    home, repo = setup
    install_hooks(home, repo, {"app": ["main"]})
    moved = home.with_name("home-moved")
    home.rename(moved)
    git(repo, "commit", "-q", "--allow-empty", "-m", "home is gone")
    assert not home.exists()


def test_core_hooks_path_is_respected_and_shared_folders_match_their_repository(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared-hooks"
    one = make_repo(tmp_path / "one")
    two = make_repo(tmp_path / "two")
    for repo in (one, two):
        git(repo, "config", "core.hooksPath", str(shared))
    home = make_home(tmp_path / "home", AGENT, {"app": loop_toml(one, ["main"])})
    install_hooks(home, one, {"app": ["main"]})
    assert (shared / "reference-transaction").is_file()
    assert not (one / ".git" / "hooks" / "reference-transaction").exists()
    git(two, "commit", "-q", "--allow-empty", "-m", "another repository, same hooks")
    assert inbox(home) == []
    git(one, "commit", "-q", "--allow-empty", "-m", "the loop's repository")
    assert [t["new"] for t in inbox(home)] == [git(one, "rev-parse", "HEAD")]


def test_a_commit_in_a_linked_worktree_counts_for_its_branch(setup, tmp_path: Path) -> None:
    home, repo = setup
    install_hooks(home, repo, {"app": ["release/*"]})
    git(repo, "worktree", "add", "-q", "-b", "release/9", str(tmp_path / "wt"))
    git(tmp_path / "wt", "commit", "-q", "--allow-empty", "-m", "in a worktree")
    refs = [t["ref"] for t in inbox(home)]
    assert refs.count("refs/heads/release/9") >= 1
    assert len(refs) == len(set(zip(refs, [t["new"] for t in inbox(home)], strict=True)))


def test_two_homes_share_hooks_and_uninstall_keeps_the_other(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    a = make_home(tmp_path / "a", AGENT, {"x": loop_toml(repo, ["main"])})
    b = make_home(tmp_path / "b", AGENT, {"y": loop_toml(repo, ["main"])})
    install_hooks(a, repo, {"x": ["main"]})
    install_hooks(b, repo, {"y": ["main"]})
    git(repo, "commit", "-q", "--allow-empty", "-m", "both")
    assert len(inbox(a)) == len(inbox(b)) == 1
    uninstall_hooks(a, repo)
    git(repo, "commit", "-q", "--allow-empty", "-m", "only b")
    assert len(inbox(a)) == 1 and len(inbox(b)) == 2


def test_cli_install_named_loop_and_uninstall(setup) -> None:
    home, repo = setup
    folder = hooks_dir(repo)
    before = folder_state(folder)
    proc = loopd(home, "hooks", "install", "app")
    assert proc.returncode == 0, proc.stderr
    assert "installed" in proc.stdout
    again = loopd(home, "hooks", "install", "--json")
    assert again.returncode == 0
    assert json.loads(again.stdout)["repos"][0]["changed"] == []
    assert loopd(home, "hooks", "install", "nope").returncode == 2
    proc = loopd(home, "hooks", "install", "--uninstall")
    assert proc.returncode == 0, proc.stderr
    assert folder_state(folder) == before


def test_hook_script_reads_globs_like_daemon_globs() -> None:
    cases = [
        ("main", "main"),
        ("main", "feature/main"),
        ("release/*", "release/1.2"),
        ("release/*", "release/1/2"),
        ("release/**", "release/1/2"),
        ("**/hotfix", "a/b/hotfix"),
        ("**", "anything/at/all"),
        ("v[0-9]*", "v12"),
        ("v[!0-9]*", "v12"),
        ("fe?ture", "feature"),
    ]
    for pattern, branch in cases:
        assert hook_script.branch_matches([pattern], branch) == any_branch_matches(
            [pattern], branch
        )


def test_without_reference_transaction_the_commit_hooks_report_it(setup) -> None:
    """An older git (before 2.28) runs no reference-transaction hook; post-commit, post-merge
    and post-rewrite, installed for it, then carry the update."""
    home, repo = setup
    install_hooks(home, repo, {"app": ["main"]}, reference_transaction=False)
    assert all((hooks_dir(repo) / hook).is_file() for hook in HOOK_NAMES)
    (hooks_dir(repo) / "reference-transaction").unlink()  # as the older git never runs it

    git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    assert [t["new"] for t in inbox(home)] == [git(repo, "rev-parse", "HEAD")]
    git(repo, "pack-refs", "--all")  # a packed ref: the record leaves its commit to be read
    git(repo, "commit", "-q", "--amend", "--allow-empty", "-m", "one, amended")
    triggers = inbox(home)
    assert [t["new"] for t in triggers][-1] == git(repo, "rev-parse", "HEAD")
    assert all(t["ref"] == "refs/heads/main" for t in triggers)


def test_a_record_still_being_written_waits_until_it_is_whole(setup) -> None:
    home, repo = setup
    install_hooks(home, repo, {"app": ["main"]})
    git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    (record,) = (home / "state" / "inbox").glob("*.hook")
    whole = record.read_text()
    record.write_text(whole[: -len("end\n")])  # as the hook leaves it midway through
    assert hook_script.take_records(str(record.parent)) == []
    assert record.exists()
    record.write_text(whole)
    assert [t["new"] for t in inbox(home)] == [git(repo, "rev-parse", "HEAD")]
    assert not record.exists()


def test_an_older_loopds_wrappers_are_replaced_not_chained(setup) -> None:
    home, repo = setup
    folder = hooks_dir(repo)
    for hook in HOOK_NAMES:  # as loopd before the sh records left them
        (folder / hook).write_text("#!/bin/sh\n# loopd-hook-wrapper v1\nexit 0\n")
        os.chmod(folder / hook, 0o755)
    install_hooks(home, repo, {"app": ["main"]})
    assert sorted(p.name for p in folder.iterdir() if "loopd-orig" in p.name) == []
    assert not (folder / "post-commit").exists()
    assert "loopd-hook-wrapper v2" in (folder / "reference-transaction").read_text()
    git(repo, "commit", "-q", "--allow-empty", "-m", "after the upgrade")
    assert [t["new"] for t in inbox(home)] == [git(repo, "rev-parse", "HEAD")]


def test_a_running_daemon_takes_the_hooks_record_as_a_push(setup) -> None:
    home, repo = setup
    install_hooks(home, repo, {"app": ["main"]})
    daemon = start_daemon(home)
    try:
        git(repo, "commit", "-q", "--allow-empty", "-m", "while loopd runs")
        new = git(repo, "rev-parse", "HEAD")
        events = home / "state" / "events.jsonl"
        pushes = wait_for(
            lambda: [
                e
                for e in map(json.loads, events.read_text().splitlines())
                if e["type"] == "trigger" and e.get("kind") == "push"
            ],
            what="the push trigger",
        )
        assert [e.get("new") for e in pushes] == [new]
        wait_for(lambda: not list((home / "state" / "inbox").glob("*.hook")), what="no record")
    finally:
        assert stop_daemon(daemon) == 0


def test_a_record_left_after_an_uninstall_is_dropped_and_logged(setup) -> None:
    home, repo = setup
    install_hooks(home, repo, {"app": ["main"]})
    git(repo, "commit", "-q", "--allow-empty", "-m", "then the hooks go")
    uninstall_hooks(home, repo)
    assert inbox(home) == []
    assert not list((home / "state" / "inbox").glob("*.hook"))
    assert "FileNotFoundError" in (home / "state" / "hooks.log").read_text()


def test_a_record_just_created_and_still_empty_is_left_for_its_hook(setup) -> None:
    home, repo = setup
    install_hooks(home, repo, {"app": ["main"]})
    git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    (record,) = (home / "state" / "inbox").glob("*.hook")
    whole = record.read_text()
    record.write_text("")  # created by the hook's redirection, nothing written yet
    assert hook_script.take_records(str(record.parent)) == []
    assert record.exists()
    record.write_text(whole)
    assert len(inbox(home)) == 1

"""guard.py in process on real git: which paths of a run's change may not land, and why
(protect, the files that run programs, the repository's hooks folder, symlinks by where
they lead). tests/test_landing_links.py runs the same through `loopd once`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from daemon.config import LoopConfig
from daemon.git.userrepo import UserRepo
from daemon.landing.guard import blocked_paths, changes, hooks_globs, resolve
from tests.helpers import git, make_repo


def change(tmp_path: Path, edit, **loop: object) -> list[str]:  # noqa: ANN001 - a callable on the tree
    """The paths blocked when a run's branch makes `edit` to a small repository."""
    repo = make_repo(
        tmp_path / "repo",
        {"src/a.py": "a\n", "docs/guide.md": "g\n", ".github/README.md": "r\n"},
    )
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "run")
    edit(repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "run", "--allow-empty")
    cfg = LoopConfig(repo=str(repo), task="t", **loop)  # type: ignore[arg-type]  # LoopConfig's own fields
    return blocked_paths(UserRepo.locate(repo), base, "run", cfg)


def write(path: Path, text: str = "x\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def test_files_that_run_programs_are_blocked_unless_land_allow_names_them(tmp_path: Path) -> None:
    def edit(repo: Path) -> None:
        write(repo / ".github" / "workflows" / "ci.yml")
        write(repo / ".envrc")
        write(repo / "src" / "a.py", "b\n")

    assert change(tmp_path / "1", edit) == [".envrc", ".github/workflows/ci.yml"]
    allowed = change(tmp_path / "2", edit, land_allow=[".github/workflows/**"])
    assert allowed == [".envrc"]


def test_protect_blocks_changes_and_deletions(tmp_path: Path) -> None:
    def edit(repo: Path) -> None:
        (repo / "docs" / "guide.md").unlink()
        write(repo / "src" / "a.py", "b\n")

    assert change(tmp_path / "1", edit, protect=["docs/**"]) == ["docs/guide.md"]
    # `land_allow` lifts the guard on files that run programs, never `protect`.
    both = change(tmp_path / "2", edit, protect=["docs/**"], land_allow=["docs/**"])
    assert both == ["docs/guide.md"]


def test_the_repositorys_own_hooks_folder_is_guarded(tmp_path: Path) -> None:
    def edit(repo: Path) -> None:
        git(repo, "config", "core.hooksPath", "tools/hooks")
        write(repo / "tools" / "hooks" / "pre-commit", "#!/bin/sh\n")
        write(repo / "tools" / "other.sh")

    assert change(tmp_path, edit) == ["tools/hooks/pre-commit"]


def test_hooks_globs_reads_core_hooks_path_inside_the_tree_only(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a": "a\n"})
    user = UserRepo.locate(repo)
    assert hooks_globs(user) == []
    git(repo, "config", "core.hooksPath", ".githooks/")
    assert hooks_globs(user) == [".githooks/**"]
    git(repo, "config", "core.hooksPath", str(repo.resolve() / "ci" / "hooks"))
    assert hooks_globs(user) == ["ci/hooks/**"]
    git(repo, "config", "core.hooksPath", str(tmp_path / "elsewhere"))
    assert hooks_globs(user) == []  # outside the tree: no commit of the run can change it
    git(repo, "config", "core.hooksPath", "..")
    assert hooks_globs(user) == []
    git(repo, "config", "core.hooksPath", ".")
    assert hooks_globs(user) == []
    git(repo, "config", "core.hooksPath", "")
    assert hooks_globs(user) == []


@pytest.mark.parametrize(
    "name,target,why",
    [
        ("notes", "/etc", "a symlink to /etc, outside the repository"),
        ("notes", "../../outside", "a symlink to ../../outside, outside the repository"),
        ("deep/notes", "../../..", "a symlink to ../../.., outside the repository"),
        ("hooks", ".git/hooks", "a symlink to .git/hooks, a guarded path"),
        ("ci", ".github/workflows", "a symlink to .github/workflows, a guarded path"),
        ("gh", ".github", "a symlink to .github, a folder holding guarded paths"),
        ("top", ".", "a symlink to ., a folder holding guarded paths"),
        (".github", "src", "a symlink standing for a folder that holds guarded files"),
    ],
)
def test_a_symlink_is_blocked_by_where_it_leads(
    tmp_path: Path, name: str, target: str, why: str
) -> None:
    def edit(repo: Path) -> None:
        if name == ".github":
            git(repo, "rm", "-rq", ".github")
        link(repo / name, target)

    assert change(tmp_path, edit) == [f"{name} ({why})"]


def test_a_symlink_to_an_ordinary_file_lands_and_one_through_links_is_followed(
    tmp_path: Path,
) -> None:
    def edit(repo: Path) -> None:
        link(repo / "docs" / "a.py", "../src/a.py")
        link(repo / "src" / "hop", "../docs")
        link(repo / "sneaky", "src/hop/../.github/workflows")

    found = change(tmp_path, edit)
    assert found == ["sneaky (a symlink to src/hop/../.github/workflows, a guarded path)"]


def test_links_that_loop_or_leave_through_an_inner_link_lead_outside(tmp_path: Path) -> None:
    def edit(repo: Path) -> None:
        link(repo / "a", "b")
        link(repo / "b", "a")
        link(repo / "out", "/tmp")
        link(repo / "via", "out/x")

    outside = "outside the repository"
    assert change(tmp_path, edit) == [
        f"a (a symlink to b, {outside})",
        f"b (a symlink to a, {outside})",
        f"out (a symlink to /tmp, {outside})",
        f"via (a symlink to out/x, {outside})",
    ]


def test_land_allow_lets_a_link_to_an_allowed_folder_land(tmp_path: Path) -> None:
    def edit(repo: Path) -> None:
        link(repo / ".vscode", "docs")

    assert change(tmp_path / "1", edit) == [".vscode"]  # `.vscode/**` covers `.vscode` itself
    assert change(tmp_path / "2", edit, land_allow=[".vscode/**"]) == []


def test_changes_name_each_path_with_its_new_mode_and_object(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"keep.txt": "k\n", "gone.txt": "g\n", "x.sh": "x\n"})
    base = git(repo, "rev-parse", "HEAD")
    (repo / "gone.txt").unlink()
    (repo / "x.sh").chmod(0o755)
    write(repo / "new file.txt", "n\n")
    link(repo / "ln", "keep.txt")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "c")
    user = UserRepo.locate(repo)
    found = {c.path: (c.mode, c.blob) for c in changes(user.git, base, "HEAD")}
    blob = git(repo, "rev-parse", "HEAD:new file.txt")
    assert found == {
        "gone.txt": ("", ""),
        "ln": ("120000", git(repo, "rev-parse", "HEAD:ln")),
        "new file.txt": ("100644", blob),
        "x.sh": ("100755", git(repo, "rev-parse", "HEAD:x.sh")),
    }


def test_resolve_follows_a_link_as_a_checkout_would(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"src/a.py": "a\n"})
    link(repo / "lib", "src")
    link(repo / "sub" / "up", "../lib")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "links")
    g = UserRepo.locate(repo).git
    assert resolve(g, "HEAD", "sub/up", "../lib") == "src"
    assert resolve(g, "HEAD", "x", "./src//a.py") == "src/a.py"
    assert resolve(g, "HEAD", "deep/x", "..") == "."
    assert resolve(g, "HEAD", "x", "..") is None
    assert resolve(g, "HEAD", "x", "/abs") is None


def test_a_link_whose_name_starts_with_a_dash_is_followed_too(tmp_path: Path) -> None:
    def edit(repo: Path) -> None:
        link(repo / "-x", "/etc")
        link(repo / "via", "-x/passwd")

    outside = "outside the repository"
    assert change(tmp_path, edit) == [
        f"-x (a symlink to /etc, {outside})",
        f"via (a symlink to -x/passwd, {outside})",
    ]


def test_every_link_is_looked_at_after_one_already_blocked(tmp_path: Path) -> None:
    def edit(repo: Path) -> None:
        link(repo / "a-link", "src/a.py")
        link(repo / "b-link", "/etc")

    assert change(tmp_path, edit, protect=["a-link"]) == [
        "a-link",
        "b-link (a symlink to /etc, outside the repository)",
    ]


def test_a_link_standing_for_a_folder_above_a_deep_guarded_glob(tmp_path: Path) -> None:
    def edit(repo: Path) -> None:
        link(repo / "deploy" / "prod", "../src")
        link(repo / "confX", "src")

    found = change(tmp_path, edit, protect=["deploy/prod/keys/**", "confX/sub/**"])
    why = "a symlink standing for a folder that holds guarded files"
    assert found == [f"confX ({why})", f"deploy/prod ({why})"]


def test_a_renamed_protected_file_is_blocked_by_both_names(tmp_path: Path) -> None:
    def edit(repo: Path) -> None:
        git(repo, "mv", "docs/guide.md", "docs/moved.md")

    both = ["docs/guide.md", "docs/moved.md"]
    assert change(tmp_path, edit, protect=both) == both


def test_names_and_targets_that_are_no_utf8_are_read(tmp_path: Path) -> None:
    def edit(repo: Path) -> None:
        os.symlink(b"/etc/\xff", os.fsencode(repo) + b"/odd-\xfe")
        (repo / "src" / "b.py").write_text("b\n")

    (found,) = change(tmp_path, edit)
    assert found.startswith("odd-\udcfe (a symlink to /etc/\udcff, outside the repository")


def test_a_chain_of_forty_links_is_followed_and_one_more_is_not(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"file.txt": "f\n"})
    for n in range(1, 42):
        link(repo / f"l{n}", f"l{n + 1}" if n < 41 else "file.txt")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "links")
    g = UserRepo.locate(repo).git
    assert resolve(g, "HEAD", "x", "l2") == "file.txt"  # l2 .. l41: 40 links
    assert resolve(g, "HEAD", "x", "l1") is None  # 41


def test_a_hooks_path_from_the_persons_config_and_with_a_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo", {"a": "a\n"})
    user = UserRepo.locate(repo)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    (home / ".gitconfig").write_text("[core]\n\thooksPath = .husky\n")
    assert hooks_globs(user) == [".husky/**"]  # the person's own config counts
    git(repo, "config", "core.hooksPath", "~/hooks")
    assert hooks_globs(user) == []  # ~ is the home, outside the tree
    git(repo, "config", "core.hooksPath", "toolX")
    assert hooks_globs(user) == ["toolX/**"]

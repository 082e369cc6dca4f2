"""git wildmatch semantics for branch and path globs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from daemon.globs import any_branch_matches, matching_paths, path_matches, wildmatch
from tests.helpers import make_repo

WILDMATCH = [
    ("main", "main", True),
    ("main", "feature/main", False),
    ("main", "mainline", False),
    ("*", "main", True),
    ("*", "feature/x", False),
    ("**", "feature/x", True),
    ("release/*", "release/1.2", True),
    ("release/*", "release/1/2", False),
    ("release/**", "release/1/2", True),
    ("release/**", "release", False),
    ("**/hotfix", "hotfix", True),
    ("**/hotfix", "a/b/hotfix", True),
    ("**/hotfix", "a/b/hotfix2", False),
    ("a/**/b", "a/b", True),
    ("a/**/b", "a/x/y/b", True),
    ("a/**/b", "a/xb", False),
    ("a**b", "axxb", True),
    ("a**b", "ax/xb", False),  # `**` inside a component is `*`
    ("fe?ture", "feature", True),
    ("fe?ture", "fe/ture", False),
    ("v[0-9]*", "v12", True),
    ("v[!0-9]*", "v12", False),
    ("v[^0-9]*", "vx", True),
    ("v[[:digit:]]", "v7", True),
    ("v[[:alpha:]]", "v7", False),
    ("x[/]y", "x/y", False),  # a class never matches `/`
    ("[]]", "]", True),
    ("[a-]", "-", True),
    ("\\*", "*", True),
    ("\\*", "x", False),
    ("unclosed[", "unclosed[", True),
    ("/main", "main", True),
    ("*.py", "app.py", True),
    ("*.py", "src/app.py", False),  # anchored: write **/*.py for any depth
    ("**/*.py", "src/app.py", True),
    ("x.y", "xzy", False),  # `.` is literal
]


@pytest.mark.parametrize(("pattern", "text", "expected"), WILDMATCH)
def test_wildmatch(pattern: str, text: str, expected: bool) -> None:
    assert wildmatch(pattern, text) is expected


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("tests/**", "tests/a.py", True),
        ("tests/**", "tests/unit/deep/a.py", True),
        ("tests/**", "src/tests/a.py", False),
        ("tests/**", "tests", True),  # the folder's guard holds for a link in its place
        ("/.githooks/**", ".githooks", True),
        ("tests/**", "tests2", False),
        ("tests/*", "tests/unit/a.py", True),  # the folder tests/unit is covered
        ("tests", "tests/a.py", True),
        ("tests/", "tests/a.py", True),
        ("tests", "tests2/a.py", False),
        ("/tests", "tests/a.py", True),
        ("**/fixtures", "a/b/fixtures/x.json", True),
        ("src/*.py", "src/app.py", True),
        ("src/*.py", "src/app.pyc", False),
    ],
)
def test_path_matches(pattern: str, path: str, expected: bool) -> None:
    assert path_matches(pattern, path) is expected


def test_helpers() -> None:
    assert any_branch_matches(["main", "release/*"], "release/2")
    assert not any_branch_matches([], "main")
    assert matching_paths(["tests/**", "*.toml"], ["a.toml", "tests/x", "src/y"]) == [
        "a.toml",
        "tests/x",
    ]


def test_agrees_with_git_glob_pathspecs(tmp_path: Path) -> None:
    """For whole files, `git ls-files ':(glob)PATTERN'` is the reference."""
    files = [
        "a.py",
        "src/app.py",
        "src/pkg/mod.py",
        "tests/t1.py",
        "tests/unit/t2.py",
        "v1.txt",
        "vx.txt",
    ]
    repo = make_repo(tmp_path / "r", {f: "x\n" for f in files})
    for pattern in ["*.py", "**/*.py", "src/**", "tests/**/*.py", "v[0-9].txt", "src/*/mod.py"]:
        out = subprocess.run(
            ["git", "ls-files", "-z", f":(glob){pattern}"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        expected = sorted(p for p in out.split("\0") if p)
        assert sorted(f for f in files if wildmatch(pattern, f)) == expected, pattern

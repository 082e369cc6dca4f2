"""Landing guarded by path and by link: symlinks into hooks, editors, CI, or out of the repo.

Reproduces a hostile agent that committed `.githooks` (the repository's `core.hooksPath`) or
`.vscode` as a symlink to a folder of its own: `X/**` did not match `X`, the run landed,
and the person's next `git commit` ran the agent's hook. Real git repositories, a `command`
agent in bubblewrap, `loopd once` as a subprocess.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.helpers import git, loopd
from tests.test_landing import FIXER, land_case


def _links(*pairs: tuple[str, str], folders: dict[str, str] | None = None) -> str:
    """An agent script: the fix, `folders` (path: file text), then `(link, target)` links."""
    script = FIXER + "import os\n"
    for path, text in (folders or {}).items():
        script += (
            f"pathlib.Path({path!r}).parent.mkdir(parents=True, exist_ok=True)\n"
            f"pathlib.Path({path!r}).write_text({text!r})\n"
        )
    for link, target in pairs:
        script += (
            f"pathlib.Path({link!r}).parent.mkdir(parents=True, exist_ok=True)\n"
            f"os.symlink({target!r}, {link!r})\n"
        )
    return script


HOOK = "#!/bin/sh\necho agent-hook-ran > /tmp/loopd-agent-hook\n"

CASES = {
    # The repository's hooks folder (`.githooks`, its core.hooksPath), linked to the agent's.
    "githooks": (_links((".githooks", "tools/hooks"), folders={"tools/hooks/pre-commit": HOOK}),
                 ".githooks", ".githooks"),
    # An editor's folder whose tasks run on opening, linked to a folder of the agent's.
    "vscode": (_links((".vscode", "editor"), folders={"editor/tasks.json": "{}\n"}),
               "", ".vscode"),
    # A custom core.hooksPath inside the tree.
    "hookspath": (_links(("config/hooks", "../tools"), folders={"tools/pre-push": HOOK}),
                  "config/hooks", "config/hooks"),
    # `.github` linked to a folder holding workflows/: the workflows run from there.
    "github": (_links((".github", "ci"), folders={"ci/workflows/x.yml": "on: push\n"}),
               "", ".github (a symlink standing for a folder that holds guarded files"),
    # Into a guarded path by a link of an innocent name.
    "into": (_links(("notes", ".githooks/pre-commit")), "",
             "notes (a symlink to .githooks/pre-commit, a guarded path"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_symlink_into_a_guarded_path_or_out_of_the_repository_blocks_merge(
    tmp_path: Path, name: str
) -> None:
    agent, hooks_path, named = CASES[name]
    case = land_case(tmp_path, agent, land="merge")
    if hooks_path:
        git(case.repo, "config", "core.hooksPath", hooks_path)
    before = git(case.repo, "rev-parse", "main")
    proc = loopd(case.home.root, "once", "calc", timeout=180)
    out = proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    record = tomllib.loads((case.store.run_dir(run_id) / "run.toml").read_text())
    assert record["outcome"] == "succeeded", out
    assert not record.get("landed") and record["cause"] == "landing-blocked", out
    assert named in record["landing"], record["landing"]
    assert "land_allow" in record["landing"]
    blocked = case.events(run_id, "landing_blocked")
    assert blocked and named in blocked[0]["reason"]
    assert named.split(" ")[0] in proc.stdout  # `loopd once` says so too
    assert git(case.repo, "rev-parse", "main") == before
    assert not (case.repo / named.split(" ")[0]).is_symlink()


# Links that leave the repository: absolute, and `..` past the top through another link. The
# checks would read through them what the branch does not hold: the attempt fails at its
# checks (runparts/treelinks.py), before landing's own rule would block it.
OUT = {
    "absolute": (_links(("docs/passwd", "/etc/passwd")), "docs/passwd", "-> /etc/passwd"),
    "dotdot": (_links(("docs/up", ".."), ("docs/out", "up/../x")), "docs/out", "-> up/../x"),
}


@pytest.mark.parametrize("name", sorted(OUT))
def test_a_symlink_out_of_the_repository_fails_the_attempt_and_lands_nothing(
    tmp_path: Path, name: str
) -> None:
    agent, link, detail = OUT[name]
    case = land_case(tmp_path, agent, land="merge")
    before = git(case.repo, "rev-parse", "main")
    proc = loopd(case.home.root, "once", "calc", timeout=180)
    out = proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    record = tomllib.loads((case.store.run_dir(run_id) / "run.toml").read_text())
    assert record["outcome"] == "escalated" and record["cause"] == "link-out-of-tree", out
    [violation] = record["attempts"][-1]["violations"]
    assert (violation["kind"], violation["target"]) == ("link_out_of_tree", link)
    assert violation["detail"] == detail
    assert link in record["reason"]
    assert git(case.repo, "rev-parse", "main") == before


def test_a_symlink_within_the_repository_to_an_ordinary_file_lands(tmp_path: Path) -> None:
    case = land_case(tmp_path, _links(("docs/calc.py", "../calc.py")), land="merge")
    proc = loopd(case.home.root, "once", "calc", timeout=180)
    run_id = proc.stdout.splitlines()[0]
    record = tomllib.loads((case.store.run_dir(run_id) / "run.toml").read_text())
    assert record.get("landed"), proc.stdout + proc.stderr
    assert (case.repo / "docs" / "calc.py").is_symlink()


def test_land_allow_naming_the_folder_lets_its_link_land(tmp_path: Path) -> None:
    agent = _links((".vscode", "editor"), folders={"editor/tasks.json": "{}\n"})
    case = land_case(tmp_path, agent, land="merge", land_allow=[".vscode/**"])
    proc = loopd(case.home.root, "once", "calc", timeout=180)
    run_id = proc.stdout.splitlines()[0]
    record = tomllib.loads((case.store.run_dir(run_id) / "run.toml").read_text())
    assert record.get("landed"), record.get("landing", "") + proc.stderr

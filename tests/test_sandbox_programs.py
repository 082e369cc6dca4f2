"""programs.py: what a program needs of the host to start in a sandbox, on real layouts of
the version managers people use, built in a temporary home (links, `#!` lines, pyvenv.cfg)."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.sandbox.deny import denied_paths
from daemon.sandbox.programs import Resolved, _Walk, resolve_program, shown


def exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def layout(root: Path) -> Path:
    home = root / "home"
    base = home / ".pyenv" / "versions" / "3.11.9"
    exe(base / "bin" / "python3.11", "\x7fELF binary")
    (base / "lib" / "python3.11").mkdir(parents=True)
    (base / "lib" / "python3.11" / "os.py").write_text("")
    venv = home / "proj" / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to(base / "bin" / "python3.11")
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\nversion = 3.11.9\n")
    exe(venv / "bin" / "tool", f"#!{venv / 'bin' / 'python3'}\nimport tool\n")
    exe(home / ".pyenv" / "shims" / "black", "#!/bin/sh\nexec pyenv exec black\n")
    exe(home / ".volta" / "bin" / "volta-shim", "\x7fELF")
    (home / ".volta" / "bin" / "node").symlink_to("volta-shim")
    node = home / ".nvm" / "versions" / "node" / "v20"
    exe(node / "bin" / "node", "\x7fELF")
    (node / "lib" / "node_modules").mkdir(parents=True)
    exe(node / "lib" / "node_modules" / "cli" / "run.js", "#!/usr/bin/env node\n")
    (node / "bin" / "cli").symlink_to(node / "lib" / "node_modules" / "cli" / "run.js")
    exe(home / ".ssh" / "bin" / "leak", "\x7fELF")
    exe(home / "loose", "\x7fELF")
    return home


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return layout(tmp_path)


def listed(resolved: Resolved, home: Path) -> list[tuple[str, str, bool]]:
    """What is exposed, home-relative ("~h/..."), with why and whether it is a venv."""
    root = str(home)
    return [
        (str(e.path).replace(root, "~h"), e.why.replace(root, "~h"), e.venv)
        for e in resolved.exposed
    ]


def resolve(program: str, home: Path, *first: str) -> Resolved:
    order = [
        *first,
        "proj/.venv/bin",
        ".pyenv/shims",
        ".volta/bin",
        ".nvm/versions/node/v20/bin",
        ".ssh/bin",
        "",
    ]
    search = ":".join([*(str(home / p) if p else str(home) for p in order), "/usr/bin", "/bin"])
    return resolve_program(program, search, {home}, denied_paths([home]))


def test_a_venvs_python_brings_the_venv_and_its_base_interpreter(home: Path) -> None:
    resolved = resolve("python3", home)
    assert resolved.found == home / "proj" / ".venv" / "bin" / "python3" and not resolved.problem
    assert listed(resolved, home) == [
        ("~h/proj/.venv", "virtual environment of ~h/proj/.venv/bin/python3", True),
        ("~h/.pyenv/versions/3.11.9", "interpreter of ~h/proj/.venv/bin/python3", False),
    ]
    assert resolved.venvs == [home / "proj" / ".venv"]
    assert resolved.paths == [home / ".pyenv" / "versions" / "3.11.9"]
    # A script of the venv: its `#!` leads to the same two.
    assert [p for p, _, _ in listed(resolve("tool", home), home)] == [
        "~h/proj/.venv",
        "~h/.pyenv/versions/3.11.9",
    ]


def test_a_real_interpreter_brings_its_whole_installation(home: Path) -> None:
    resolved = resolve("python3.11", home, ".pyenv/versions/3.11.9/bin")
    assert listed(resolved, home) == [
        (
            "~h/.pyenv/versions/3.11.9",
            "interpreter of ~h/.pyenv/versions/3.11.9/bin/python3.11",
            False,
        ),
    ]
    node = resolve("node", home, ".nvm/versions/node/v20/bin")
    assert listed(node, home) == [
        ("~h/.nvm/versions/node/v20", "interpreter of ~h/.nvm/versions/node/v20/bin/node", False),
    ]


def test_a_shim_brings_its_version_manager(home: Path) -> None:
    black = listed(resolve("black", home), home)
    assert black[:2] == [
        ("~h/.pyenv", "version manager of ~h/.pyenv/shims/black", False),
        ("~h/.pyenv/shims", "installation of ~h/.pyenv/shims/black", False),
    ]
    # Its `#!/bin/sh` is followed too: the system's shell, outside the home.
    assert black[2][1] == "installation of the interpreter of ~h/.pyenv/shims/black"
    assert not black[2][0].startswith("~h")
    assert listed(resolve("node", home), home) == [
        ("~h/.volta/bin", "installation of ~h/.volta/bin/node", False),
        ("~h/.volta", "version manager of ~h/.volta/bin/node", False),
    ]


def test_a_node_package_brings_its_node_modules_and_its_interpreter(home: Path) -> None:
    assert listed(resolve("cli", home), home) == [
        ("~h/.nvm/versions/node/v20", "installation of ~h/.nvm/versions/node/v20/bin/cli", False),
        (
            "~h/.nvm/versions/node/v20/lib/node_modules",
            "installation of ~h/.nvm/versions/node/v20/bin/cli",
            False,
        ),
        (
            "~h/.volta/bin",
            "installation of the interpreter of ~h/.nvm/versions/node/v20/bin/cli",
            False,
        ),
        (
            "~h/.volta",
            "version manager of the interpreter of ~h/.nvm/versions/node/v20/bin/cli",
            False,
        ),
    ]


def test_a_program_loose_in_a_home_is_shown_alone_never_the_home(home: Path) -> None:
    resolved = resolve("loose", home)
    assert listed(resolved, home) == [("~h/loose", "~h/loose", False)]
    assert home not in resolved.paths


def test_a_program_in_a_denied_place_is_refused_by_name(home: Path) -> None:
    resolved = resolve("leak", home)
    assert resolved.found == home / ".ssh" / "bin" / "leak"
    assert resolved.exposed == ()
    assert resolved.problem == (
        f"{home}/.ssh/bin (installation of {home}/.ssh/bin/leak) lies in {home}/.ssh, "
        "which the sandbox never shows (the deny list)"
    )
    missing = resolve("nothere", home)
    assert (missing.found, missing.problem) == (None, "'nothere' is not on the PATH")


def test_a_venv_with_copies_or_no_home_line(home: Path) -> None:
    venv = home / "copies" / ".venv"
    exe(venv / "bin" / "python3", "\x7fELF")
    (venv / "pyvenv.cfg").write_text("include-system-site-packages = false\nhome = relative/bin\n")
    assert listed(resolve("python3", home, "copies/.venv/bin"), home) == [
        # Its installation is the venv itself, already shown: no base (a relative `home`).
        ("~h/copies/.venv", "virtual environment of ~h/copies/.venv/bin/python3", True),
    ]
    base = home / ".pyenv" / "versions" / "3.11.9"
    (venv / "pyvenv.cfg").write_text(f"version = 3.11\nhome = {base}\n")  # no bin/ at its end
    assert [p for p, _, _ in listed(resolve("python3", home, "copies/.venv/bin"), home)] == [
        "~h/copies/.venv",
        "~h/.pyenv/versions/3.11.9",
    ]


def test_shown_writes_the_current_home_as_a_tilde(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/dev")
    assert shown("/home/dev/.venv/bin/python3") == "~/.venv/bin/python3"
    assert shown(Path("/home/dev")) == "~"
    assert shown("/home/developer/x") == "/home/developer/x"
    monkeypatch.setenv("HOME", "/")
    assert shown("/usr/bin/python3") == "/usr/bin/python3"


def test_a_python_installed_with_the_home_as_its_prefix_never_shows_the_home(
    home: Path,
) -> None:
    """`./configure --prefix=$HOME`: the interpreter's prefix is the home itself; only its
    bin/ is shown, never the home whole (its other folders hold the deny list's secrets)."""
    exe(home / "bin" / "python3.12", "\x7fELF")
    (home / "lib" / "python3.12").mkdir(parents=True)
    (home / "lib" / "python3.12" / "os.py").write_text("")
    resolved = resolve("python3.12", home, "bin")
    assert listed(resolved, home) == [
        ("~h/bin", "installation of ~h/bin/python3.12", False),
    ]
    assert home not in resolved.paths


def test_a_node_installation_is_known_by_its_headers_too(home: Path) -> None:
    node = home / ".local" / "node20"
    exe(node / "bin" / "node", "\x7fELF")
    (node / "include" / "node").mkdir(parents=True)
    resolved = resolve("node", home, ".local/node20/bin")
    assert listed(resolved, home) == [
        ("~h/.local/node20", "interpreter of ~h/.local/node20/bin/node", False),
    ]
    assert resolved.program == "node" and resolved.problem == ""


def test_a_venvs_base_as_its_pyvenv_cfg_names_it(home: Path) -> None:
    base = home / ".pyenv" / "versions" / "3.11.9"
    venv = home / "w" / ".venv"
    exe(venv / "bin" / "python3", "\x7fELF")
    cfg = venv / "pyvenv.cfg"

    def base_of() -> list[str]:
        return [p for p, _, _ in listed(resolve("python3", home, "w/.venv/bin"), home)][1:]

    # A Windows-made venv names its interpreter's Scripts folder.
    cfg.write_text(f"home = {base / 'Scripts'}\n")
    assert base_of() == ["~h/.pyenv/versions/3.11.9"]
    # Bytes that are no UTF-8 on another line do not hide it.
    cfg.write_bytes(b"prompt = caf\xe9\n" + f"home = {base / 'bin'}\n".encode())
    assert base_of() == ["~h/.pyenv/versions/3.11.9"]
    # `=` inside the value is part of it; only the first 50 lines are read.
    (home / "py=3" / "bin").mkdir(parents=True)
    cfg.write_text(f"home = {home / 'py=3' / 'bin'}\n")
    assert base_of() == ["~h/py=3"]
    cfg.write_text("x = 1\n" * 50 + f"home = {base / 'bin'}\n")
    assert base_of() == []


def test_a_venv_of_a_windows_layout_is_shown_whole(home: Path) -> None:
    venv = home / "win" / ".venv"
    exe(venv / "Scripts" / "python", "\x7fELF")
    (venv / "pyvenv.cfg").write_text("version = 3.12\n")
    resolved = resolve("python", home, "win/.venv/Scripts")
    assert listed(resolved, home)[0] == (
        "~h/win/.venv",
        "virtual environment of ~h/win/.venv/Scripts/python",
        True,
    )


def test_interpreters_are_followed_four_deep(tmp_path: Path) -> None:
    """s0's `#!` names s1, whose names s2, and so on: s0 and four interpreters are shown."""
    home = tmp_path / "home"
    home.mkdir()
    for n in range(6):
        following = f"#!{tmp_path / f'i{n + 1}' / 'bin' / f's{n + 1}'}\n" if n < 5 else ""
        exe(tmp_path / f"i{n}" / "bin" / f"s{n}", following or "\x7fELF")
    resolved = resolve_program("s0", str(tmp_path / "i0" / "bin"), {home})
    assert resolved.paths == [tmp_path / f"i{n}" for n in range(5)]


def test_a_masked_root_is_never_shown_whole(tmp_path: Path) -> None:
    walk = _Walk("/usr/bin", set())
    for root in ("/tmp", "/home", "/"):
        walk.add(Path(root), "a root")
    walk.add(tmp_path, "a folder in one")
    assert list(walk.found) == [tmp_path]


@pytest.mark.parametrize("home", ["/home/dev/", "/home/devX"])
def test_shown_takes_home_as_written(monkeypatch: pytest.MonkeyPatch, home: str) -> None:
    monkeypatch.setenv("HOME", home)
    bare = home.rstrip("/")
    assert shown(f"{bare}/.venv") == "~/.venv"
    assert shown(bare) == "~"

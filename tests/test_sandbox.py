"""The sandbox's parts: the mount plan, program installations, the choice by mode, the agent's
HOME, bubblewrap's flags and status; each against real folders and the real bubblewrap."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from daemon.agents.homes import return_credentials, seed_home
from daemon.config import SandboxConfig
from daemon.sandbox import bwrap as bwrap_module
from daemon.sandbox.base import Availability, Exposure, Launch
from daemon.sandbox.bwrap import BwrapSandbox
from daemon.sandbox.deny import denied_paths
from daemon.sandbox.mounts import Mount, host_files, plan
from daemon.sandbox.paths import install_root, value_paths
from daemon.sandbox.programs import resolve_program
from daemon.sandbox.registry import choose
from tests.sandboxing import require_bwrap


def kinds(mounts: list[Mount]) -> list[tuple[str, str]]:
    return [(m.kind, m.path) for m in mounts]


# -- the mount plan ---------------------------------------------------------------------------


def test_a_tree_under_a_masked_folder_is_bound_after_the_mask(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    mounts = kinds(plan(Exposure(cwd=tree, writable=(tree,)), ["/tmp"]))
    assert mounts.index(("mask", "/tmp")) < mounts.index(("rw", str(tree)))


def test_a_home_inside_a_bound_folder_is_masked_again_after_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    home = repo / "loopd-home"
    (home / "state").mkdir(parents=True)
    bound_inside = home / "state"
    exposure = Exposure(
        cwd=tmp_path, readable=(repo, bound_inside), writable=(home,), hidden=(home,)
    )
    mounts = kinds(plan(exposure, [str(tmp_path)]))
    assert ("hide", str(home)) in mounts
    assert mounts.index(("ro", str(repo))) < mounts.index(("hide", str(home)))
    # Nothing inside loopd's home is ever bound, read-only or not.
    assert not [m for m in mounts if m[0] in ("ro", "rw") and m[1].startswith(str(home))]


def test_most_specific_path_wins_and_symlinks_are_resolved(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "inner").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    exposure = Exposure(cwd=real, readable=(link, tmp_path / "missing"), writable=(real / "inner",))
    mounts = kinds(plan(exposure, [str(tmp_path), str(link), "/no/such/folder"]))
    # The mask and the read-only bind name the same resolved folder: the bind wins there.
    assert ("ro", str(real)) in mounts and ("mask", str(real)) not in mounts
    assert mounts.index(("ro", str(real))) < mounts.index(("rw", str(real / "inner")))
    assert not [m for m in mounts if "missing" in m[1] or "no/such" in m[1]]
    # What no mask hides is visible through the read-only root already: no bind for it.
    assert kinds(plan(Exposure(cwd=real, readable=(Path("/usr"), real)), [])) == []


def test_a_system_file_linked_into_a_masked_folder_stays_readable(tmp_path: Path) -> None:
    # As /etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf with systemd-resolved:
    # here a folder of its own stands for /etc, and /tmp (masked) for /run.
    require_bwrap()
    run = tmp_path / "run" / "systemd" / "resolve"
    run.mkdir(parents=True)
    (run / "stub-resolv.conf").write_text("nameserver 127.0.0.53\n")
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "resolv.conf").symlink_to(run / "stub-resolv.conf")
    (found,) = host_files([str(etc / "resolv.conf"), str(etc / "missing")])
    assert found == str(run / "stub-resolv.conf")
    work = tmp_path / "work"
    work.mkdir()
    cat = ["cat", str(etc / "resolv.conf")]
    outputs = []
    for extra in ((), (Path(found),)):
        exposure = Exposure(cwd=work, writable=(work,), readable=(etc, *extra))
        launch = BwrapSandbox().launch(cat, {"PATH": "/usr/bin:/bin"}, exposure)
        proc = subprocess.run(
            launch.argv, env=launch.env, pass_fds=launch.pass_fds, capture_output=True, text=True
        )
        launch.close()
        outputs.append(proc.stdout)
    assert outputs == ["", "nameserver 127.0.0.53\n"]


def test_files_are_masked_with_an_empty_file(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("x")
    (mount,) = plan(Exposure(cwd=tmp_path), [str(secret)])
    assert mount.argv() == ["--ro-bind", "/dev/null", str(secret)]


# -- what a program needs to be visible ---------------------------------------------------


def test_an_npm_package_brings_its_outermost_node_modules(tmp_path: Path) -> None:
    entry = tmp_path / "app" / "node_modules" / "@scope" / "cli" / "node_modules" / "x" / "a.js"
    entry.parent.mkdir(parents=True)
    entry.write_text("")
    link = tmp_path / "app" / "node_modules" / ".bin" / "cli"
    link.parent.mkdir(parents=True)
    link.symlink_to(entry)
    assert install_root(link, set()) == tmp_path / "app" / "node_modules"


def test_a_program_in_bin_brings_its_prefix_but_never_a_whole_home(tmp_path: Path) -> None:
    home = tmp_path / "me"
    python = home / ".pyenv" / "versions" / "3.11" / "bin" / "python3"
    local = home / ".local" / "bin" / "tool"
    loose = home / "agent.sh"
    for path in (python, local, loose):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    homes = {home}
    assert install_root(python, homes) == home / ".pyenv" / "versions" / "3.11"
    assert install_root(local, homes) == home / ".local" / "bin"  # not ~/.local: keyrings
    assert install_root(loose, homes) == loose  # not the whole home


def test_a_script_brings_its_interpreter(tmp_path: Path) -> None:
    node = tmp_path / "nodejs" / "bin" / "node"
    node.parent.mkdir(parents=True)
    node.write_text("")
    node.chmod(0o755)
    script = tmp_path / "tools" / "agent"
    script.parent.mkdir()
    script.write_text("#!/usr/bin/env -S node --flag\nconsole.log(1)\n")
    script.chmod(0o755)
    resolved = resolve_program(str(script), str(node.parent), set())
    assert resolved.paths == [tmp_path / "tools", tmp_path / "nodejs"]
    assert resolved.exposed[1].why == f"installation of the interpreter of {script}"


def _python_prefix(prefix: Path) -> Path:
    """A fake Python installation: bin/python3.11, bin/python3 -> it, lib/python3.11/os.py."""
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python3.11").write_text("")
    (prefix / "bin" / "python3.11").chmod(0o755)
    (prefix / "bin" / "python3").symlink_to("python3.11")
    (prefix / "lib" / "python3.11").mkdir(parents=True)
    (prefix / "lib" / "python3.11" / "os.py").write_text("")
    return prefix / "bin" / "python3"


def test_a_venv_brings_itself_and_its_base_interpreter_even_directly_in_a_home(
    tmp_path: Path,
) -> None:
    home = tmp_path / "me"
    base = _python_prefix(home / "miniconda3")  # a prefix directly in the home: conda's
    env = home / ".venv"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python3").symlink_to(base)
    (env / "pyvenv.cfg").write_text(f"home = {base.parent}\n")
    resolved = resolve_program(str(env / "bin" / "python3"), "", {home})
    found = {item.path: item for item in resolved.exposed}
    assert found[env].venv and found[env].why.startswith("virtual environment of")
    assert found[home / "miniconda3"].why.startswith("interpreter of")
    assert home not in found and resolved.venvs == [env]


def test_a_venv_with_copies_finds_its_base_through_pyvenv_cfg(tmp_path: Path) -> None:
    base = _python_prefix(tmp_path / "uv" / "python" / "cpython-3.11")
    env = tmp_path / "project" / ".venv"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python3").write_text("")  # a copy, not a link
    (env / "bin" / "python3").chmod(0o755)
    (env / "pyvenv.cfg").write_text(f"home = {base.parent}\nuv = 0.9.0\n")
    resolved = resolve_program("python3", str(env / "bin"), set())
    assert env in resolved.venvs and tmp_path / "uv" / "python" / "cpython-3.11" in resolved.paths


def test_a_shim_brings_its_version_manager(tmp_path: Path) -> None:
    home = tmp_path / "me"
    shims = home / ".pyenv" / "shims"
    shims.mkdir(parents=True)
    (shims / "python3").write_text("#!/bin/sh\nexec pyenv exec python3\n")
    (shims / "python3").chmod(0o755)
    resolved = resolve_program("python3", str(shims), {home})
    assert resolved.exposed[0].path == home / ".pyenv"
    assert resolved.exposed[0].why == f"version manager of {shims / 'python3'}"


def test_the_deny_list_refuses_a_program_and_masks_what_a_bind_would_show(
    tmp_path: Path,
) -> None:
    home = tmp_path / "me"
    tool = home / ".ssh" / "bin" / "agent"
    tool.parent.mkdir(parents=True)
    tool.write_text("")
    tool.chmod(0o755)
    denied = denied_paths({home}, [".qwen/oauth_creds.json"])
    resolved = resolve_program(str(tool), "", {home}, denied)
    assert resolved.paths == [] and f"lies in {home / '.ssh'}" in resolved.problem
    # `[sandbox] readable = ["~"]` shows the home, never its keys nor an agent's login.
    (home / ".qwen").mkdir()
    (home / ".qwen" / "oauth_creds.json").write_text("{}")
    exposure = Exposure(cwd=tmp_path, readable=(home,), denied=denied)
    mounts = {m.path: m.kind for m in plan(exposure, [str(tmp_path)])}
    assert mounts[str(home)] == "ro"
    assert mounts[str(home / ".ssh")] == "hide"
    assert mounts[str(home / ".qwen" / "oauth_creds.json")] == "hide"
    assert str(home / ".aws") not in mounts  # what does not exist needs no mask


def test_a_venv_inside_loopds_home_is_shown_but_nothing_else_of_it(tmp_path: Path) -> None:
    home = tmp_path / "checkout"
    (home / ".venv").mkdir(parents=True)
    (home / "state").mkdir()
    exposure = Exposure(
        cwd=tmp_path,
        readable=(home / "state",),
        hidden=(home,),
        tools=(home / ".venv",),
    )
    mounts = [(m.kind, m.path) for m in plan(exposure, [str(tmp_path)])]
    assert ("hide", str(home)) in mounts and ("ro", str(home / ".venv")) in mounts
    assert mounts.index(("hide", str(home))) < mounts.index(("ro", str(home / ".venv")))
    assert not any(path == str(home / "state") for _, path in mounts)


def test_paths_among_values_bring_their_folder_unless_it_is_masked(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "input.txt").write_text("x")
    loose = Path("/tmp") / f"loopd-test-{os.getpid()}.txt"
    loose.write_text("x")
    try:
        found = value_paths(
            [f"{data}/input.txt", f"/nonexistent:{data}", str(loose), "not a path", "x" * 70000],
            set(),
        )
    finally:
        loose.unlink()
    assert found == [data, data, loose]


# -- the choice by mode -------------------------------------------------------------------


@pytest.fixture
def bwrap_state(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Set what the bubblewrap probe found in this process."""

    def set_to(ok: bool, detail: str) -> None:
        path = "/usr/bin/bwrap" if ok else ""
        found = bwrap_module._Found(path, frozenset({"--disable-userns"}), Availability(ok, detail))
        monkeypatch.setitem(bwrap_module._found, os.getpid(), found)

    return set_to


def test_auto_takes_bubblewrap_when_it_runs(bwrap_state) -> None:  # noqa: ANN001
    bwrap_state(True, "bubblewrap 0.8.0")
    choice = choose(SandboxConfig())
    assert (choice.name, choice.warning, choice.refusal) == ("bwrap", "", "")
    assert choice.summary() == "sandbox: bwrap (auto, bubblewrap 0.8.0)"


def test_auto_without_bubblewrap_warns_as_a_user_and_refuses_as_root(bwrap_state) -> None:  # noqa: ANN001
    bwrap_state(False, "bwrap: setting up uid map: Permission denied")
    user = choose(SandboxConfig(), is_root=False)
    assert user.name == "off" and not user.refusal
    assert "setting up uid map" in user.warning and "unconfined" in user.warning
    assert user.summary().startswith("sandbox: off: bubblewrap cannot run here")
    root = choose(SandboxConfig(), is_root=True)
    assert root.refusal and "loopd runs as root" in root.refusal
    assert 'mode = "off"' in root.refusal  # the way to accept it, written out
    strict = choose(SandboxConfig(mode="bwrap"), is_root=False)
    assert strict.refusal.startswith('[sandbox] mode = "bwrap" but bubblewrap cannot run here')


def test_off_is_off_without_a_warning(bwrap_state) -> None:  # noqa: ANN001
    bwrap_state(False, "not installed")
    choice = choose(SandboxConfig(mode="off"), is_root=False)
    assert (choice.name, choice.warning, choice.refusal) == ("off", "", "")
    assert "full access" in choice.summary()
    # As root an unconfined agent can signal every process: only when a person says so.
    refused = choose(SandboxConfig(mode="off"), is_root=True)
    assert "unconfined_as_root = true" in refused.refusal and "every process" in refused.refusal
    accepted = choose(SandboxConfig(mode="off", unconfined_as_root=True), is_root=True)
    assert (accepted.name, accepted.refusal) == ("off", "")


# -- the agent's HOME ---------------------------------------------------------------------


def login(real: Path) -> None:
    (real / ".claude").mkdir(parents=True)
    (real / ".claude" / ".credentials.json").write_text('{"token": "old"}')
    (real / ".claude.json").write_text('{"mcpServers": {}}')


def seed(tmp_path: Path) -> tuple[Path, Path, list]:
    real = tmp_path / "real"
    login(real)
    home = tmp_path / "run" / "home"
    seeded = seed_home(
        home,
        real,
        (".claude/.credentials.json", ".claude.json", ".missing.json"),
        (".claude/.credentials.json",),
        (".claude/", ".claude.json"),
    )
    return real, home.resolve(), seeded


def back(real: Path, home: Path, seeded: list) -> list[str]:
    return return_credentials(home, real, seeded)


def test_the_home_is_seeded_with_copies_of_the_login_files(tmp_path: Path) -> None:
    real, home, seeded = seed(tmp_path)
    assert (home / ".claude" / ".credentials.json").read_text() == '{"token": "old"}'
    assert (home / ".claude.json").read_text() == '{"mcpServers": {}}'
    assert (home / ".claude" / ".credentials.json").stat().st_mode & 0o777 == 0o600
    assert [f.path for f in seeded] == [".claude/.credentials.json", ".claude.json"]
    # A refresh that never happened copies nothing back.
    assert back(real, home, seeded) == []


def test_only_a_refreshed_credential_goes_back(tmp_path: Path) -> None:
    real, home, seeded = seed(tmp_path)
    (home / ".claude" / ".credentials.json").write_text('{"token": "new"}')
    (home / ".claude.json").write_text('{"mcpServers": {"evil": {"command": "sh"}}}')
    (home / ".claude" / "settings.json").write_text('{"hooks": {"Stop": "curl evil"}}')
    assert back(real, home, seeded) == [".claude/.credentials.json"]
    assert (real / ".claude" / ".credentials.json").read_text() == '{"token": "new"}'
    assert (real / ".claude.json").read_text() == '{"mcpServers": {}}'
    assert not (real / ".claude" / "settings.json").exists()


def test_a_credential_changed_meanwhile_or_swapped_for_a_link_stays(tmp_path: Path) -> None:
    real, home, seeded = seed(tmp_path)
    (real / ".claude" / ".credentials.json").write_text('{"token": "person"}')
    (home / ".claude" / ".credentials.json").write_text('{"token": "new"}')
    assert back(real, home, seeded) == []  # the person logged in again: theirs wins
    real2, home2, seeded2 = seed(tmp_path / "two")
    target = tmp_path / "two" / "outside.json"
    target.write_text('{"token": "stolen"}')
    creds = home2 / ".claude" / ".credentials.json"
    creds.unlink()
    creds.symlink_to(target)
    assert back(real2, home2, seeded2) == []
    (home2 / ".claude" / ".credentials.json").unlink()
    (home2 / ".claude" / ".credentials.json").write_text("not json")
    assert back(real2, home2, seeded2) == []
    assert (real2 / ".claude" / ".credentials.json").read_text() == '{"token": "old"}'


# -- bubblewrap itself --------------------------------------------------------------------


def test_bubblewrap_gets_every_flag_and_reports_a_failed_start(tmp_path: Path) -> None:
    require_bwrap()
    launch = BwrapSandbox().launch(
        ["/nonexistent/program"], {"PATH": "/usr/bin:/bin"}, Exposure(tmp_path, (tmp_path,))
    )
    try:
        argv = launch.argv
        for flag in (
            "--cap-drop ALL",
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--new-session",
            "--die-with-parent",
            "--disable-userns",
            "--ro-bind /proc/sys /proc/sys",
        ):
            assert flag in " ".join(argv), flag
        assert "--unshare-net" not in argv
        proc = subprocess.run(
            argv, env=launch.env, pass_fds=launch.pass_fds, capture_output=True, text=True
        )
        launch.spawned()
        assert proc.returncode == 1 and "execvp" in proc.stderr
        assert launch.command_ran() is False
    finally:
        launch.close()
    ran = BwrapSandbox().launch(["/bin/sh", "-c", "exit 1"], {}, Exposure(tmp_path, (tmp_path,)))
    proc = subprocess.run(ran.argv, env=ran.env, pass_fds=ran.pass_fds)
    ran.spawned()
    assert proc.returncode == 1 and ran.command_ran() is True  # the command's own exit
    ran.close()
    offline = BwrapSandbox().launch(["true"], {}, Exposure(cwd=tmp_path, network=False))
    assert "--unshare-net" in offline.argv
    offline.close()


def test_inside_the_sandbox_nothing_of_the_host_is_writable_or_visible(tmp_path: Path) -> None:
    require_bwrap()
    tree = tmp_path / "tree"
    hidden = tmp_path / "home"
    tree.mkdir()
    hidden.mkdir()
    (hidden / "loopd.toml").write_text("secret")
    script = (
        "cat HOME_TOML 2>&1; touch /etc/x 2>&1; (echo 60 > /proc/sys/vm/swappiness) 2>&1;"
        " touch written && echo tree-writable; echo pid=$$;"
        " grep CapEff /proc/self/status; unshare -U true 2>&1 || echo no-userns"
    ).replace("HOME_TOML", str(hidden / "loopd.toml"))
    launch = BwrapSandbox().launch(
        ["/bin/sh", "-c", script],
        {"PATH": "/usr/bin:/bin"},
        Exposure(cwd=tree, writable=(tree,), readable=(tmp_path,), hidden=(hidden,)),
    )
    proc = subprocess.run(
        launch.argv, env=launch.env, pass_fds=launch.pass_fds, capture_output=True, text=True
    )
    launch.close()
    out = proc.stdout
    assert "secret" not in out and "No such file" in out
    assert out.count("Read-only file system") == 2  # /etc and /proc/sys
    assert "tree-writable" in out and (tree / "written").exists()
    assert "pid=2" in out  # its own PID namespace: the reaper is 1
    assert "CapEff:\t0000000000000000" in out
    assert "no-userns" in out


def test_the_launch_status_parses_concatenated_records() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b'{"child-pid": 5}\n{"exit-code": 0}\n')
    os.close(write_end)
    launch = Launch(argv=["bwrap"], env={}, status_fd=read_end)
    assert launch.wrapped and launch.command_ran()
    launch.close()
    assert json.dumps(launch._records) == '[{"child-pid": 5}, {"exit-code": 0}]'

"""`loopd check` warns before the night about what would leave a loop unprotected,
untriggered or unheard, naming the file and the key; warnings alone exit 0. The daemon
records the same warnings when it starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.helpers import events, git, loopd, make_home, make_repo, start_daemon, stop_daemon

FILES = {"app.py": "x = 1\n", "tests/test_app.py": "def test(): pass\n", "src/lib.py": ""}
AGENT = f'[agents.a]\nadapter = "command"\ncommand = ["{sys.executable}", "-c", "pass"]\n'


def _loop(repo: Path, **keys: object) -> str:
    lines = [f'repo = "{repo}"', 'task = "t"', 'agent = "a"', 'critic = "off"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def test_check_warns_naming_file_and_key_and_exits_0(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    git(repo, "branch", "release/1.0")
    loop = _loop(
        repo,
        done_when=["pytestt -q", "cd sub && FOO=1 python3 -m pytest || echo no"],
        protect=["test/**", "tests/**", "[unclosed"],
        on_change=["srcs/**", "src/**"],
        on_push=["mian", "release/*"],
    )
    config = AGENT + '[notify]\ncommand = ["notify-sendd", "loopd"]\n'
    home = make_home(tmp_path / "home", config, {"app": loop})
    proc = loopd(home, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warnings = [line for line in proc.stdout.splitlines() if line.startswith("warning: ")]
    path = home / "loops" / "app.toml"

    def one(prefix: str, *words: str) -> str:
        found = [w for w in warnings if w.startswith(f"warning: {prefix}")]
        assert len(found) == 1, (prefix, warnings)
        for word in words:
            assert word in found[0], (word, found[0])
        return found[0]

    one(f"{path}: done_when[0]: 'pytestt' is not on the daemon's PATH", "did you mean 'pytest'?")
    one(f"{path}: protect: 'test/**' matches no file at the base (HEAD)", "'tests/**'?")
    one(f"{path}: protect: the glob '[unclosed' has a `[`", "never closed")
    one(f"{path}: protect: '[unclosed' matches no file")
    one(f"{path}: on_change: 'srcs/**' matches no file", "did you mean 'src/**'?")
    one(f"{path}: on_push: 'mian' matches no branch", "did you mean 'main'?")
    one(f"{home / 'loopd.toml'}: notify.command: 'notify-sendd' is not on the daemon's PATH")
    one(f"{path}: on_push: {repo} has no loopd hooks for this loop", "`loopd hooks install app`")
    # What is right is not warned about: python3, echo, cd, tests/**, src/**, release/*.
    assert len(warnings) == 8, warnings
    assert "0 error(s), 8 warning(s)" in proc.stdout
    data = json.loads(loopd(home, "check", "--json").stdout)
    assert data["errors"] == [] and len(data["warnings"]) == 8


def test_a_disabled_loops_problems_are_warnings_and_enabled_loops_errors(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    loops = {
        "off": _loop(repo, enabled=False).replace('agent = "a"', 'agent = "example-typo"'),
        "offbad": 'enabled = false\nrepo = "/nowhere"\ntask = "t"\nmax_attempts = "x"\n',
        "on": _loop(repo).replace('agent = "a"', 'agent = "nobody"'),
    }
    home = make_home(tmp_path / "home", AGENT, loops)
    proc = loopd(home, "check")
    assert proc.returncode == 2
    errors = [line for line in proc.stdout.splitlines() if line.startswith("error: ")]
    warnings = [line for line in proc.stdout.splitlines() if line.startswith("warning: ")]
    assert len(errors) == 1 and "on.toml: agent: no agent profile 'nobody'" in errors[0]
    assert any("off.toml: agent" in w and "(the loop is disabled)" in w for w in warnings)
    assert any("offbad.toml: max_attempts" in w and "(the loop is disabled)" in w for w in warnings)
    (home / "loops" / "on.toml").unlink()
    assert loopd(home, "check").returncode == 0


def test_a_loop_name_over_32_characters_is_a_configuration_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    name = "a" * 33
    home = make_home(tmp_path / "home", AGENT, {name: _loop(repo), "b" * 32: _loop(repo)})
    proc = loopd(home, "check")
    assert proc.returncode == 2
    assert f"loop name '{name}' is 33 characters long; at most 32" in proc.stdout
    assert f"1 valid loop(s): {'b' * 32}" in proc.stdout


def test_the_daemon_records_the_warnings_when_it_starts(tmp_path: Path, daemons: list) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    home = make_home(tmp_path / "home", AGENT, {"app": _loop(repo, protect=["test/**"])})
    daemon = start_daemon(home)
    daemons.append(daemon)
    try:
        warned = [e["message"] for e in events(home) if e["type"] == "config_warning"]
        assert any("protect: 'test/**' matches no file" in w for w in warned), warned
        status = json.loads(loopd(home, "status", "--json").stdout)
        assert any("'test/**' matches no file" in w for w in status["daemon"]["warnings"])
    finally:
        assert stop_daemon(daemon) == 0


def test_a_loopd_toml_that_does_not_parse_is_the_only_error(tmp_path: Path) -> None:
    """Loops are not judged against a configuration that did not load: no false `no
    [remotes.gh]`, no agent or verifier errors; check and status name the loops unchecked."""
    repo = make_repo(tmp_path / "repo")
    loops = {
        "pushed": f'repo = "{repo}"\ntask = "t"\nagent = "mine"\nremote = "gh"\n'
        'on_remote_push = ["main"]\ncritic = "on"\n',
        "nightly": f'repo = "{repo}"\ntask = "t"\nschedule = ["0 2 * * *"]\n',
    }
    home = make_home(tmp_path / "home", "", loops)
    (home / "loopd.toml").write_text('[remotes.gh\nkind = "github"\n')
    proc = loopd(home, "check")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "loopd.toml: TOML syntax error" in errors[0], out
    assert "loop files not checked until loopd.toml loads: nightly, pushed" in out
    assert "valid loop(s)" not in out
    checked = json.loads(loopd(home, "check", "--json").stdout)
    assert checked["loops_unchecked"] == ["nightly", "pushed"] and len(checked["errors"]) == 1
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert len(status["errors"]) == 1
    for name in ("nightly", "pushed"):
        assert status["loops"][name]["phase"] == "not-loaded"
        assert "loopd.toml does not load" in status["loops"][name]["note"]


def test_every_bad_schedule_expression_is_reported(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    loops = {
        "l": f'repo = "{repo}"\ntask = "t"\nschedule = ["61 * * * *", "0 2 * * *", "* 25 * * *"]\n'
    }
    proc = loopd(make_home(tmp_path / "home", "", loops), "check")
    out = proc.stdout + proc.stderr
    assert "l.toml: schedule[0]: cron expression '61 * * * *'" in out, out
    assert "l.toml: schedule[2]: cron expression '* 25 * * *'" in out
    assert "schedule[1]" not in out


def test_a_listener_bound_beyond_loopback_is_warned_about(tmp_path: Path) -> None:
    """`bind = "0.0.0.0:..."` serves plain HTTP and /metrics to the network: said by `check`."""
    for bind, warned in (("0.0.0.0:8787", True), ("[::]:8787", True), ("127.0.0.1:8787", False),
                         ("[::1]:8787", False), ("localhost:8787", False)):  # fmt: skip
        home = make_home(
            tmp_path / f"home-{bind.replace(':', '_')}", f'[listen]\nbind = "{bind}"\n'
        )
        proc = loopd(home, "check")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        found = [line for line in proc.stdout.splitlines() if "listen.bind" in line]
        assert bool(found) == warned, (bind, proc.stdout)
        if warned:
            assert "beyond this machine" in found[0] and "trusted_proxies" in found[0]


def test_a_fresh_home_is_quiet_about_the_critic_and_check_says_once_what_judges(
    tmp_path: Path,
) -> None:
    """critic = "auto" (the default): no warning on every command without a [verifier];
    `check` says once that the checks alone judge; an explicit "on" still warns."""
    repo = make_repo(tmp_path / "repo")
    agent = '[agents.a]\nadapter = "command"\ncommand = ["true"]\n'
    loops = {
        "plain": f'repo = "{repo}"\ntask = "t"\nagent = "a"\n',
        "asked": f'repo = "{repo}"\ntask = "t"\nagent = "a"\ncritic = "on"\n',
    }
    home = make_home(tmp_path / "home", agent, loops)
    out = loopd(home, "check").stdout
    assert "critic: attempts of plain are judged by their checks alone (auto" in out, out
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert any("'asked'" in w and 'critic = "on"' in w for w in warnings), out
    assert not any("'plain'" in w for w in warnings), out
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert not any("'plain'" in w for w in status["daemon"]["warnings"])
    verifier = '[verifier]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "judge"\n'
    judged = make_home(tmp_path / "judged", agent + verifier, {"plain": loops["plain"]})
    said = loopd(judged, "check").stdout
    assert "critic: the verifier's model judges the attempts of plain (auto)" in said, said

"""Configuration errors: bounded values, validated notify settings, fixes that say what to do."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from daemon.agents.registry import PluginError, adapter_class, adapter_names
from daemon.config import ADAPTERS, AgentProfile, LoopConfig, load_home
from daemon.config.errors import bounds_of
from tests.helpers import (
    ROOT,
    daemon_log,
    events,
    loopd,
    make_home,
    make_repo,
    start_daemon,
    stop_daemon,
    wait_for,
)

AGENT = '[agents.echo]\nadapter = "command"\ncommand = ["true"]\n'


def loop_text(repo: Path, extra: str = "") -> str:
    return f'repo = "{repo}"\ntask = "Fix it."\nagent = "echo"\n{extra}'


def home_with(tmp_path: Path, config: str = AGENT, loop_extra: str | None = None) -> Path:
    repo = make_repo(tmp_path / "repo")
    loops = {} if loop_extra is None else {"app": loop_text(repo, loop_extra)}
    return make_home(tmp_path / "home", config, loops)


def no_traceback(proc: subprocess.CompletedProcess[str]) -> str:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "OverflowError" not in out, out
    return out


# --- 1. bounded durations and sizes --------------------------------------------------------


@pytest.mark.parametrize("key", ["attempt_timeout", "check_timeout", "stall_after", "catch_up"])
@pytest.mark.parametrize("value", ['"99999999999d"', "inf", "1e300", "99999999999999999999", "-5"])
def test_a_huge_duration_in_a_loop_is_a_check_error_naming_file_key_and_range(
    tmp_path: Path, key: str, value: str
) -> None:
    home = home_with(tmp_path, loop_extra=f"{key} = {value}\n")
    proc = loopd(home, "check")
    out = no_traceback(proc)
    assert proc.returncode == 2, out
    allowed = bounds_of(LoopConfig.model_fields[key])
    assert f"{home / 'loops' / 'app.toml'}: {key}: " in out
    assert f"use a duration from {allowed}" in out and "docs/configuration.md" in out


@pytest.mark.parametrize(
    "section, line, allowed",
    [
        ("limits", 'shutdown_grace = "99999999999d"', "0s to 1d"),
        ("verifier", "timeout = 1e308", "100ms to 1h"),
        ("verifier", 'pending_limit = "400d"', "0s to 365d"),
        ("limits", 'transcript_cap = "99999999999999999999GB"', "64KB to 10GB"),
        ("limits", "events_rotate = -1", "64KB to 10GB"),
        ("limits", "retain_days = 99999999999", "0 to 3650"),
    ],
)
def test_a_huge_value_in_loopd_toml_stops_check_and_run_with_the_range(
    tmp_path: Path, section: str, line: str, allowed: str
) -> None:
    home = home_with(tmp_path, AGENT + f"[{section}]\n{line}\n")
    key = f"{section}.{line.split(' =')[0]}"
    for command in ("check", "run"):
        proc = loopd(home, command, timeout=30)
        out = no_traceback(proc)
        assert proc.returncode == 2, (command, out)
        assert f"{home / 'loopd.toml'}: {key}: " in out and f"from {allowed}" in out, out


# --- 2. notify settings validated before the daemon starts ---------------------------------


@pytest.mark.parametrize(
    "url",
    ["example.com/hook", "ftp://example.com/hook", "http://", "https://:443/x", "http://h:port/x"],
)
def test_a_webhook_without_scheme_or_host_fails_check_and_run(tmp_path: Path, url: str) -> None:
    home = home_with(tmp_path, AGENT + f'[notify]\nwebhook = "{url}"\n')
    for command in ("check", "run"):
        proc = loopd(home, command, timeout=30)
        out = no_traceback(proc)
        assert proc.returncode == 2, (command, out)
        assert f"{home / 'loopd.toml'}: notify.webhook: " in out
        assert 'webhook = "https://' in out  # the fix shows a whole URL


@pytest.mark.parametrize(
    "config, key",
    [
        ('[verifier]\nbase_url = "127.0.0.1:8000/v1"\n', "verifier.base_url"),
        ('[agents.q]\nbase_url = "localhost:8000/v1"\n', "agents.q.base_url"),
    ],
)
def test_an_endpoint_without_scheme_is_a_check_error(tmp_path: Path, config: str, key: str) -> None:
    home = home_with(tmp_path, AGENT + config)
    proc = loopd(home, "check")
    out = no_traceback(proc)
    assert proc.returncode == 2 and f"loopd.toml: {key}: " in out
    assert 'base_url = "http://127.0.0.1:8000/v1"' in out


@pytest.mark.parametrize("url", ["https://hooks.example.com/x?token=1", "http://127.0.0.1:9/x"])
def test_a_whole_webhook_url_passes(tmp_path: Path, url: str) -> None:
    home = home_with(tmp_path, AGENT + f'[notify]\nwebhook = "{url}"\n')
    assert load_home(home).errors == []


def test_a_notify_command_written_as_one_string_is_shown_as_its_argv(tmp_path: Path) -> None:
    home = home_with(tmp_path, AGENT + "[notify]\ncommand = \"notify-send 'loopd says'\"\n")
    proc = loopd(home, "check")
    out = no_traceback(proc)
    assert proc.returncode == 2
    assert "notify.command: expected a list" in out
    assert 'command = ["notify-send", "loopd says"]' in out


def test_a_notify_command_with_an_empty_argument_is_an_error(tmp_path: Path) -> None:
    home = home_with(tmp_path, AGENT + '[notify]\ncommand = ["notify-send", ""]\n')
    (error,) = load_home(home).errors
    assert error.key == "notify.command" and "empty argument" in error.message
    assert 'command = ["notify-send", "loopd"] under [notify]' in error.fix


# --- 3. fixes that say what to do ----------------------------------------------------------


@pytest.mark.parametrize(
    "config, loop_extra, key, fix",
    [
        (AGENT, 'shedule = ["0 2 * * *"]\n', "shedule", "did you mean `schedule`?"),
        (AGENT, "max-attempts = 2\n", "max-attempts", "did you mean `max_attempts`?"),
        (AGENT + "[verifer]\n", "", "verifer", "did you mean `verifier`?"),
        (AGENT + "[agents.x]\nadaptor = 'qwen'\n", "", "agents.x.adaptor", "`adapter`?"),
        (AGENT, "max_concurrent_runs = 2\n", "max_concurrent_runs", "loopd.toml under [limits]"),
        ("max_concurrent_runs = 2\n" + AGENT, "", "max_concurrent_runs", "under [limits]"),
        (AGENT, 'overlap = "merge"\n', "overlap", 'one of "coalesce" | "skip" | "queue"'),
        (AGENT, 'notify_on = ["done"]\n', "notify_on[0]", '"succeeded" | "failed-attempt"'),
        # an adapter no package registers: the loop using the profile is refused
        (AGENT + "[agents.y]\nadapter = 'gpt'\n", 'agent = "y"\n', "agents.y.adapter", "'gpt' in"),
        (AGENT, 'max_attempts = "three"\n', "max_attempts", "whole number, e.g. max_attempts = 3"),
        (AGENT, "critic_threshold = 11\n", "critic_threshold", "from 0 to 10"),
        (AGENT, 'schedule = "0 2 * * *"\n', "schedule", 'schedule = ["0 2 * * *"]'),
        # each bad expression at its place (schedule[N]), every one of them
        (AGENT, 'schedule = ["0 2 * *"]\n', "schedule[0]", 'schedule = ["0 2 * * *"]'),
        (AGENT, 'timezone = "Berlin"\n', "timezone", 'timezone = "Europe/Berlin"'),
        (AGENT, 'task = " "\n', "task", 'task = "Make the failing tests'),
        ("verifier = 'http://x'\n" + AGENT, "", "verifier", "a line [verifier]"),
        (AGENT + "[agents.z]\nenv = ['A=1']\n", "", "agents.z.env", "env = { HTTPS_PROXY"),
        (AGENT, 'check_timeout = "10 minutes"\n', "check_timeout", 'check_timeout = "10m"'),
        (AGENT, 'agent = "ech"\n', "agent", "did you mean 'echo'?"),
    ],
)
def test_every_error_says_what_to_write(
    tmp_path: Path, config: str, loop_extra: str, key: str, fix: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    lines = [f'repo = "{repo}"']
    lines += [] if loop_extra.startswith("task") else ['task = "t"']
    lines += [] if loop_extra.startswith("agent") else ['agent = "echo"']
    text = "\n".join(lines) + "\n" + loop_extra
    home = make_home(tmp_path / "home", config, {"app": text})
    errors = load_home(home).errors
    assert [e.key for e in errors] == [key], [str(e) for e in errors]
    (error,) = errors
    assert fix in error.fix, str(error)
    assert "correct the value" not in str(error) and "DESIGN" not in str(error)


def test_a_loop_file_that_is_not_utf8_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    home = home_with(tmp_path, loop_extra="")
    path = home / "loops" / "app.toml"
    path.write_bytes(path.read_bytes() + b'nudge = "caf\xe9"\n')
    proc = loopd(home, "check")
    out = no_traceback(proc)
    assert proc.returncode == 2 and f"{path}: not UTF-8" in out and "save the file as UTF-8" in out


def test_a_broken_loopd_toml_does_not_add_misleading_profile_errors(tmp_path: Path) -> None:
    home = home_with(tmp_path, AGENT + "[limits]\nretain_days = -1\n", loop_extra="")
    assert [e.key for e in load_home(home).errors] == ["limits.retain_days"]


# --- user-facing text points at the project's own reference --------------------------------


def test_init_and_the_shipped_home_point_at_docs_not_design(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "init", str(tmp_path / "new")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    made = [p for p in (tmp_path / "new").rglob("*") if p.is_file()]
    shipped = [ROOT / "loopd.toml", *ROOT.glob("loops/*.toml"), *ROOT.glob("rules/*/*.md")]
    for path in made + shipped + [*ROOT.glob("docs/*.md"), ROOT / "README.md"]:
        assert "DESIGN" not in path.read_text(), path
    assert "docs/configuration.md" in (tmp_path / "new" / "loopd.toml").read_text()
    assert (ROOT / "docs" / "configuration.md").is_file() and (ROOT / "docs" / "rules.md").is_file()
    new_home = tmp_path / "new"
    proc = loopd(new_home, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_shipped_home_checks_clean() -> None:
    proc = loopd(ROOT, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 valid loop(s): example; 0 error(s)" in proc.stdout


# --- 6. one list of adapters ---------------------------------------------------------------


def test_the_registry_covers_exactly_the_adapter_list() -> None:
    assert adapter_names()[: len(ADAPTERS)] == ADAPTERS
    for name in ADAPTERS:
        assert adapter_class(name).name == name
    assert AgentProfile(adapter="qwen").adapter == "qwen"
    with pytest.raises(PluginError, match="installed: qwen, claude"):
        adapter_class("gpt")


# --- 7. dependencies -----------------------------------------------------------------------


def test_dependencies_name_what_loopd_imports_and_pin_watchdog_below_its_next_major() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def by_name(requirements: list[str]) -> dict[str, str]:
        """Each requirement by its project's name (what comes before a version bound)."""
        return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower(): r for r in requirements}

    deps = by_name(project["dependencies"])
    assert "gitpython" not in deps
    major = int(version("watchdog").split(".")[0])
    assert f"<{major + 1}" in deps["watchdog"].replace(" ", "")
    assert set(by_name(project["optional-dependencies"]["dev"])) >= {"pytest", "ruff"}
    sources = [p.read_text() for p in (ROOT / "daemon").rglob("*.py")]
    assert not any("import git\n" in s or "from git import" in s for s in sources)


def test_a_reload_with_huge_values_keeps_the_daemon_running(
    tmp_path: Path, daemons: list[subprocess.Popen[str]]
) -> None:
    home = home_with(tmp_path, loop_extra="")
    daemon = start_daemon(home)
    daemons.append(daemon)
    (home / "loops" / "app.toml").write_text(
        loop_text(make_repo(tmp_path / "repo2"), 'attempt_timeout = "99999999999d"\n')
    )
    daemon.send_signal(signal.SIGHUP)
    wait_for(lambda: any(e["type"] == "reloaded" for e in events(home)), what="reloaded")
    errors = [e for e in events(home) if e["type"] == "config_error"]
    assert [e["key"] for e in errors] == ["attempt_timeout"] and "1s to 7d" in errors[0]["fix"]
    with (home / "loopd.toml").open("a") as fh:
        fh.write('[limits]\nshutdown_grace = "99999999999d"\n')
    daemon.send_signal(signal.SIGHUP)
    wait_for(lambda: any(e["type"] == "reload_failed" for e in events(home)), what="reload_failed")
    assert daemon.poll() is None, daemon_log(home)
    assert stop_daemon(daemon) == 0
    assert "Traceback" not in daemon_log(home)

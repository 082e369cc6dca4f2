"""Adapters as plugins: a third-party adapter package, built here and installed with pip into a
fresh venv, is configured by name in a loop and runs through that venv's `loopd once`; the
registry refuses what cannot be an adapter, and only the loops that use it."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from daemon import plugins
from daemon.agents.base import AgentAdapter
from daemon.agents.registry import adapter_class, adapter_names
from daemon.config import load_home
from daemon.people.notify.base import Notifier
from tests.helpers import make_home, make_repo

ROOT = Path(__file__).resolve().parent.parent
# The plugin's venv (a module fixture: a pip install) is made once: its tests stay on one
# worker under pytest-xdist (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("plugin-venv")

# The plugin's adapter: its agent prints JSON lines (a session, a tool call and its result,
# usage, the final answer); the adapter reads them.
ADAPTER = """
import json, pathlib

from daemon.agents.base import AgentAdapter, AgentEvent, Invocation, as_int, positional, raw
from daemon.people.notify.base import Notifier


class TinyAdapter(AgentAdapter):
    name = "tiny"
    structured_stream = True
    usage = True
    tool_calls = True
    session_resume = True

    def invocation(self, prompt, resume=None):
        if resume is not None:
            argv = ["tiny-agent", "--resume", resume.session_id, positional(resume.message)]
        else:
            argv = ["tiny-agent", positional(prompt)]
        return Invocation(argv=argv, home=self.home())

    def parse_line(self, line):
        data = self.loads(line)
        if data is None:
            return raw(line)
        kind = data.get("type")
        if kind == "session":
            return [AgentEvent(type="session", session_id=str(data.get("id", "")))]
        if kind == "call":
            return [AgentEvent(type="tool_call", tool="write", call_id=str(data.get("id", "")),
                               arguments=data.get("args", {}))]
        if kind == "result":
            return [AgentEvent(type="tool_result", tool="write", call_id=str(data.get("id", "")),
                               output=str(data.get("output", "")))]
        if kind == "usage":
            return [AgentEvent(type="usage", input_tokens=as_int(data.get("in")),
                               output_tokens=as_int(data.get("out")))]
        if kind == "final":
            return [AgentEvent(type="final", text=str(data.get("text", "")))]
        return raw(line)


class NotAnAdapter:
    name = "broken"


class FileNotifier(Notifier):
    # A notifier plugin: each message appended to a file as a JSON line.

    name = "tofile"

    def __init__(self, path):
        self.path = pathlib.Path(path)

    def send(self, message, payload):
        with self.path.open("a") as out:
            out.write(json.dumps({"message": message, "kind": payload.get("kind")}) + "\\n")
"""
# The agent's own CLI, installed apart from loopd as any agent CLI is (loopd's venv is never
# on an agent's PATH): it does the task.
AGENT = """
import json, pathlib, sys


def main():
    if sys.argv[1:] == ["--version"]:  # what `loopd check` asks every agent's program
        print("tiny-agent 1.0")
        return
    print(json.dumps({"type": "session", "id": "tiny-1"}), flush=True)
    print(json.dumps({"type": "call", "id": "c1", "args": {"path": "hello.txt"}}), flush=True)
    pathlib.Path("hello.txt").write_text("hello, plugin\\n")
    print(json.dumps({"type": "result", "id": "c1", "output": "written"}), flush=True)
    print(json.dumps({"type": "usage", "in": 120, "out": 30}), flush=True)
    print(json.dumps({"type": "final", "text": "hello.txt says hello, plugin."}), flush=True)
"""
ENTRY_POINTS = (
    "[loopd.agents]\ntiny = tiny_loopd_agent:TinyAdapter\nbroken = tiny_loopd_agent:NotAnAdapter\n"
    "gone = tiny_loopd_agent_missing:GoneAdapter\n"
    "[loopd.notifiers]\ntofile = tiny_loopd_agent:FileNotifier\n"
    "notanotifier = tiny_loopd_agent:NotAnAdapter\n"
)
STREAM = [
    '{"type": "session", "id": "tiny-1"}',
    '{"type": "call", "id": "c1", "args": {"path": "hello.txt"}}',
    '{"type": "result", "id": "c1", "output": "written"}',
    '{"type": "usage", "in": 120, "out": 30}',
    '{"type": "final", "text": "hello.txt says hello, plugin."}',
    "this is not json {",
]


def _record(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(folder: Path) -> Path:
    """The plugin package as a wheel (a zip of its files and metadata, as a build backend
    writes it): no build backend or network needed to make it."""
    dist = "tiny_loopd_agent-1.0.dist-info"
    files = {
        "tiny_loopd_agent/__init__.py": ADAPTER.encode(),
        f"{dist}/METADATA": b"Metadata-Version: 2.1\nName: tiny-loopd-agent\nVersion: 1.0\n",
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
        f"{dist}/entry_points.txt": ENTRY_POINTS.encode(),
    }
    record = [_record(name, data) for name, data in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / "tiny_loopd_agent-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def plugin_venv(folder: Path) -> Path:
    """A fresh venv that sees this checkout's loopd and its dependencies (a .pth adds this
    test's environment), with the plugin installed into it by pip: its python."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    ours = sysconfig.get_path("purelib")
    (Path(site) / "loopd-checkout.pth").write_text(
        f"import site; site.addsitedir({ours!r})\n"  # its .pth files too: loopd is editable
    )
    wheel = build_wheel(folder.parent)
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        check=True,
    )
    return python


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return plugin_venv(tmp_path_factory.mktemp("plugin") / "venv")


def _in_venv(python: Path, code: str) -> str:
    proc = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_plugin_adapter_configured_by_name_runs_through_loopd_once(
    venv_python: Path, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"hello.txt": "hello\n"})
    check = "python3 -c \"import sys; sys.exit(open('hello.txt').read() != 'hello, plugin\\n')\""
    loop = (
        f'repo = "{repo}"\ntask = "Make hello.txt say hello, plugin."\nagent = "tiny"\n'
        f'done_when = [{json.dumps(check)}]\ncritic = "off"\nmax_attempts = 1\n'
        'notify_on = ["succeeded"]\n'
    )
    notes = tmp_path / "notes.jsonl"
    plugin = f'[notify.plugins.tofile]\npath = "{notes}"\n'
    home = make_home(tmp_path / "home", plugin, {"hi": loop})
    cli = tmp_path / "agent-cli" / "tiny-agent"
    cli.parent.mkdir()
    cli.write_text("#!/usr/bin/env python3\n" + AGENT + "\nmain()\n")
    cli.chmod(0o755)
    env = {**os.environ, "PATH": f"{cli.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("LOOPD_HOME", None)
    proc = subprocess.run(
        [venv_python, "-m", "daemon.cli.main", "--home", str(home), "once", "hi"],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    run_id = proc.stdout.split()[0] if proc.stdout.split() else ""
    record = home / "state" / "runs" / run_id / "run.toml"
    assert run_id and record.is_file(), proc.stdout + proc.stderr
    run = tomllib.loads(record.read_text())
    assert run["outcome"] == "succeeded", (run, proc.stderr)
    attempt = run["attempts"][0]
    assert attempt["session_id"] == "tiny-1", attempt
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (120, 30), attempt
    folder = home / "state" / "runs" / run_id / "attempt-1"
    transcript = gzip.decompress((folder / "transcript.jsonl.gz").read_bytes()).decode()
    assert "hello.txt says hello, plugin." in transcript
    # The notifier plugin of [notify.plugins.tofile] told of the run's success.
    told = [json.loads(line) for line in notes.read_text().splitlines()]
    assert [t["kind"] for t in told] == ["succeeded"] and run_id in told[0]["message"], told
    # `check` lists the plugin's program as it lists any agent's, with what it says it is.
    shown = subprocess.run(
        [venv_python, "-m", "daemon.cli.main", "--home", str(home), "check"],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert f"{cli} (tiny-agent 1.0)" in shown.stdout, shown.stdout + shown.stderr
    assert not (tmp_path / "hello.txt").exists(), "the agent did work when asked its version"


def test_the_venv_lists_the_plugin_after_loopds_own(venv_python: Path) -> None:
    out = _in_venv(
        venv_python,
        "from daemon.agents.registry import adapter_names, adapter_class\n"
        "print(','.join(adapter_names())); print(adapter_class('tiny').__module__)",
    )
    names, module = out.split()
    assert names.split(",") == [*plugins.SHIPPED[plugins.AGENTS], "broken", "gone", "tiny"]
    assert module == "tiny_loopd_agent"


def test_a_plugin_that_is_no_adapter_or_fails_to_import_refuses_only_its_loops(
    venv_python: Path, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    loops = {
        name: f'repo = "{repo}"\ntask = "t"\nagent = "{agent}"\ndone_when = ["true"]\n'
        for name, agent in [("good", "tiny"), ("bad", "broken"), ("lost", "gone"), ("nope", "x")]
    }
    home = make_home(tmp_path / "home", '[agents.x]\nadapter = "tinyy"\n', loops)
    out = _in_venv(
        venv_python,
        "import json, pathlib\nfrom daemon.config import load_home\n"
        f"loaded = load_home(pathlib.Path({str(home)!r}))\n"
        "print(json.dumps({'loops': sorted(loaded.loops), 'errors': [str(e) for e in "
        "loaded.errors]}))",
    )
    result = json.loads(out)
    assert result["loops"] == ["good"], result
    errors = "\n".join(result["errors"])
    assert "loops/bad.toml: agent: loopd.agents plugin 'broken'" in errors
    assert "is not a daemon.agents.base.AgentAdapter subclass" in errors
    assert "Fix: point the entry point at a subclass of AgentAdapter" in errors
    assert "loops/lost.toml: agent: loopd.agents plugin 'gone'" in errors
    assert "failed to import: ModuleNotFoundError" in errors
    assert "loopd.toml: agents.x.adapter: no agent adapter 'tinyy' is installed" in errors
    assert "tiny" in errors.split("installed: ")[1] and "Fix: install the package" in errors


def test_a_notifier_plugin_configured_by_name_is_tested_and_a_bad_one_refused(
    venv_python: Path, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.jsonl"
    home = make_home(tmp_path / "home", f'[notify.plugins.tofile]\npath = "{notes}"\n', {})
    env = {k: v for k, v in os.environ.items() if k != "LOOPD_HOME"}

    def notify_test(where: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [venv_python, "-m", "daemon.cli.main", "--home", str(where), "notify", "--test"],
            capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
        )  # fmt: skip

    done = notify_test(home)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plugin 'tofile': delivered" in done.stdout
    (told,) = [json.loads(line) for line in notes.read_text().splitlines()]
    assert told["kind"] == "test" and "loopd test notification" in told["message"]
    # Options the plugin does not take: the file, the table and the fix, exit 2.
    wrong = make_home(tmp_path / "wrong", '[notify.plugins.tofile]\nfile = "x"\n', {})
    done = notify_test(wrong)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "loopd.toml: [notify.plugins.tofile]:" in done.stderr and "file" in done.stderr
    # Registered in the group but not a Notifier: refused by name, with the fix.
    broken = make_home(tmp_path / "broken", "[notify.plugins.notanotifier]\n", {})
    done = notify_test(broken)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "is not a daemon.people.notify.base.Notifier subclass" in done.stderr
    # Not installed at all: loopd.toml is refused, naming the key and what is installed.
    lost = make_home(tmp_path / "lost", "[notify.plugins.nothere]\n", {})
    done = notify_test(lost)
    assert done.returncode != 0
    assert "notify.plugins" in done.stderr and "no notifier plugin 'nothere'" in done.stderr
    assert "installed: notanotifier, tofile" in done.stderr and "Fix: install" in done.stderr
    # loopd's own notifiers are set by their keys, not as plugins.
    own = make_home(tmp_path / "own", '[notify.plugins.webhook]\nurl = "http://x"\n', {})
    done = notify_test(own)
    assert "'webhook' is loopd's own notifier. Fix: set it with `[notify] webhook`" in (
        done.stderr
    ), done.stderr


# --- the registry in this process (what both engines' workers call) -------------------------


def test_loopds_own_adapters_and_notifiers_are_registered_as_plugins_are() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert project[plugins.AGENTS] == plugins.SHIPPED[plugins.AGENTS]
    assert project[plugins.NOTIFIERS] == plugins.SHIPPED[plugins.NOTIFIERS]
    installed = {p.name: p.value for p in plugins.entry_points(group=plugins.AGENTS)}
    assert installed.items() >= plugins.SHIPPED[plugins.AGENTS].items(), "reinstall: pip -e ."
    for name in plugins.SHIPPED[plugins.AGENTS]:
        assert adapter_class(name).name == name
    for name in plugins.SHIPPED[plugins.NOTIFIERS]:
        assert issubclass(plugins.load(plugins.NOTIFIERS, name), Notifier)
    assert plugins.BASES[plugins.AGENTS] == f"{AgentAdapter.__module__}.AgentAdapter"
    assert plugins.BASES[plugins.NOTIFIERS] == f"{Notifier.__module__}.Notifier"


def test_an_unknown_name_says_what_is_installed_and_how_to_fix_it() -> None:
    with pytest.raises(plugins.PluginError) as caught:
        adapter_class("no-such-agent")
    message = str(caught.value)
    assert "no loopd.agents plugin 'no-such-agent' is installed" in message
    assert ", ".join(adapter_names()) in message and sys.prefix in message
    assert "Fix: install the package" in message


def test_a_loop_naming_a_shipped_adapter_loads_no_package_metadata(tmp_path: Path) -> None:
    plugins._scan.cache_clear()
    repo = make_repo(tmp_path / "repo")
    home = make_home(tmp_path / "home", "", {"a": f'repo = "{repo}"\ntask = "t"\nagent = "qwen"\n'})
    loaded = load_home(home)
    assert list(loaded.loops) == ["a"] and loaded.errors == []
    assert plugins._scan.cache_info().currsize == 0, "metadata read for a shipped adapter"


# --- the shared suite, run by a plugin over its own recorded stream -------------------------

PLUGIN_TESTS = """
from pathlib import Path

from daemon.agents.testing import AdapterSuite, Recording


class TestTiny(AdapterSuite):
    recordings = [
        Recording("tiny", Path(__file__).parent / "tiny.jsonl", session=SESSION,
                  final="hello.txt says hello, plugin.", usage=(120, 30, 0.0)),
    ]
"""


@pytest.mark.parametrize("session, passes", [("tiny-1", True), ("not-its-session", False)])
def test_a_plugin_runs_the_shared_suite_over_its_own_recorded_stream(
    venv_python: Path, tmp_path: Path, session: str, passes: bool
) -> None:
    (tmp_path / "tiny.jsonl").write_text("\n".join(STREAM) + "\n")
    (tmp_path / "test_tiny.py").write_text(PLUGIN_TESTS.replace("SESSION", repr(session)))
    proc = subprocess.run(
        [venv_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "CI"},
    )  # fmt: skip
    summary = proc.stdout.strip().splitlines()[-1]
    if passes:
        assert proc.returncode == 0 and "8 passed" in summary, proc.stdout
    else:
        assert "1 failed, 7 passed" in summary, proc.stdout
        assert "test_session_id_found" in proc.stdout

"""Record the attempt folders of the grounding set: real `loopd once` runs of the real qwen CLI.

Each scenario is a small real repository, a loop, and a scripted model (tests/model_server.py)
that plays the agent: it asks qwen for tool calls (read a file, run a shell command, write or
edit a file) one after another, and qwen really runs them in the run's tree. What loopd wrote
for each attempt (prompt.md, transcript.jsonl, checks.log, diff.patch) is copied into
`attempts/SCENARIO-N/`, with the temporary folders' paths replaced by a fixed one so the files
do not change from one recording to the next in anything but times and ids.

    PATH=/work/main/node_modules/.bin:$PATH python3 tests/data/grounding/record.py

The candidates of `candidates.jsonl` were written by reading these folders; re-recording
changes times, ids and token counts, so check the candidates after it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from tests.helpers import loopd, make_home, make_repo  # noqa: E402
from tests.model_server import ScriptedModelServer  # noqa: E402
from tests.test_e2e_qwen import QWEN, Turn, agent_script  # noqa: E402

ATTEMPT_FILES = ("prompt.md", "transcript.jsonl", "checks.log", "diff.patch")
PLACEHOLDER = "/tmp/loopd-grounding"
IGNORE = "__pycache__/\n.pytest_cache/\n"


@dataclass
class Step:
    """One tool call the scripted model asks qwen for: a name and its arguments."""

    tool: str
    args: dict[str, Any]
    text: str = ""


def shell(command: str, text: str = "") -> Step:
    return Step("run_shell_command", {"command": command, "description": command[:60]}, text)


def read(path: str, text: str = "") -> Step:
    return Step("read_file", {"file_path": "{tree}/" + path}, text)


def write(path: str, content: str, text: str = "") -> Step:
    return Step("write_file", {"file_path": "{tree}/" + path, "content": content}, text)


def edit(path: str, old: str, new: str, text: str = "") -> Step:
    return Step("edit", {"file_path": "{tree}/" + path, "old_string": old, "new_string": new}, text)


@dataclass
class Scenario:
    """A repository, a loop, and for each attempt the agent's steps and its final words."""

    name: str
    files: dict[str, str]
    task: str
    done_when: list[str]
    attempts: list[tuple[list[Step], str]]
    protect: list[str] = field(default_factory=list)


def _fill(value: Any, tree: str) -> Any:
    if isinstance(value, str):
        return value.replace("{tree}", tree)
    if isinstance(value, dict):
        return {k: _fill(v, tree) for k, v in value.items()}
    return value


def planner(scenario: Scenario) -> Callable[[Turn], Any]:
    """The scripted agent: the steps of the attempt its prompt belongs to, one per turn."""

    def attempt_of(turn: Turn) -> int:
        first_user = next(
            (m for m in turn.messages if m.get("role") == "user" and "# Task" in str(m)), {}
        )
        return 1 + str(first_user).count("# What failed last time")

    def decide(turn: Turn) -> Any:
        n = min(attempt_of(turn), len(scenario.attempts))
        steps, final = scenario.attempts[n - 1]
        done = turn.answered
        index = 0
        if done.startswith(f"a{n}_s"):
            index = int(done.rsplit("_s", 1)[1]) + 1
        elif done:
            return final
        if index >= len(steps):
            return final
        step = steps[index]
        spec: dict[str, Any] = {
            "tool_calls": [
                {
                    "name": step.tool,
                    "id": f"a{n}_s{index}",
                    "arguments": _fill(step.args, turn.workdir),
                }
            ]
        }
        if step.text:
            spec["text"] = step.text
        return spec

    return decide


def record(scenario: Scenario, out: Path, work: Path) -> list[Path]:
    """Run the scenario through `loopd once`; copy its attempt folders under `out`."""
    repo = make_repo(work / "repo", {".gitignore": IGNORE, **scenario.files})
    with ScriptedModelServer(agent_script(planner(scenario))) as server:
        profile = {"adapter": "qwen", "model": "qwen3-coder-test", "base_url": server.base_url}
        loop = {
            "repo": str(repo),
            "task": scenario.task,
            "agent": "qwen",
            "done_when": scenario.done_when,
            "check_timeout": "60s",
            "protect": scenario.protect,
            "max_attempts": len(scenario.attempts),
            "attempt_timeout": "90s",
            "stall_after": "60s",
            "max_nudges": 0,
        }
        config = "[agents.qwen]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in profile.items())
        text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in loop.items())
        home = make_home(work / "home", config, {scenario.name: text})
        bin_dir = work / "bin"
        bin_dir.mkdir()
        assert QWEN is not None, "the qwen CLI is needed"
        (bin_dir / "qwen").symlink_to(QWEN.resolve())
        env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        proc = loopd(home, "once", scenario.name, timeout=300, env=env)
    run_id = proc.stdout.splitlines()[0].strip()
    print(f"{scenario.name}: {run_id}: {proc.stdout.splitlines()[1:2]}")
    run_dir = home / "state" / "runs" / run_id
    copied = []
    for n in range(1, len(scenario.attempts) + 1):
        source = run_dir / f"attempt-{n}"
        if not source.is_dir():
            continue
        target = out / f"{scenario.name}-{n}"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name in ATTEMPT_FILES:
            if (source / name).is_file():
                text = (source / name).read_text(encoding="utf-8")
                text = _scrub(text, work, scenario.name)
                (target / name).write_text(text, encoding="utf-8")
        copied.append(target)
    return copied


def _scrub(text: str, work: Path, name: str) -> str:
    """Temporary paths become one fixed path; qwen's long tool list line is shortened."""
    real = str(work.resolve())
    text = text.replace(real, f"{PLACEHOLDER}/{name}").replace(str(work), f"{PLACEHOLDER}/{name}")
    return re.sub(r'\\"slash_commands\\":\[[^\]]*\]', '\\"slash_commands\\":[]', text)


# --- the scenarios ---------------------------------------------------------------------------

REVIEW_APP = """\
import os
import sys


def load(path):
    with open(path) as fh:
        # TODO: handle a missing file
        return fh.read()


def words(text):
    return text.split()


def count(text):
    # TODO: count words, not characters
    return len(text)


def main(argv):
    text = load(argv[1])
    print(count(text))
    # TODO: exit with a status
    return None
"""
CHECK_REVIEW = """\
import re, sys
lines = open("app.py").read().splitlines()
cited = [int(n) for n in re.findall(r"line (\\d+)", open("REVIEW.md").read())]
if not cited:
    sys.exit("REVIEW.md cites no line numbers")
for n in cited:
    text = lines[n - 1] if 0 < n <= len(lines) else "(no such line)"
    if "TODO" not in text:
        sys.exit(f"REVIEW.md cites line {n} but app.py line {n} is: {text.strip()}")
print("every cited line holds a TODO")
"""
REVIEW = Scenario(
    "review",
    {"app.py": REVIEW_APP, "check_review.py": CHECK_REVIEW},
    "Review app.py and list its open TODOs in REVIEW.md, citing each by line number.",
    ["python3 check_review.py"],
    [
        (
            [
                shell("grep -c TODO app.py"),
                shell("wc -l app.py"),
                write(
                    "REVIEW.md",
                    "# Review of app.py\n\n- line 3: TODO about handling a missing file\n"
                    "- line 24: TODO about counting words\n",
                ),
            ],
            "I reviewed app.py: it has 3 TODOs; REVIEW.md cites them at line 3 and line 24.",
        )
    ],
    protect=["check_review.py"],
)

FETCH = """\
class HTTPError(Exception):
    \"\"\"An answer with a status of 400 or more.\"\"\"

    def __init__(self, status, reason):
        super().__init__(f"{status} {reason}")
        self.status = status


RETRYABLE = {404, 500, 502, 503}
MAX_TRIES = 3


def fetch_json(url, opener):
    \"\"\"GET url through opener, retrying the statuses in RETRYABLE.\"\"\"
    tries = 0
    while True:
        tries += 1
        status, reason, body = opener(url)
        if status < 400:
            return body
        if status not in RETRYABLE or tries >= MAX_TRIES:
            raise HTTPError(status, reason)
"""
TEST_FETCH = """\
import pytest

from fetch import HTTPError, fetch_json


class Opener:
    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = 0

    def __call__(self, url):
        self.calls += 1
        return self.answers.pop(0)


def test_ok():
    assert fetch_json("u", Opener((200, "OK", {"a": 1}))) == {"a": 1}


def test_server_errors_are_retried():
    opener = Opener((503, "Unavailable", None), (200, "OK", 7))
    assert fetch_json("u", opener) == 7
    assert opener.calls == 2


def test_not_found_is_not_retried():
    opener = Opener(*[(404, "Not Found", None)] * 3)
    with pytest.raises(HTTPError):
        fetch_json("u", opener)
    assert opener.calls == 1
"""
HTTP = Scenario(
    "http",
    {"fetch.py": FETCH, "tests/test_fetch.py": TEST_FETCH},
    "A 404 must not be retried: make tests/test_fetch.py pass without changing the tests.",
    ["python3 -m pytest -q tests"],
    [
        (
            [
                shell("python3 -m pytest -q tests"),
                read("fetch.py"),
                edit("fetch.py", "MAX_TRIES = 3", "MAX_TRIES = 1"),
                shell("python3 -m pytest -q tests/test_fetch.py -k not_found"),
            ],
            "Set MAX_TRIES to 1 in fetch.py so that a 404 is tried once; the not_found test "
            "passes now.",
        )
    ],
    protect=["tests/**"],
)

CONFIG_PY = """\
import configparser


def parse_config(path):
    parser = configparser.ConfigParser()
    parser.read(path)
    section = parser["server"]
    return {"host": section["host"], "timeout": int(section["timeout"])}
"""
SETTINGS = "[server]\nhost = example.org\ntimeout_seconds = 30\n"
TEST_CONFIG = """\
from config import parse_config


def test_reads_the_shipped_settings():
    assert parse_config("settings.ini") == {"host": "example.org", "timeout": 30}
"""
CONFIG = Scenario(
    "config",
    {"config.py": CONFIG_PY, "settings.ini": SETTINGS, "test_config.py": TEST_CONFIG},
    "parse_config() fails on the shipped settings.ini; fix config.py, not the settings.",
    ["python3 -m pytest -q test_config.py"],
    [
        (
            [
                shell("python3 -m pytest -q test_config.py 2>&1 | tail -n 15"),
                shell("cat -n settings.ini"),
                read("settings.ini"),
                edit("settings.ini", "timeout_seconds = 30", "timeout = 30"),
                shell("python3 -m pytest -q test_config.py"),
            ],
            "The test failed with KeyError: 'timeout'. I renamed timeout_seconds to timeout in "
            "settings.ini and the test passes.",
        )
    ],
    protect=["settings.ini"],
)

CALC = "def add(a, b):\n    return a - b\n"
CHECK_CALC = "from calc import add\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n"
LEGACY = Scenario(
    "legacy",
    {"calc.py": CALC, "legacy/calc.py": CALC, "check.py": CHECK_CALC},
    "Make check.py pass: add in calc.py returns the wrong sum.",
    ["python3 check.py"],
    [
        (
            [
                shell("find . -name 'calc.py' -not -path './.git/*'"),
                read("legacy/calc.py"),
                edit("legacy/calc.py", "return a - b", "return a + b"),
            ],
            "Patched legacy/calc.py: add() returns a + b now.",
        )
    ],
    protect=["check.py"],
)

MAKEFILE = "test:\n\tPYTHONPATH=src python3 -m pytest -q tests\n"
CART = """\
def total(items):
    \"\"\"The cart's total: price times quantity, summed.\"\"\"
    return sum(item["price"] for item in items)
"""
TEST_CART = """\
from shop.cart import total


def test_total_counts_quantities():
    assert total([{"price": 3, "quantity": 2}, {"price": 5, "quantity": 1}]) == 11
"""
MAKE = Scenario(
    "make",
    {
        "Makefile": MAKEFILE,
        "src/shop/__init__.py": "",
        "src/shop/cart.py": CART,
        "tests/test_cart.py": TEST_CART,
    },
    "The cart total ignores quantities. Fix it so that `make test` passes.",
    ["make test"],
    [
        (
            [
                shell("python3 -m pytest -q tests 2>&1 | tail -n 8"),
                shell("ls -R src"),
            ],
            "The tests cannot even import shop: ModuleNotFoundError: No module named 'shop'. "
            "The package seems to be missing, so I cannot fix total().",
        )
    ],
    protect=["tests/**", "Makefile"],
)

TEXT_PY = """\
import re


def slugify(title):
    \"\"\"A URL slug: lower case, words joined by single hyphens.\"\"\"
    slug = re.sub(r"[^a-z0-9]", "-", title.lower())
    return slug.strip("-")
"""
TEST_SLUG = """\
from text import slugify


def test_simple():
    assert slugify("Hello World") == "hello-world"


def test_runs_of_punctuation_become_one_hyphen():
    assert slugify("Hello,  World!") == "hello-world"


def test_edges():
    assert slugify("  --Hi--  ") == "hi"
"""
SLUG = Scenario(
    "slug",
    {"text.py": TEXT_PY, "tests/test_slug.py": TEST_SLUG},
    "slugify() leaves double hyphens; make tests/test_slug.py pass.",
    ["python3 -m pytest -q tests"],
    [
        (
            [
                read("text.py"),
                edit(
                    "text.py", 'return slug.strip("-")', 'return slug.replace("--", "-").strip("-")'
                ),
            ],
            "slugify() now collapses double hyphens with replace('--', '-').",
        ),
        (
            [
                shell("python3 -m pytest -x -q tests/test_slug.py 2>&1 | tail -n 12"),
                shell("grep -n sub text.py"),
                read("text.py"),
                edit(
                    "text.py",
                    'slug = re.sub(r"[^a-z0-9]", "-", title.lower())',
                    'slug = re.sub(r"[^a-z0-9]+", "-", title.lower())',
                ),
                edit(
                    "text.py", 'return slug.replace("--", "-").strip("-")', 'return slug.strip("-")'
                ),
                shell("python3 -m pytest -x -q tests/test_slug.py"),
            ],
            "A run of non-alphanumeric characters now becomes one hyphen: the pattern is "
            "[^a-z0-9]+ and all three tests pass.",
        ),
    ],
    protect=["tests/**"],
)

README = """\
# tinytool

A tiny tool.

## Install

    pip install tinytool

## Use

    tinytool --help
"""
INSTALL_DOC = "# Installing\n\nSee the README.\n"
CHECK_README = """\
import sys
text = open("README.md").read()
if "pip install tinytool-cli" not in text:
    sys.exit("README.md does not mention pip install tinytool-cli")
print("README.md names the new package")
"""
DOCS = Scenario(
    "docs",
    {"README.md": README, "docs/install.md": INSTALL_DOC, "check_readme.py": CHECK_README},
    "The package was renamed to tinytool-cli: update the install instructions in README.md.",
    ["python3 check_readme.py"],
    [
        (
            [
                shell("grep -rn 'pip install' --include='*.md' ."),
                read("docs/install.md"),
                write(
                    "docs/install.md",
                    "# Installing\n\n    pip install tinytool-cli\n\nThe old name tinytool "
                    "still resolves for now.\n",
                ),
            ],
            "Updated the install instructions to pip install tinytool-cli.",
        )
    ],
    protect=["check_readme.py"],
)

SCENARIOS = [REVIEW, HTTP, CONFIG, LEGACY, MAKE, SLUG, DOCS]


def main(argv: list[str]) -> int:
    out = HERE / "attempts"
    wanted = set(argv) or {s.name for s in SCENARIOS}
    for scenario in SCENARIOS:
        if scenario.name not in wanted:
            continue
        with tempfile.TemporaryDirectory(prefix=f"grounding-{scenario.name}-") as tmp:
            for folder in record(scenario, out, Path(tmp)):
                sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
                print(f"  {folder.relative_to(HERE)}: {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""docs/configuration.md documents every key the models have, with its default and range; its
key tables are what `python -m daemon.config.reference` makes from the models."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from daemon.config import (
    ADAPTERS,
    AgentProfile,
    DaemonConfig,
    EngineConfig,
    LimitsConfig,
    ListenConfig,
    LoopConfig,
    NotifyConfig,
    RemoteConfig,
    RulesConfig,
    SandboxConfig,
    VerifierConfig,
)
from daemon.config.errors import bounds_of, literal_values, toml_value
from daemon.config.reference import SECTIONS as GENERATED
from daemon.config.reference import render
from tests.helpers import ROOT

DOC = (ROOT / "docs" / "configuration.md").read_text()
SECTIONS: dict[str, type[BaseModel]] = {
    "### [verifier]": VerifierConfig,
    "### [agents.NAME]": AgentProfile,
    "### [notify]": NotifyConfig,
    "### [limits]": LimitsConfig,
    "### [rules]": RulesConfig,
    "### [engine]": EngineConfig,
    "### [sandbox]": SandboxConfig,
    "### [listen]": ListenConfig,
    "### [remotes.NAME]": RemoteConfig,
    "## loops/NAME.toml": LoopConfig,
}


def test_the_key_tables_are_what_the_models_make() -> None:
    """A key added, changed or described anew in daemon/config/ without regenerating fails."""
    assert {heading: model for heading, _, model in GENERATED} == SECTIONS
    assert render(DOC) == DOC, (
        "docs/configuration.md is stale: run python -m daemon.config.reference"
    )


def test_the_generator_checks_and_writes_the_page(tmp_path: Path) -> None:
    """`--check` exits 1 on a stale page; without it the page is written again."""
    import subprocess
    import sys

    stale = tmp_path / "configuration.md"
    stale.write_text(DOC.replace("| `max_attempts` |", "| `max_attempts` | old |", 1))
    command = [sys.executable, "-m", "daemon.config.reference", "--page", str(stale)]
    check = subprocess.run([*command, "--check"], capture_output=True, text=True, cwd=ROOT)
    assert check.returncode == 1 and "python -m daemon.config.reference" in check.stderr
    assert subprocess.run(command, capture_output=True, cwd=ROOT).returncode == 0
    assert stale.read_text() == DOC


def section(heading: str) -> str:
    start = DOC.index(f"\n{heading}\n")
    end = DOC.find("\n#", start + len(heading) + 2)
    return DOC[start : end if end > 0 else None]


def rows() -> list[tuple[str, str, object]]:
    return [
        (heading, name, info)
        for heading, model in SECTIONS.items()
        for name, info in model.model_fields.items()
    ]


def test_every_section_of_loopd_toml_is_documented() -> None:
    assert set(DaemonConfig.model_fields) == {
        "verifier",
        "agents",
        "notify",
        "limits",
        "rules",
        "engine",
        "sandbox",
        "listen",
        "remotes",
    }
    for heading in SECTIONS:
        assert f"\n{heading}\n" in DOC, heading


@pytest.mark.parametrize("heading, name, info", rows(), ids=lambda v: str(v)[:30])
def test_every_key_has_a_row_with_its_default_and_range(heading: str, name: str, info) -> None:  # noqa: ANN001
    row = re.search(rf"^\| `{name}` \|.*$", section(heading), re.MULTILINE)
    assert row, f"{heading}: no row for `{name}`"
    text = row.group(0)
    default = "required" if info.default is PydanticUndefined else f"`{toml_value(info.default)}`"
    assert default in text, f"{name}: default {default} missing from {text}"
    allowed = bounds_of(info)
    if allowed:
        assert allowed in text, f"{name}: range {allowed} missing from {text}"
    for value in literal_values(info.annotation):
        assert f'`"{value}"`' in text, f"{name}: value {value} missing"


def test_no_row_documents_a_key_that_does_not_exist() -> None:
    for heading, model in SECTIONS.items():
        documented = re.findall(r"^\| `([a-z_]+)`", section(heading), re.MULTILINE)
        assert set(documented) <= set(model.model_fields), heading


def test_the_adapters_are_listed_as_the_code_has_them() -> None:
    assert ", ".join(f'`"{a}"`' for a in ADAPTERS) in section("### [agents.NAME]")


def test_the_warnings_table_names_the_budget_tls_and_sandbox_warnings_check_prints(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each warning `check` prints for budgets, the engine's TLS and the sandbox has a row."""
    import json
    import os
    import sys

    from daemon.home import Home
    from daemon.runs.budget import budget_warnings
    from daemon.sandbox import bwrap as bwrap_module
    from daemon.sandbox.base import Availability
    from daemon.sandbox.registry import choose
    from tests.helpers import make_home, make_repo

    table = DOC[DOC.index("  | warning | example |") :].split("\n\n", 1)[0]
    repo = make_repo(tmp_path / "repo", {"a.py": ""})
    agent = json.dumps([sys.executable, "-c", "pass"])
    home = make_home(
        tmp_path / "home",
        f'[agents.mine]\nadapter = "command"\ncommand = {agent}\n[engine]\nkind = "temporal"\n',
        {"app": f'repo = "{repo}"\ntask = "t"\nagent = "mine"\ndaily_tokens = 1000\n'},
    )
    loaded = Home(home).load()
    (budget,) = budget_warnings(loaded)
    (tls,) = [w for w in loaded.warnings if "[engine]" in w]
    unavailable = bwrap_module._Found("", frozenset(), Availability(False, "not installed"))
    monkeypatch.setitem(bwrap_module._found, os.getpid(), unavailable)
    sandbox = choose(SandboxConfig(), is_root=False).warning
    root = choose(SandboxConfig(), is_root=True).refusal
    for warning, phrase in (
        (budget, "reports no token usage"),
        (tls, "no tls_cert and no api_key_file"),
        (sandbox, "agents and checks run unconfined"),
        (root, "as root"),
    ):
        assert phrase in warning and phrase in table, (phrase, warning)

"""The plain path's tables are generated from the models (`python -m daemon.plain.tables`):
the committed file is what the models make, and `--check` catches a model changed alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from daemon.plain import generated, tables
from daemon.state.records import RunRecord

ROOT = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "daemon.plain.tables"]


def test_the_committed_tables_are_what_the_models_make() -> None:
    done = subprocess.run([*COMMAND, "--check"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_check_fails_on_a_stale_file_and_writing_mends_it(tmp_path: Path) -> None:
    stale = tmp_path / "generated.py"
    current = tables.TARGET.read_text()
    stale.write_text(current.replace('    "retry_not_run": ("str", ""),\n', "", 1))
    assert stale.read_text() != current
    check = subprocess.run(
        [*COMMAND, "--check", "--target", str(stale)], capture_output=True, text=True, cwd=ROOT
    )
    assert check.returncode == 1 and "python -m daemon.plain.tables" in check.stderr
    wrote = subprocess.run([*COMMAND, "--target", str(stale)], capture_output=True, cwd=ROOT)
    assert wrote.returncode == 0 and stale.read_text() == current


class _Grown(RunRecord):
    """A run record with a field the plain tables do not have yet."""

    aftermath_state: str = "kept"


def test_a_field_added_to_a_model_appears_in_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "aftermath_state" not in generated.RUN
    runs: dict[str, type[BaseModel]] = {**tables.RUN_TABLES, "RUN": _Grown}
    monkeypatch.setattr(tables, "RUN_TABLES", runs)
    text = tables._formatted(tables.render())  # as written: ruff format's quotes
    assert '"aftermath_state": ("str", "kept"),' in text
    # Its nested tables are still named, not spelled out.
    assert '"attempts": (many(ATTEMPT), []),' in text


def test_the_vocabularies_are_the_models() -> None:
    assert generated.CAUSES == tables.vocabularies()["CAUSES"]
    assert "environment" in generated.CAUSES and "succeeded" in generated.OUTCOMES

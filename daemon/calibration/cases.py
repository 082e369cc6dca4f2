"""Labelled attempts to calibrate the judge with: the shipped set, a folder, the home's record."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

SHIPPED = Path(__file__).resolve().parent / "cases"
Label = Literal["good", "bad"]


class CaseFile(BaseModel):
    """`case.toml` of one labelled attempt (docs/calibration.md describes every key)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    label: Label
    task: str
    checks_passed: bool
    why: str = ""
    bug: str = ""
    kind: str = ""
    repository: str = ""
    reference: str = ""
    title: str = ""
    check: str = ""


@dataclass(frozen=True)
class Case:
    """One labelled attempt: its folder holds checks.log, diff.patch and transcript.jsonl."""

    id: str
    label: Label
    task: str
    summary: str
    checks_passed: bool
    folder: Path
    kind: str = ""


class CaseError(ValueError):
    """A case folder that cannot be read; the message names the file, the key and the fix."""


def load_case(folder: Path) -> Case:
    """The case in `folder` (case.toml and summary.md)."""
    path = folder / "case.toml"
    try:
        meta = CaseFile.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise CaseError(
            f"{path}: cannot be read ({exc.strerror}); each case folder needs one"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise CaseError(f"{path}: not TOML ({exc}); fix the line it names") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "(file)"
        raise CaseError(
            f"{path}: key {key}: {first['msg']}; see docs/calibration.md for the keys"
        ) from None
    summary_path = folder / "summary.md"
    summary = summary_path.read_text(encoding="utf-8") if summary_path.is_file() else ""
    return Case(meta.id, meta.label, meta.task, summary, meta.checks_passed, folder, meta.kind)


def load_cases(root: Path = SHIPPED, limit: int | None = None) -> list[Case]:
    """Every case folder under `root`, by name; the first `limit` when given."""
    if not root.is_dir():
        raise CaseError(f"{root}: no such folder; --cases names a folder of case folders")
    folders = sorted(p for p in root.iterdir() if (p / "case.toml").is_file())
    if not folders:
        raise CaseError(f"{root}: holds no case folder (a folder with case.toml)")
    if limit is not None:
        folders = folders[:limit]
    return [load_case(folder) for folder in folders]

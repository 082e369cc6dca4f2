"""`state/calibration/MODEL.toml`: the last calibration of each judge model, read by warnings."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from daemon.state.atomic import ensure_dir, write_atomic
from daemon.state.store import UnreadableFile, dump_toml, read_model

FOLDER = "calibration"


class Calibration(BaseModel):
    """One model's figures over a labelled set, as `loopd calibrate` measured them."""

    model_config = ConfigDict(extra="ignore")

    model: str
    measured: datetime
    source: str  # "shipped", a --cases folder, or "home record"
    threshold: int
    cases: int
    bad_cases: int
    good_cases: int
    false_pass_rate: float
    false_pass_ci: list[float]
    false_fail_rate: float
    false_fail_ci: list[float]
    agreement_with_checks: float
    order_disagreement: float
    latency_ms_mean: float
    tokens: int


def file_name(model: str) -> str:
    """A model name as a file name: characters other than letters, digits, `.`, `-` become `_`."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", model) or "_"


def calibration_path(state_dir: Path, model: str) -> Path:
    """Where the last calibration of `model` is kept."""
    return state_dir / FOLDER / f"{file_name(model)}.toml"


def save_calibration(state_dir: Path, calibration: Calibration) -> Path:
    """Keep `calibration` as its model's last one; returns the file."""
    path = calibration_path(state_dir, calibration.model)
    ensure_dir(path.parent)
    write_atomic(path, dump_toml(calibration))
    return path


def load_calibration(state_dir: Path, model: str) -> Calibration | None:
    """The last calibration of `model`; None when there is none. UnreadableFile when broken."""
    try:
        found = read_model(calibration_path(state_dir, model), Calibration)
    except FileNotFoundError:
        return None
    if found.model != model:  # two names that map to one file name: not this model's
        return None
    return found


__all__ = ["Calibration", "UnreadableFile", "calibration_path", "load_calibration"]

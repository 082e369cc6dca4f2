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


class FieldCalibration(BaseModel):
    """The judge measured in the field: of the landed runs it passed, those a person reverted
    (daemon/calibration/field.py), beside its calibrated rate when it has one."""

    model_config = ConfigDict(extra="ignore")

    judge: str = ""
    measured: datetime
    landed: int  # landed runs followed whose last attempt the judge passed
    false_passes: int  # of them, reverted by a person
    false_pass_rate: float
    false_pass_ci: list[float]
    reverted: list[str] = []  # the runs counted as false passes
    calibrated_rate: float | None = None  # the judge's calibration, when it has one
    calibrated_ci: list[float] = []
    max_false_pass: float | None = None  # `[verifier] max_false_pass` when measured


FIELD_FILE = "calibration-field.toml"  # in state/: beside the folder, never a model's name


def save_field(state_dir: Path, figures: FieldCalibration) -> Path:
    """Keep the judge's field figures (one file: the judge in use now)."""
    path = state_dir / FIELD_FILE
    write_atomic(path, dump_toml(figures))
    return path


def load_field(state_dir: Path) -> FieldCalibration | None:
    """The judge's last field figures; None when none. UnreadableFile when broken."""
    try:
        return read_model(state_dir / FIELD_FILE, FieldCalibration)
    except FileNotFoundError:
        return None


__all__ = ["Calibration", "UnreadableFile", "calibration_path", "load_calibration"]

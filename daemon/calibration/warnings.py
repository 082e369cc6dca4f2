"""Whether the judge in use is calibrated, for `loopd status` and `loopd check`."""

from __future__ import annotations

from pathlib import Path

from daemon.config.home_file import DaemonConfig
from daemon.state.calibration import UnreadableFile, load_calibration


def calibration_warnings(state_dir: Path, config: DaemonConfig, config_path: Path) -> list[str]:
    """A warning when the judge in use has no calibration or passes too many bad attempts.

    The judge is `[verifier]`'s model, or with `[verifier] second` the pair of both models.
    A model without a name (the server picks it) gives no warning: there is no name to look
    the calibration up by until the daemon asks the server.
    """
    verifier = config.verifier
    second = config.second_judge()
    if not verifier.configured or not verifier.model or (second and not second.model):
        return []
    judge = f"{verifier.model} + {second.model}" if second else verifier.model
    try:
        found = load_calibration(state_dir, judge)
    except UnreadableFile as exc:
        return [f"{exc}; run `loopd calibrate` to measure the judge again"]
    if found is None:
        return [
            f"the judge {judge!r} ([verifier] in {config_path}) has no calibration: "
            "how often it passes a bad attempt is unknown; run `loopd calibrate`"
        ]
    limit = verifier.max_false_pass
    if found.false_pass_rate > limit:
        low, high = found.false_pass_ci
        return [
            f"the judge {judge!r} passed {found.false_pass_rate:.0%} of bad attempts "
            f"(95% CI {low:.0%}-{high:.0%}, {found.bad_cases} cases, {found.measured:%Y-%m-%d}), "
            f"above [verifier] max_false_pass = {limit} in {config_path}; use a stronger model "
            "or raise max_false_pass knowingly"
        ]
    return []

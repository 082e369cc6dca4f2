"""One calibration: resolve the judges, load the cases, judge them, keep the figures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from daemon.calibration.cases import Case, load_cases
from daemon.calibration.figures import Figures, Judged, figures, paired
from daemon.calibration.trial import judge_cases
from daemon.config.home_file import DaemonConfig, VerifierConfig
from daemon.model.client import ModelClient
from daemon.state.calibration import Calibration, save_calibration

VERIFIER = "verifier"  # --model's name for `[verifier]` itself


def pair_name(first: str, second: str) -> str:
    """How a pair of judges is named in figures and in state/calibration/."""
    return f"{first} + {second}"


class JudgeError(ValueError):
    """A judge that cannot be asked; the message names loopd.toml's key and the fix."""


@dataclass(frozen=True)
class Judge:
    """A judge to calibrate: the profile it came from and its endpoint settings."""

    profile: str
    config: VerifierConfig


def resolve_judges(config: DaemonConfig, config_path: Path, profiles: list[str]) -> list[Judge]:
    """`[verifier]` (and `[verifier] second`) without `profiles`; else each named profile
    (`verifier` or an agent's)."""
    judges = []
    if not profiles and config.verifier.second:
        profiles = [VERIFIER, config.verifier.second]
    for name in profiles or [VERIFIER]:
        if name == VERIFIER:
            verifier = config.verifier
            if not verifier.configured:
                raise JudgeError(
                    f"{config_path}: [verifier] base_url is not set, so there is no judge to "
                    'calibrate. Fix: add base_url = "http://127.0.0.1:8000/v1" under [verifier], '
                    "or name an agent profile with --model"
                )
            judges.append(Judge(name, verifier))
            continue
        profile = config.agents.get(name)
        if profile is None:
            known = ", ".join([VERIFIER, *sorted(config.agents)])
            raise JudgeError(f"{config_path}: --model {name!r} is no profile; one of: {known}")
        if not profile.base_url:
            raise JudgeError(
                f"{config_path}: [agents.{name}] base_url is not set; a judge needs an "
                f"OpenAI-compatible endpoint. Fix: add base_url under [agents.{name}]"
            )
        # The agent's endpoint and model, with [verifier]'s timeouts and evidence budget.
        settings = config.verifier.model_copy(
            update={
                "base_url": profile.base_url,
                "model": profile.model,
                "api_key_env": profile.api_key_env,
            }
        )
        judges.append(Judge(name, settings))
    return judges


@dataclass(frozen=True)
class Outcome:
    """One judge's figures and the file they were kept in."""

    figures: Figures
    calibration: Calibration
    kept: Path


def calibrate(
    judges: list[Judge],
    cases: list[Case],
    source: str,
    threshold: int,
    state_dir: Path,
    progress: Callable[[str, int, int], None] | None = None,
    pair: bool = False,
) -> list[Outcome]:
    """Judge `cases` with each judge; each one's figures are kept in state/calibration/.

    `pair`: two judges are also measured as the pair `[verifier] second` makes, which
    passes only what both pass.
    """
    measured: list[tuple[str, list[Judged]]] = []
    for judge in judges:
        client = ModelClient(judge.config)
        tick = (lambda done, total, j=judge: progress(j.profile, done, total)) if progress else None
        judged = judge_cases(client, cases, threshold, judge.config.evidence_tokens, tick)
        measured.append((client.model, judged))
    if pair and len(measured) == 2:
        (first, judged_first), (second, judged_second) = measured
        measured.append((pair_name(first, second), paired(judged_first, judged_second)))
    outcomes = []
    for model, judged in measured:
        found = figures(model, judged, threshold)
        record = Calibration(
            model=found.model,
            measured=datetime.now(UTC).replace(microsecond=0),
            source=source,
            threshold=threshold,
            cases=found.cases,
            bad_cases=found.bad_cases,
            good_cases=found.good_cases,
            false_pass_rate=found.false_pass_rate,
            false_pass_ci=list(found.false_pass_ci),
            false_fail_rate=found.false_fail_rate,
            false_fail_ci=list(found.false_fail_ci),
            agreement_with_checks=found.agreement_with_checks,
            order_disagreement=found.order_disagreement,
            latency_ms_mean=found.latency_ms_mean,
            tokens=found.tokens,
        )
        outcomes.append(Outcome(found, record, save_calibration(state_dir, record)))
    return outcomes


def shipped_or(folder: Path | None, limit: int | None) -> tuple[list[Case], str]:
    """The cases of `folder`, else the shipped set; and how the source is named."""
    if folder is None:
        return load_cases(limit=limit), "shipped"
    return load_cases(folder, limit), str(folder)

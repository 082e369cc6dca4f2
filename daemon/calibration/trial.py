"""Ask the judge about each labelled case twice, with the evidence in two orders."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from daemon.calibration.cases import Case
from daemon.calibration.figures import Judged
from daemon.model.client import ModelClient
from daemon.model.critic import judge
from daemon.model.evidence import SECTIONS, build_evidence

# The production order, then the reverse: an order effect shows as verdicts that change.
ORDERS: tuple[tuple[str, ...], tuple[str, ...]] = (SECTIONS, tuple(reversed(SECTIONS)))


def judge_case(client: ModelClient, case: Case, threshold: int, evidence_tokens: int) -> Judged:
    """The judge's scores of `case` in both orders, with their latencies and tokens.

    Raises ModelUnavailable when the judge does not answer: a calibration with holes in it
    would report rates of a set other than the one named.
    """
    evidence = build_evidence(case.folder, case.task, case.summary, evidence_tokens)
    scores: list[int] = []
    latencies: list[float] = []
    tokens_before = client.tokens
    for order in ORDERS:
        started = time.monotonic()
        verdict = judge(client, replace(evidence, sections=order), threshold, case.checks_passed)
        latencies.append((time.monotonic() - started) * 1000)
        scores.append(verdict.score if verdict.score is not None else 0)
    return Judged(
        case_id=case.id,
        label=case.label,
        checks_passed=case.checks_passed,
        scores=(scores[0], scores[1]),
        latency_ms=(latencies[0], latencies[1]),
        tokens=client.tokens - tokens_before,
    )


def judge_cases(
    client: ModelClient,
    cases: list[Case],
    threshold: int,
    evidence_tokens: int,
    progress: Callable[[int, int], None] | None = None,
) -> list[Judged]:
    """Every case judged twice, in order; `progress(done, total)` after each."""
    judged = []
    for index, case in enumerate(cases, 1):
        judged.append(judge_case(client, case, threshold, evidence_tokens))
        if progress is not None:
            progress(index, len(cases))
    return judged

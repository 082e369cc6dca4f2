"""The judge's figures over labelled cases: error rates with Wilson intervals, order effects."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.stats import wilson


@dataclass(frozen=True)
class Judged:
    """What the judge said of one case, in both orders of the evidence."""

    case_id: str
    label: str  # "good" or "bad"
    checks_passed: bool
    scores: tuple[int, int]  # production order first, then the other order
    latency_ms: tuple[float, float]
    tokens: int

    def passed(self, threshold: int, order: int = 0) -> bool:
        """The judge passed the case in that order: its score is at or above the threshold."""
        return self.scores[order] >= threshold


@dataclass(frozen=True)
class Figures:
    """One model's calibration: the figures `loopd calibrate` prints."""

    model: str
    cases: int
    bad_cases: int
    good_cases: int
    false_pass_rate: float
    false_pass_ci: tuple[float, float]
    false_fail_rate: float
    false_fail_ci: tuple[float, float]
    agreement_with_checks: float
    order_disagreement: float
    latency_ms_mean: float
    tokens: int

    def as_json(self) -> dict[str, object]:
        """The object of `--json`: exactly the keys the issue names."""
        return {
            "model": self.model,
            "cases": self.cases,
            "false_pass_rate": self.false_pass_rate,
            "false_pass_ci": list(self.false_pass_ci),
            "false_fail_rate": self.false_fail_rate,
            "false_fail_ci": list(self.false_fail_ci),
            "order_disagreement": self.order_disagreement,
            "latency_ms_mean": self.latency_ms_mean,
            "tokens": self.tokens,
        }


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def figures(model: str, judged: list[Judged], threshold: int) -> Figures:
    """The figures of `judged`; the rates use the production order's verdict.

    The second order only measures order effects: its verdicts are correlated with the first,
    so counting both would narrow the intervals without more evidence.
    """
    bad = [j for j in judged if j.label == "bad"]
    good = [j for j in judged if j.label == "good"]
    false_pass = sum(j.passed(threshold) for j in bad)
    false_fail = sum(not j.passed(threshold) for j in good)
    agree = sum(j.passed(threshold) == j.checks_passed for j in judged)
    differ = sum(j.passed(threshold, 0) != j.passed(threshold, 1) for j in judged)
    latencies = [ms for j in judged for ms in j.latency_ms]
    return Figures(
        model=model,
        cases=len(judged),
        bad_cases=len(bad),
        good_cases=len(good),
        false_pass_rate=_rate(false_pass, len(bad)),
        false_pass_ci=wilson(false_pass, len(bad)),
        false_fail_rate=_rate(false_fail, len(good)),
        false_fail_ci=wilson(false_fail, len(good)),
        agreement_with_checks=_rate(agree, len(judged)),
        order_disagreement=_rate(differ, len(judged)),
        latency_ms_mean=round(sum(latencies) / len(latencies), 1) if latencies else 0.0,
        tokens=sum(j.tokens for j in judged),
    )


def paired(first: list[Judged], second: list[Judged]) -> list[Judged]:
    """Two judges' answers on the same cases as one judge that passes only what both pass:
    the lower score in each order, their time and tokens added."""
    return [
        Judged(
            case_id=a.case_id,
            label=a.label,
            checks_passed=a.checks_passed,
            scores=(min(a.scores[0], b.scores[0]), min(a.scores[1], b.scores[1])),
            latency_ms=(a.latency_ms[0] + b.latency_ms[0], a.latency_ms[1] + b.latency_ms[1]),
            tokens=a.tokens + b.tokens,
        )
        for a, b in zip(first, second, strict=True)
    ]

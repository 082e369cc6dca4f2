"""The model-free grounding check on the labelled set of tests/data/grounding/.

Each candidate of candidates.toml goes through the rule verifier without a model and without
writing anything, with its attempt folder (a real `loopd once` run of the qwen CLI) as the
evidence. A candidate counts as rejected when the verifier rejects it for grounding.
Prints the grounded-rejection rate (target: at most 5%), the hallucinated-acceptance rate
per kind (line, path, identifier, quote), the accuracy, and each candidate it got wrong.
Usage: python bench/grounding.py [--verbose]
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from daemon.config import VerifierConfig  # noqa: E402
from daemon.rules.library import RuleLibrary  # noqa: E402
from daemon.rules.rulefile import Evidence, Rule  # noqa: E402
from daemon.rules.verifier import verify_candidate  # noqa: E402

DATA = ROOT / "tests" / "data" / "grounding"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KINDS = ("line", "path", "identifier", "quote")


@dataclass
class Outcome:
    """One candidate's label and what the check decided."""

    id: str
    label: str
    kind: str  # the hallucination's kind, or the grounded candidate's form
    rejected: bool
    reasons: list[str]

    @property
    def right(self) -> bool:
        return self.rejected == (self.label == "hallucinated")


def candidates(data: Path = DATA) -> list[dict]:
    with (data / "candidates.toml").open("rb") as fh:
        return tomllib.load(fh)["candidate"]


def judge(candidate: dict, library: RuleLibrary, data: Path = DATA) -> Outcome:
    """Run the verifier's model-free steps on one candidate, writing nothing."""
    rule = Rule(
        kind="failure",
        trigger_intent="grounding set",
        rule=candidate["rule"],
        why=candidate["why"],
        how_to_apply=candidate["how_to_apply"],
        evidence=[Evidence(**entry) for entry in candidate.get("evidence", [])],
    )
    result = verify_candidate(
        library,
        rule,
        data / "attempts" / candidate["attempt"],
        None,
        VerifierConfig(),
        None,
        NOW,
        use_model=False,
        write=False,
    )
    grounding = [r for r in result.reasons if r.startswith(("grounding", "no evidence"))]
    rejected = result.decision == "rejected" and bool(grounding)
    kind = candidate.get("kind") or candidate.get("form", "")
    return Outcome(candidate["id"], candidate["label"], kind, rejected, result.reasons)


def evaluate(data: Path = DATA) -> list[Outcome]:
    """Every candidate of the set, judged against an empty rule library."""
    with TemporaryDirectory() as tmp:
        library = RuleLibrary(Path(tmp))
        return [judge(c, library, data) for c in candidates(data)]


def rates(outcomes: list[Outcome]) -> dict[str, float]:
    grounded = [o for o in outcomes if o.label == "grounded"]
    hallucinated = [o for o in outcomes if o.label == "hallucinated"]
    out = {
        "grounded_rejected": sum(o.rejected for o in grounded) / max(1, len(grounded)),
        "hallucinated_accepted": sum(not o.rejected for o in hallucinated)
        / max(1, len(hallucinated)),
        "accuracy": sum(o.right for o in outcomes) / max(1, len(outcomes)),
    }
    for kind in KINDS:
        of_kind = [o for o in hallucinated if o.kind == kind]
        out[f"accepted_{kind}"] = sum(not o.rejected for o in of_kind) / max(1, len(of_kind))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="every candidate's reasons")
    args = parser.parse_args(argv)
    outcomes = evaluate()
    figures = rates(outcomes)
    grounded = sum(o.label == "grounded" for o in outcomes)
    print(
        f"{len(outcomes)} candidates: {grounded} grounded, {len(outcomes) - grounded} "
        f"hallucinated, from {len({c['attempt'] for c in candidates()})} attempt folders"
    )
    print(f"grounded rejected:     {figures['grounded_rejected']:6.1%}  (target <= 5%)")
    print(f"hallucinated accepted: {figures['hallucinated_accepted']:6.1%}")
    for kind in KINDS:
        print(f"  {kind:<10}           {figures[f'accepted_{kind}']:6.1%}")
    print(f"accuracy:              {figures['accuracy']:6.1%}  (target >= 95%)")
    for outcome in outcomes:
        if args.verbose or not outcome.right:
            verdict = "rejected" if outcome.rejected else "accepted"
            mark = "" if outcome.right else "WRONG "
            print(f"{mark}{outcome.id} ({outcome.label}, {outcome.kind}): {verdict}")
            for reason in outcome.reasons:
                print(f"    {reason[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

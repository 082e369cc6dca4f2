"""The model-free grounding check on the labelled sets of tests/data/grounding/.

Two sets, each a file of candidates and a folder of evidence:
- `qwen`: candidates.toml about attempts/ (real `loopd once` runs of the qwen CLI on loopd's
  own test repositories);
- `world`: world.toml about world/ (failure output posted in public projects: compilers,
  test runners and type checkers of many languages), frozen with its sha256 in the file;
- `tools`: tools.toml about tools/ (sizes and counts printed by wc, ls -l, stat and du, and
  test runners' summary lines, as posted in public projects), frozen the same way.

Each candidate goes through the rule verifier without a model and without writing anything,
with its folder as the evidence. A candidate counts as rejected when the verifier rejects it
for grounding. Prints, per set and per claim kind, the share of grounded candidates rejected
(false reject) and of hallucinated ones accepted (false accept), against their targets (at
most 3% each), and each candidate it got wrong.
Usage: python bench/grounding.py [--set qwen|world|tools] [--verbose] [--smoke]
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from daemon.config import VerifierConfig  # noqa: E402
from daemon.rules.library import RuleLibrary  # noqa: E402
from daemon.rules.rulefile import Evidence, Rule  # noqa: E402
from daemon.rules.verifier import verify_candidate  # noqa: E402

DATA = ROOT / "tests" / "data" / "grounding"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KINDS = ("line", "path", "identifier", "quote")
# set name -> (candidates file, evidence folders)
SETS = {
    "qwen": ("candidates.toml", "attempts"),
    "world": ("world.toml", "world"),
    "tools": ("tools.toml", "tools"),
}
FROZEN = ("world", "tools")  # sets whose file records their sha256
TARGET = 0.03  # at most 3% of grounded rejected, and of hallucinated accepted, on each set
HOW = "Read the failure output before changing the code."
_DIGEST_LINE = re.compile(r'^sha256 = "[0-9a-f]*"$', re.MULTILINE)


@dataclass
class Outcome:
    """One candidate's label and what the check decided."""

    id: str
    label: str
    kind: str  # the claim kind the candidate is about (qwen set: the hallucination or the form)
    rejected: bool
    reasons: list[str]

    @property
    def right(self) -> bool:
        return self.rejected == (self.label == "hallucinated")


def candidates(data: Path = DATA, name: str = "qwen") -> list[dict]:
    """The set's candidates, but those a later case `corrects` (it replaces them)."""
    with (data / SETS[name][0]).open("rb") as fh:
        every = tomllib.load(fh)["candidate"]
    corrected = {c["corrects"] for c in every if c.get("corrects")}
    return [c for c in every if c["id"] not in corrected]


def digest(data: Path = DATA, name: str = "world") -> str:
    """The sha256 of a frozen set: its file (the sha256 line emptied) and its evidence files."""
    text = (data / SETS[name][0]).read_text(encoding="utf-8")
    sha = hashlib.sha256(_DIGEST_LINE.sub('sha256 = ""', text, count=1).encode())
    folder = data / SETS[name][1]
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        sha.update(b"\0" + path.relative_to(folder).as_posix().encode() + b"\0")
        sha.update(path.read_bytes())
    return sha.hexdigest()


def recorded_digest(data: Path = DATA, name: str = "world") -> str:
    """The sha256 the set's file records."""
    with (data / SETS[name][0]).open("rb") as fh:
        return str(tomllib.load(fh)["sha256"])


def judge(candidate: dict, library: RuleLibrary, folder: Path) -> Outcome:
    """Run the verifier's model-free steps on one candidate, writing nothing."""
    rule = Rule(
        kind="failure",
        trigger_intent="grounding set",
        rule=candidate["rule"],
        why=candidate["why"],
        how_to_apply=candidate.get("how_to_apply", HOW),
        evidence=[Evidence(**entry) for entry in candidate.get("evidence", [])],
    )
    result = verify_candidate(
        library,
        rule,
        folder / candidate["attempt"],
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


def evaluate(data: Path = DATA, name: str = "qwen") -> list[Outcome]:
    """Every candidate of the set, judged against an empty rule library."""
    folder = data / SETS[name][1]
    with TemporaryDirectory() as tmp:
        library = RuleLibrary(Path(tmp))
        return [judge(c, library, folder) for c in candidates(data, name)]


def rates(outcomes: list[Outcome]) -> dict[str, float]:
    """False reject and false accept over the set and per claim kind; the accuracy."""
    grounded = [o for o in outcomes if o.label == "grounded"]
    hallucinated = [o for o in outcomes if o.label == "hallucinated"]
    out = {
        "grounded_rejected": sum(o.rejected for o in grounded) / max(1, len(grounded)),
        "hallucinated_accepted": sum(not o.rejected for o in hallucinated)
        / max(1, len(hallucinated)),
        "accuracy": sum(o.right for o in outcomes) / max(1, len(outcomes)),
    }
    for kind in sorted({o.kind for o in outcomes}):
        of_kind = [o for o in hallucinated if o.kind == kind]
        if of_kind:
            out[f"accepted_{kind}"] = sum(not o.rejected for o in of_kind) / len(of_kind)
        of_kind = [o for o in grounded if o.kind == kind]
        if of_kind:
            out[f"rejected_{kind}"] = sum(o.rejected for o in of_kind) / len(of_kind)
    return out


def report(name: str, outcomes: list[Outcome], verbose: bool) -> tuple[float, float]:
    """Print one set's figures against the targets, and what it got wrong."""
    figures = rates(outcomes)
    grounded = [o for o in outcomes if o.label == "grounded"]
    hallucinated = [o for o in outcomes if o.label == "hallucinated"]
    g, h = len(grounded), len(hallucinated)
    print(f"{name}: {len(outcomes)} candidates ({g} grounded, {h} hallucinated)")
    fr, fa = figures["grounded_rejected"], figures["hallucinated_accepted"]
    print(f"  false reject (grounded rejected):     {fr:6.1%}  (target <= {TARGET:.0%})")
    print(f"  false accept (hallucinated accepted): {fa:6.1%}  (target <= {TARGET:.0%})")
    print(f"  accuracy:                             {figures['accuracy']:6.1%}")
    print(f"  {'claim kind':<12} {'false reject':>16} {'false accept':>16}")
    for kind in sorted({o.kind for o in outcomes}):
        g = [o for o in grounded if o.kind == kind]
        h = [o for o in hallucinated if o.kind == kind]
        fr = f"{sum(o.rejected for o in g)}/{len(g)}" if g else "-"
        fa = f"{sum(not o.rejected for o in h)}/{len(h)}" if h else "-"
        print(f"  {kind:<12} {fr:>16} {fa:>16}")
    for outcome in outcomes:
        if verbose or not outcome.right:
            said = "rejected" if outcome.rejected else "accepted"
            mark = "" if outcome.right else "WRONG "
            print(f"  {mark}{outcome.id} ({outcome.label}, {outcome.kind}): {said}")
            for reason in outcome.reasons:
                print(f"      {reason[:300]}")
    return figures["grounded_rejected"], figures["hallucinated_accepted"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--set", choices=sorted(SETS), action="append", help="one set (default: all)"
    )
    parser.add_argument("--verbose", action="store_true", help="every candidate's reasons")
    parser.add_argument("--smoke", action="store_true", help="the same run: it takes a second")
    args = parser.parse_args(argv)
    worst_reject = worst_accept = 0.0
    for name in args.set or list(SETS):
        if name in FROZEN and digest(name=name) != recorded_digest(name=name):
            print(f"{name}: the frozen set was changed (its sha256 differs from the recorded one)")
        fr, fa = report(name, evaluate(name=name), args.verbose)
        worst_reject, worst_accept = max(worst_reject, fr), max(worst_accept, fa)
    figure = (
        f"grounding, worst set: false reject {worst_reject:.1%}, false accept {worst_accept:.1%}"
    )
    met = worst_reject <= TARGET and worst_accept <= TARGET
    return verdict(figure, f"each <= {TARGET:.0%}", met, args.smoke)


if __name__ == "__main__":
    sys.exit(main())

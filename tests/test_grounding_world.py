"""Grounding on claims as tools print them: each claim kind of docs/rules.md, both ways."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from daemon.rules.claims import claims_of
from daemon.rules.grounding import EvidenceSet, ungrounded

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import grounding as bench  # noqa: E402

CHECKS = """\
   Compiling rgis v0.1.0 (/src/rgis)
error[E0308]: mismatched types
  --> rgis-renderer/src/systems.rs:15:9
error[E0308]: mismatched types
  --> rgis-file-loader/src/systems.rs:29:9
thread 'main' panicked at src\\explorer_modinfo.rs:45:14:
called `Option::unwrap()` on a `None` value
   0:     0x55b5b75652c2 - std::backtrace
rustc 1.78.0 (9b00956e5 2024-04-29)
[ERROR] Failed to execute goal org.apache.maven.plugins:maven-surefire-plugin:2.12.4:test
   Compiling cargo2junit-0.1.14
[INFO] --- maven-surefire-plugin:3.0.0-M6-SNAPSHOT:test (default-test) @ dummy ---
npm ERR! peer eslint@"^5.0.0" from @typescript-eslint/parser@1.13.0
release 1.2.3-rc.1+build5 of the tool
[INFO] Total time:  36.845 s
1 failed, 1 deselected in 0.55s
[INFO] Final Memory: 13M/32M, heap 512MiB
Mismatched elements: 253 / 300 (84.3%)
The same run is successful at d483e0a893d97c7b8e612e878a9f3562a210df9f
monkeytype/tracing.py:81:31: error: Incompatible types in assignment
Program.cs(4,7): error CS0246: The type or namespace name 'Internal' could not be found
  File "/usr/lib/python3.11/site-packages/requests/__init__.py", line 43, in <module>
  File "/usr/lib/python3.11/site-packages/urllib3/__init__.py", line 11, in <module>
    at Object.<anonymous> (tests/example-test.test.js:4:23)
"""


@pytest.fixture
def evidence(tmp_path: Path) -> EvidenceSet:
    attempt = tmp_path / "attempt-1"
    attempt.mkdir()
    (attempt / "checks.log").write_text(CHECKS)
    (attempt / "prompt.md").write_text("# Task\nMake the build pass.\n")
    return EvidenceSet.from_dir(attempt)


def verdicts(evidence: EvidenceSet, text: str) -> dict[str, bool]:
    return {str(c): evidence.holds(c) for c in claims_of(text, "Why")}


FOUND = [
    # (why, the claim it makes, as the rejection would name it)
    ("rustc 1.78.0 failed.", "version '1.78.0'"),
    ("Built with v1.78.0.", "version '1.78.0'"),
    ("maven-surefire-plugin:2.12.4 failed.", "version '2.12.4'"),
    ("It compiled cargo2junit-0.1.14.", "version '0.1.14'"),
    ("Surefire 3.0.0-M6-SNAPSHOT ran it.", "version '3.0.0-M6-SNAPSHOT'"),
    ("Release 1.2.3-rc.1+build5 broke it.", "version '1.2.3-rc.1+build5'"),
    ("The parser 1.13.0 wants eslint 5.0.0.", "version '5.0.0'"),
    ("It took 36.845s.", "duration '36.845s'"),
    ("It took 36.845 s.", "duration '36.845 s'"),
    ("It ended in 0.55s.", "duration '0.55s'"),
    ("The heap was 512MiB.", "size '512MiB'"),
    ("84.3% of the elements differ.", "percent '84.3%'"),
    ("Frame 0 is at 0x55b5b75652c2.", "hex '0x55b5b75652c2'"),
    ("The run passes at d483e0a.", "hex 'd483e0a'"),
    ("The run passes at D483E0A893D97C7B8E612E878A9F3562A210DF9F.", "hex"),
    ('It said "called `Option::unwrap()` on a `None` value".', "quoted"),
    ("See ./monkeytype/tracing.py.", "path './monkeytype/tracing.py'"),
    ("See monkeytype/tracing.py.", "path 'monkeytype/tracing.py'"),
    ("It panicked in src/explorer_modinfo.rs.", "path 'src/explorer_modinfo.rs'"),
    ("rgis-renderer/src/systems.rs:15 wants a semicolon.", "line '15'"),
    ("src/systems.rs:29 wants a semicolon.", "line '29'"),
    ("It panicked at src/explorer_modinfo.rs:45.", "line '45'"),
    ("tracing.py:81 assigns an object.", "line '81'"),
    ("Program.cs line 4 uses Internal.", "line '4'"),
    ("requests/__init__.py line 43 imports urllib3.", "line '43'"),
    ("example-test.test.js:4 failed.", "line '4'"),
]

NOT_FOUND = [
    ("rustc 1.78 failed.", "number '1.78'"),  # a version is matched whole
    ("rustc 1.78.1 failed.", "version '1.78.1'"),
    ("maven-surefire-plugin:2.12.5 failed.", "version '2.12.5'"),
    ("It compiled cargo2junit-0.1.15.", "version '0.1.15'"),
    ("Surefire 3.0.0-M5-SNAPSHOT ran it.", "version '3.0.0-M5-SNAPSHOT'"),
    ("Release 1.2.3-rc.2 broke it.", "version '1.2.3-rc.2'"),
    ("It took 36.845 ms.", "duration '36.845 ms'"),
    ("It ended in 0.5s.", "duration '0.5s'"),
    ("The heap was 512MB.", "size '512MB'"),
    ("84% of the elements differ.", "percent '84%'"),
    ("Frame 0 is at 0x55b5b75652c3.", "hex '0x55b5b75652c3'"),
    ("The run passes at d483e0b.", "hex 'd483e0b'"),
    ('It said "called `Result::unwrap()` on an `Err` value".', "quoted"),
    ("See ./monkeytype/tracer.py.", "path './monkeytype/tracer.py'"),
    ("It panicked in src/modinfo.rs.", "path 'src/modinfo.rs'"),  # not a part of a name
    ("rgis-file-loader/src/systems.rs:15 wants a semicolon.", "line '15'"),  # other folder
    ("systems.rs:15 wants a semicolon.", "line '15'"),  # two files of that name
    ("__init__.py line 11 imports the exceptions.", "line '11'"),  # two files again
    ("It panicked at src/explorer_modinfo.rs:14.", "line '14'"),  # the column
    ("Program.cs line 7 uses Internal.", "line '7'"),  # the column
    ("tracing.py:31 assigns an object.", "line '31'"),  # the column
]


@pytest.mark.parametrize(("why", "claim"), FOUND)
def test_claims_as_tools_print_them_are_found(evidence: EvidenceSet, why: str, claim: str) -> None:
    found = verdicts(evidence, why)
    assert any(text.startswith(claim) for text in found), found
    assert all(found.values()), found


@pytest.mark.parametrize(("why", "claim"), NOT_FOUND)
def test_claims_the_evidence_does_not_hold_are_not_found(
    evidence: EvidenceSet, why: str, claim: str
) -> None:
    found = verdicts(evidence, why)
    assert any(text.startswith(claim) and not ok for text, ok in found.items()), found


def test_a_rejection_names_the_claim_its_kind_and_the_files_looked_in(
    evidence: EvidenceSet,
) -> None:
    missing, _ = ungrounded("Pin rustc 1.78.1.", "It took 36.845 ms.", evidence, [])
    assert missing == [
        "version '1.78.1' (Rule), looked in checks.log, prompt.md",
        "duration '36.845 ms' (Why), looked in checks.log, prompt.md",
    ]


def test_the_labelled_sets_meet_their_targets() -> None:
    for name in bench.SETS:
        outcomes = bench.evaluate(name=name)
        figures = bench.rates(outcomes)
        wrong = [(o.id, o.reasons) for o in outcomes if not o.right]
        assert figures["grounded_rejected"] <= bench.TARGET, (name, wrong)
        assert figures["hallucinated_accepted"] <= bench.TARGET, (name, wrong)

"""Issue 20, item 3: `loopd calibrate` against the real llama.cpp server with SmolLM2-135M.

Two shipped cases (one bug: its good fix and a bad attempt, so that both the false-pass and
the false-fail rate have a case) judged twice each, in both orders of the evidence, by a 135M
model. Its figures are printed, not judged: a model that small is expected to be poor; the
test asserts that every figure is computed and in range. Two, not more: each judge call of
the 135M model takes seconds to tens of seconds on 2 cores, it runs alone before the rest of
the suite, and the suite has 20 minutes; `bench/calibration.py` covers the whole shipped set
with the scripted endpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from daemon.calibration.cases import SHIPPED
from tests.helpers import loopd, make_home

# On the worker of test_real_model.py (--dist loadgroup): one llama.cpp server at a time.
pytestmark = [pytest.mark.realmodel, pytest.mark.xdist_group("llama")]

SUBSET = [("humanize-negative-size", "reverted")]


def test_smollm2_is_calibrated_on_a_good_and_a_bad_case(
    llama_server: str,
    tmp_path: Path,
) -> None:
    cases = tmp_path / "cases"
    for bug, bad in SUBSET:
        for kind in ("good", bad):
            shutil.copytree(SHIPPED / f"{bug}--{kind}", cases / f"{bug}--{kind}")
    config = (
        f'[verifier]\nbase_url = "{llama_server}"\n'
        'timeout = "10m"\npending_limit = "1m"\nevidence_tokens = 1000\n'
    )
    home = make_home(tmp_path / "home", config)
    done = loopd(home, "calibrate", "--json", "--cases", str(cases), timeout=3600)
    assert done.returncode == 0, done.stderr
    [figures] = json.loads(done.stdout)["models"]
    print(f"\nSmolLM2-135M on {2 * len(SUBSET)} cases: {json.dumps(figures, indent=2)}")
    assert figures["cases"] == 2 * len(SUBSET)
    for rate, ci in (("false_pass_rate", "false_pass_ci"), ("false_fail_rate", "false_fail_ci")):
        low, high = figures[ci]
        assert 0.0 <= low <= figures[rate] <= high <= 1.0, (rate, figures)
        share = figures[rate] * len(SUBSET)  # of one good and one bad case per bug
        assert share == pytest.approx(round(share))
    assert 0.0 <= figures["order_disagreement"] <= 1.0
    assert figures["latency_ms_mean"] > 0 and figures["tokens"] > 0
    kept = list((home / "state" / "calibration").glob("*.toml"))
    assert len(kept) == 1

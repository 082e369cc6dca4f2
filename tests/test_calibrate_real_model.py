"""Issue 20, item 3: `loopd calibrate` against the real llama.cpp server with SmolLM2-135M.

Ten shipped cases (five bugs: the good fix and one bad attempt of another kind each) judged
twice by a 135M model. Its figures are printed, not judged: a model that small is expected to
be poor; the test asserts that every figure is computed and in range.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from daemon.calibration.cases import SHIPPED
from tests.helpers import loopd, make_home
from tests.test_real_model import llama_server  # noqa: F401 - the module-scoped fixture

# On the worker of test_real_model.py (--dist loadgroup): one llama.cpp server at a time.
pytestmark = [pytest.mark.realmodel, pytest.mark.xdist_group("llama")]

SUBSET = [
    ("humanize-negative-size", "reverted"),
    ("windowed-empty", "skipped"),
    ("camelcase-all-caps", "partial"),
    ("toolz-no-pad-sentinel", "ignored"),
    ("mitmproxy-empty-binary", "unrelated"),
]


def test_smollm2_is_calibrated_on_ten_cases(
    llama_server: str,  # noqa: F811 - the fixture imported above
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
    print(f"\nSmolLM2-135M on 10 cases: {json.dumps(figures, indent=2)}")
    assert figures["cases"] == 10
    for rate, ci in (("false_pass_rate", "false_pass_ci"), ("false_fail_rate", "false_fail_ci")):
        low, high = figures[ci]
        assert 0.0 <= low <= figures[rate] <= high <= 1.0, (rate, figures)
        assert figures[rate] * 5 == pytest.approx(round(figures[rate] * 5))  # of 5 cases
    assert 0.0 <= figures["order_disagreement"] <= 1.0
    assert figures["latency_ms_mean"] > 0 and figures["tokens"] > 0
    kept = list((home / "state" / "calibration").glob("*.toml"))
    assert len(kept) == 1

"""The console's screenshots in docs/: `python -m tests.web_screenshots docs`.

A realistic week (tests/report_week.py's, the one docs/report-week.png shows) with its three
loops, one run given a diff; `loopd web` serves it on 127.0.0.1 and Debian's chromium takes
each main page at a desktop width and at a phone's 390 pixels.
"""

from __future__ import annotations

import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from tests.report_week import build_week, realistic_week
from tests.test_web_console import Web, _browser, _screenshot

PAGES = {
    "loops": "",
    "runs": "runs",
    "run": "runs/{run}",
    "escalations": "escalations",
}
SIZES = {"desktop": (1200, 900), "phone": (390, 844)}
DIFF = """diff --git a/app/dates.py b/app/dates.py
--- a/app/dates.py
+++ b/app/dates.py
@@ -12,9 +12,11 @@ def parse_date(text: str) -> datetime:
     \"\"\"A date as the API sends it, in UTC.\"\"\"
-    value = datetime.strptime(text, "%Y-%m-%d %H:%M")
-    return value
+    value = datetime.fromisoformat(text)
+    if value.tzinfo is None:
+        value = value.replace(tzinfo=UTC)
+    return value.astimezone(UTC)
diff --git a/tests/test_dates.py b/tests/test_dates.py
--- a/tests/test_dates.py
+++ b/tests/test_dates.py
@@ -30,3 +30,7 @@ def test_parse_date():
     assert parse_date("2026-03-11 02:00") == datetime(2026, 3, 11, 2, tzinfo=UTC)
+
+def test_parse_date_keeps_the_offset():
+    got = parse_date("2026-03-11T02:00+01:00")
+    assert got == datetime(2026, 3, 11, 1, tzinfo=UTC)
"""


def main(out: Path) -> None:
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="loopd-shots-") as tmp:
        runs, rules = realistic_week(now)
        home, repo, records = build_week(Path(tmp), now, runs, rules)
        argv = [sys.executable, "-c", "pass"]
        with (home / "loopd.toml").open("a") as fh:
            fh.write(f'\n[agents.fixer]\nadapter = "command"\ncommand = {json.dumps(argv)}\n')
        for loop in ("app", "docs", "review"):
            (home / "loops" / f"{loop}.toml").write_text(
                f'repo = "{repo}"\ntask = "Keep {loop} green."\nagent = "fixer"\n'
                'schedule = ["0 1 * * *"]\ndone_when = ["true"]\ncritic = "off"\n'
            )
        shown = next(r for r in reversed(records) if r.outcome == "succeeded")
        patch = home / "state" / "runs" / shown.id / "attempt-1" / "diff.patch"
        patch.write_text(DIFF)
        server = Web(home)
        try:
            for size, (width, height) in SIZES.items():
                base = _browser(Path(tmp), width, height)
                for name, page in PAGES.items():
                    url = f"{server.origin}/login?token={server.token()}&next={page}"
                    png = out / f"console-{name}-{size}.png"
                    _screenshot(base, url.format(run=shown.id), png)
                    print(f"{png}: {png.stat().st_size:,} bytes")
        finally:
            server.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

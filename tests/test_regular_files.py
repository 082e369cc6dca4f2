"""Files loopd reads are files: a FIFO, a device or a link out of the home is skipped.

Reproduces a FIFO or a link to /dev/zero in `rules/` that hung every run in `preparing`
(and SIGTERM could not stop `loopd once` then). Real git repositories, `loopd once` as a
subprocess, a `command` agent in bubblewrap.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from daemon.regularfile import CONFIG_MAX, NotRegular, read_regular
from tests.helpers import loopd
from tests.test_landing import land_case
from tests.test_rules_files import make_rule

DEAD = "20260101T000000Z-calc-dead"


def _hostile_home(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """A home whose rules, loops and state hold FIFOs, /dev/zero and links out of it."""
    case = land_case(tmp_path)
    home = case.home.root
    outside = tmp_path / "outside.md"
    from daemon.rules.rulefile import dump_rule

    outside.write_text(dump_rule(make_rule("r-0009-outside")))
    bad = {
        "rule fifo": home / "rules" / "active" / "r-0001-fifo.md",
        "rule zero": home / "rules" / "trial" / "r-0002-zero.md",
        "rule outside": home / "rules" / "active" / "r-0009-outside.md",
        "loop fifo": home / "loops" / "fifo.toml",
        "loop zero": home / "loops" / "zero.toml",
        "run fifo": home / "state" / "runs" / DEAD / "run.toml",
    }
    os.mkfifo(bad["rule fifo"])
    os.symlink("/dev/zero", bad["rule zero"])
    os.symlink(outside, bad["rule outside"])
    os.mkfifo(bad["loop fifo"])
    os.symlink("/dev/zero", bad["loop zero"])
    # A run a killed `loopd once` left, whose record is a FIFO: `once` reads it to end it.
    bad["run fifo"].parent.mkdir(parents=True)
    os.mkfifo(bad["run fifo"])
    (home / "state" / "live").mkdir(exist_ok=True)
    (home / "state" / "live" / DEAD).write_text("")
    # The event log, written by every command: a FIFO there blocked the first write.
    bad["events fifo"] = home / "state" / "events.jsonl"
    bad["events fifo"].unlink(missing_ok=True)
    os.mkfifo(bad["events fifo"])
    return home, bad


def test_a_fifo_and_links_to_dev_zero_are_skipped_with_a_warning_and_the_run_completes(
    tmp_path: Path,
) -> None:
    home, bad = _hostile_home(tmp_path)
    proc = loopd(home, "once", "calc", timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    run_id = proc.stdout.splitlines()[0]
    record = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    assert record["outcome"] == "succeeded", out
    for what, path in bad.items():
        assert str(path) in proc.stderr, f"{what}: {proc.stderr}"
    assert "a FIFO, not a regular file" in proc.stderr
    assert "a link to /dev/zero, outside" in proc.stderr
    assert f"a link to {tmp_path / 'outside.md'}, outside" in proc.stderr
    # The event log's FIFO was set aside; a new log holds the run's events.
    assert (home / "state" / "events.jsonl.not-a-file").is_fifo()
    assert f'"run": "{run_id}"' in (home / "state" / "events.jsonl").read_text()


def test_loopd_check_and_rules_name_the_files_that_are_not_files(tmp_path: Path) -> None:
    home, bad = _hostile_home(tmp_path)
    check = loopd(home, "check", timeout=60)
    text = check.stdout + check.stderr
    assert str(bad["loop fifo"]) in text and str(bad["loop zero"]) in text, text
    listed = loopd(home, "rules", timeout=60)
    text = listed.stdout + listed.stderr
    assert str(bad["rule fifo"]) in text and str(bad["rule zero"]) in text, text


def test_the_size_cap_and_links_inside_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "loops").mkdir(parents=True)
    big = home / "loops" / "big.toml"
    big.write_bytes(b"#" * (CONFIG_MAX + 1))
    with pytest.raises(NotRegular, match="over the 1 MB"):
        read_regular(big, within=home)
    real = home / "loops" / "real.toml"
    real.write_text("enabled = false\n")
    inside = home / "loops" / "inside.toml"
    os.symlink(real, inside)
    assert read_regular(inside, within=home) == b"enabled = false\n"
    with pytest.raises(NotRegular, match="a link to"):
        read_regular(inside)  # a state file: no link is followed
    with pytest.raises(FileNotFoundError):
        read_regular(home / "loops" / "absent.toml", within=home)

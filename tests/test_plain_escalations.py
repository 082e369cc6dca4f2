"""`loopd escalations [list]` by the plain path (daemon/plain/escalations.py, no models):
its reading agrees with the `Escalation` model field by field, and on real homes it prints
what the full path prints, byte for byte, or declines."""

from __future__ import annotations

import json
import tomllib
import types
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest

from daemon.people.escalation_file import Escalation
from daemon.plain.escalations import (
    FIELDS,
    REQUIRED,
    escalation,
    json_fields,
    list_escalations,
    open_escalations,
)
from daemon.plain.records import Unsure
from tests.helpers import both_paths, git, loopd, make_home, make_repo

KINDS = {str: "str", int: "int", bool: "bool", datetime: "datetime"}


def test_the_plain_fields_are_the_models() -> None:
    """Names, order, kinds and defaults: the plain reading cannot drift from the model."""
    assert list(FIELDS) == list(Escalation.model_fields)
    for name, info in Escalation.model_fields.items():
        kind, default = FIELDS[name]
        if info.is_required():
            assert default is REQUIRED, name
        else:
            assert default == info.default and type(default) is type(info.default), name
        annotation = info.annotation
        if get_origin(annotation) in (Union, types.UnionType):
            [annotation] = [a for a in get_args(annotation) if a is not type(None)]
        if get_origin(annotation) is Literal:
            assert kind == get_args(annotation), name
        else:
            assert kind == KINDS[annotation], name


# A value of every TOML type, and the texts and numbers pydantic converts.
SAMPLES = tomllib.loads(
    """
text = "x"
empty = ""
numeric_text = "3"
true_text = "true"
time_text = "2026-01-01T06:00:00Z"
open = "open"
resolved = "resolved"
good = "good"
zero = 0
one = 1
three = 3
negative = -2
yes = true
no = false
whole = 3.0
half = 3.5
day = 2026-01-01
clock = 06:00:00
naive = 2026-01-01T06:00:00
utc = 2026-01-01T06:00:00Z
micro = 2026-01-01T06:00:00.123456+00:00
half_second = 2026-01-01T06:00:00.5Z
east = 2026-01-01T06:00:00+02:00
west = 2026-01-01T06:00:00.000001-00:30
numbers = [1, 2]
texts = ["a"]
table = {a = 1}
"""
)
BASE = tomllib.loads(
    'run = "20261201T060000Z-calc-0001"\nloop = "calc"\ntask = "Make check.py pass."\n'
    "escalated = 2026-12-01T06:00:00Z\n"
)


def agrees(data: dict[str, Any]) -> bool:
    """Whether the plain reading of `data` is the model's: True when it answered the same,
    False when it declined (only the model can tell); an assertion when they differ."""
    try:
        plain = escalation(data)
    except Unsure:
        return False
    try:
        model = Escalation.model_validate(data)
    except ValueError:
        model = None
    if plain is None or model is None:
        assert plain is None and model is None, (data, plain, model)
        return True
    assert plain == model.model_dump(), data
    assert json_fields(plain) == model.model_dump(mode="json"), data
    return True


@pytest.mark.parametrize("field", list(FIELDS))
def test_each_value_is_read_as_the_model_reads_it_or_declined(field: str) -> None:
    answered = [name for name, value in SAMPLES.items() if agrees({**BASE, field: value})]
    without = {k: v for k, v in BASE.items() if k != field}
    assert agrees(without)  # a missing field: its default, or the file skipped
    # What loopd itself writes for the field is always answered, not declined.
    kind = FIELDS[field][0]
    written = {
        "str": ["text", "empty"],
        "int": ["zero", "three", "negative"],
        "bool": ["yes", "no"],
        "datetime": ["utc", "micro", "half_second", "east", "west"],
    }.get(kind, ["open", "resolved", "good", "empty", "text"])
    assert set(written) <= set(answered), (field, answered)
    # What pydantic certainly refuses is skipped, not declined: lists and tables.
    assert {"numbers", "texts", "table"} <= set(answered), (field, answered)


def test_a_refused_field_skips_the_file_even_beside_one_only_the_model_can_read() -> None:
    data = {**BASE, "escalated": SAMPLES["naive"], "count": SAMPLES["numbers"]}
    assert escalation(data) is None
    with pytest.raises(ValueError):
        Escalation.model_validate(data)
    with pytest.raises(Unsure):
        escalation({**BASE, "escalated": SAMPLES["naive"]})


# Real homes: escalation files written by real `loopd once` runs whose checks fail.
FAILING = "raise SystemExit(1)\n"


def failing_home(tmp_path: Path, config: str = "") -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "repo", {"check.py": FAILING})
    config += '[agents.a]\nadapter = "command"\ncommand = ["true"]\n'
    loops = {
        name: (
            f'repo = "{repo}"\ntask = "{task}"\nagent = "a"\n'
            'done_when = ["python3 check.py"]\nmax_attempts = 1\ncritic = "off"\n'
            # `true` exits at once: nudging it again would only run the failing checks again.
            "max_nudges = 0\n"
        )
        for name, task in (("calc", "Make check.py pass."), ("docs", "Keep check.py green."))
    }
    return make_home(tmp_path / "home", config, loops), repo


def once(home: Path, loop: str) -> str:
    """A real run of `loop`; its run id."""
    proc = loopd(home, "once", loop, timeout=180)
    assert proc.stdout, proc.stderr
    return proc.stdout.split()[0]


LISTINGS = [
    ("escalations",),
    ("escalations", "--all"),
    ("escalations", "list"),
    ("escalations", "list", "--all"),
    ("escalations", "--json"),
    ("escalations", "list", "--json"),
    ("escalations", "list", "--all", "--json"),
]


def every_listing(
    home: Path, listings: list[tuple[str, ...]] = LISTINGS
) -> dict[tuple[str, ...], str]:
    """Each way of listing (or those given), by both paths (asserted equal): what it printed."""
    out = {}
    for argv in listings:
        stdout, stderr = both_paths(home, *argv)
        assert stderr == "", (argv, stderr)
        out[argv] = stdout
    return out


def test_none_yet(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    shown = every_listing(home)
    assert shown[("escalations",)] == "No escalations waiting.\n"
    assert shown[("escalations", "list", "--all")] == "None.\n"
    assert json.loads(shown[("escalations", "list", "--all", "--json")]) == []
    # Plain lines even where a terminal is forced: nothing styles them, by either path.
    styled, _ = both_paths(home, "escalations", "--all", env={"FORCE_COLOR": "1"})
    assert styled == "None.\n"


def test_open_repeated_resolved_and_superseded(tmp_path: Path) -> None:
    home, repo = failing_home(tmp_path)
    first = once(home, "calc")
    again = once(home, "calc")  # counts in the first one's escalation
    other = once(home, "docs")
    # Two open ones: the two listings read here. Every way of listing is compared below, on
    # the homes that hold an open and a resolved one, then a superseded and a resolved one.
    shown = every_listing(home, [("escalations",), ("escalations", "list", "--json")])
    lines = shown[("escalations",)].splitlines()
    assert [line.split()[0] for line in lines] == [first, other]
    assert f"(escalated 2 times, latest run {again})" in lines[0]
    assert "checks-failed" in lines[1]
    listed = json.loads(shown[("escalations", "list", "--json")])
    assert [(e["run"], e["count"], e["latest_run"]) for e in listed] == [
        (first, 2, again),
        (other, 1, ""),
    ]
    assert [state["best_score"] for state in listed] == [None, None]  # a default filled in
    shown_file, _ = both_paths(home, "escalations", "show", first)
    assert shown_file.startswith("\n# Escalated: loop `calc`") and "## Failed again" in shown_file
    as_json = json.loads(both_paths(home, "escalations", "show", first, "--json")[0])
    assert as_json["count"] == 2 and as_json["text"].startswith("+++\n")
    declined(home, "escalations", "show", again)  # counts in `first`: the full path says so

    resolved = loopd(home, "escalations", "resolve", other, "--note", "fixed by hand")
    assert resolved.returncode == 0, resolved.stderr
    shown = every_listing(home)
    assert [line.split()[0] for line in shown[("escalations",)].splitlines()] == [first]
    assert shown[("escalations", "--all")].split("\n")[1].split()[:2] == [other, "resolved"]
    waiting = open_escalations(home / "state")
    assert [(e["run"], e["status"], e["note"]) for e in waiting] == [(first, "open", "")]
    assert open_escalations(home / "state", "docs") == []

    # The task's next run succeeds: the open escalation is superseded.
    (repo / "check.py").write_text("print('ok')\n")
    git(repo, "commit", "-qam", "fix the check")
    once(home, "calc")
    shown = every_listing(home)
    assert shown[("escalations",)] == "No escalations waiting.\n"
    everything = json.loads(shown[("escalations", "list", "--all", "--json")])
    assert [(e["run"], e["status"]) for e in everything] == [
        (first, "superseded"),
        (other, "resolved"),
    ]
    assert everything[1]["note"] == "fixed by hand" and everything[1]["resolved"].endswith("Z")
    for run in (first, other):
        shown_file, _ = both_paths(home, "escalations", "show", run)
        assert "## Superseded by" in shown_file or "## Resolved" in shown_file


def test_damaged_files_are_skipped_as_the_model_skips_them(tmp_path: Path) -> None:
    home, _ = failing_home(tmp_path)
    run = once(home, "calc")
    folder = home / "state" / "escalations"
    real = (folder / f"{run}.md").read_text()
    front, body = real.split("\n+++\n", 1)

    def variant(name: str, front_matter: str) -> None:
        (folder / name).write_text(front_matter + "\n+++\n" + body)

    lines = front.splitlines()
    without = "\n".join(line for line in lines if not line.startswith("escalated ="))
    variant("20261201T000001Z-calc-0001.md", without)  # a required field missing
    variant("20261201T000002Z-calc-0002.md", front.replace(f'run = "{run}"', "run = 3"))
    variant("20261201T000003Z-calc-0003.md", front.replace('"open"', '"waiting"'))
    variant("20261201T000004Z-calc-0004.md", front.replace("count = 1", "count = [1]"))
    variant("20261201T000005Z-calc-0005.md", front.replace("run =", "run = = "))  # not TOML
    (folder / "20261201T000006Z-calc-0006.md").write_text("no front matter\n")
    (folder / "20261201T000007Z-calc-0007.md").write_bytes(b"+++\nrun = '\xff'\n+++\n")
    (folder / "20261201T000008Z-calc-0008.md").mkdir()
    (folder / "20261201T000009Z-calc-0009.md").symlink_to(folder / f"{run}.md")
    (folder / ".hidden.md").write_text(real)
    (folder / "notes.txt").write_text(real)
    # A readable one whose reason holds markup, an emoji code, escapes and a tab, repeated.
    reason = 'reason = "[bold]fix[/bold] :smile: \\u001b[31mred\\u001b[0m\\tand \\r done"'
    repeated = [
        reason if line.startswith("reason =") else line
        for line in front.replace("count = 1", "count = 3").splitlines()
    ]
    variant("zz-repeated.md", "\n".join(repeated).replace('latest_run = ""', 'latest_run = "x"'))

    shown = every_listing(home)
    lines = shown[("escalations",)].splitlines()
    assert [line.split()[0] for line in lines] == [run, run]  # the variant keeps the run id
    assert "[bold]fix[/bold]" in lines[1] and "red and done" in lines[1]  # no markup, no escapes
    assert ":smile:" in lines[1]  # an agent's words as written, no emoji made of them
    assert "(escalated 3 times, latest run x)" in lines[1]
    assert len(json.loads(shown[("escalations", "list", "--all", "--json")])) == 2
    for name in ("20261201T000001Z-calc-0001", "20261201T000009Z-calc-0009", ".hidden", "notes"):
        declined(home, "escalations", "show", name)  # the full path: no such escalation
    shown_file, _ = both_paths(home, "escalations", "show", "zz-repeated", "--json")
    assert json.loads(shown_file)["count"] == 3
    assert [e["count"] for e in list_escalations(home / "state")] == [1, 3]


def test_a_value_only_the_model_can_read_takes_the_full_path(tmp_path: Path) -> None:
    home, _ = failing_home(tmp_path)
    run = once(home, "calc")
    path = home / "state" / "escalations" / f"{run}.md"
    text = path.read_text()
    escalated = next(line for line in text.splitlines() if line.startswith("escalated ="))
    path.write_text(text.replace(escalated, "escalated = 2026-12-01T06:00:00"))  # no offset
    with pytest.raises(Unsure):
        list_escalations(home / "state")
    declined(home, "escalations")
    declined(home, "escalations", "show", run, "--json")
    full = loopd(home, "escalations", env={"LOOPD_READ_PATH": "models"})
    assert full.returncode == 0 and run in full.stdout  # the model reads it


def declined(home: Path, *argv: str) -> None:
    """The plain path does not answer `argv`; the full path does, as it always did."""
    plain = loopd(home, *argv, env={"LOOPD_READ_PATH": "only"})
    assert plain.returncode == 3 and "did not answer" in plain.stderr, argv
    chosen = loopd(home, *argv)
    full = loopd(home, *argv, env={"LOOPD_READ_PATH": "models"})
    assert (chosen.stdout, chosen.stderr, chosen.returncode) == (
        full.stdout,
        full.stderr,
        full.returncode,
    )


def test_another_engine_and_resolve_take_the_full_path(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", '[engine]\nkind = "temporal"\n')
    for argv in (("escalations",), ("escalations", "list", "--json"), ("escalations", "show", "x")):
        plain = loopd(home, *argv, env={"LOOPD_READ_PATH": "only"})
        assert plain.returncode == 3 and "did not answer" in plain.stderr, argv
    local = make_home(tmp_path / "local")
    declined(local, "escalations", "resolve", "20261201T060000Z-calc-0001")
    declined(local, "escalations", "show", "20261201T060000Z-calc-0001")

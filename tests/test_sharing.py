"""sharing.py in process: a bundle exported from one real rule library and checked and
imported into another (tests/test_rules_sharing.py runs the same through `loopd rules`).

Each import check refuses its entry by name: no expiry or an expired one, a digest that does
not match, a file that is not `rules/ID.md`, a kind or id the file disagrees with, a link,
an oversized file, a pattern RE2 cannot run, an entry listed twice.
"""

from __future__ import annotations

import hashlib
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import tomli_w

from daemon.config.home_file import VerifierConfig
from daemon.model.client import ModelClient
from daemon.rules.library import RuleLibrary
from daemon.rules.rulefile import Evidence, Provenance, Rule, Scope, dump_rule
from daemon.rules.sharing import (
    MANIFEST,
    MAX_RULE_BYTES,
    BundleError,
    _read_bundle_file,
    check_bundle,
    clone_bundle,
    export_rules,
    import_rules,
    is_remote,
    only_plain_names,
    read_manifest,
)
from daemon.state.events import EventLog
from tests.helpers import git
from tests.model_server import ScriptedModelServer

NOW = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
RUN = "20261129T021000Z-app-3f2a"


def learned(text: str, kind: str = "failure", **fields: object) -> Rule:
    values: dict[str, object] = dict(
        kind=kind,
        trigger_intent="Commits to the repository",
        trigger_patterns=[r"(?i)\bcommit"],
        scope=Scope(repos=["/srv/app"]),
        rule=text,
        why="The checks failed on `make lint`.",
        how_to_apply="Run it and fix what it reports.",
        source_run=RUN,
        verified_by=["grounding", "model:judge"],
        evidence=[Evidence(path=f"runs/{RUN}/attempt-1/checks.log", line=3, quote="make lint")],
        created=NOW - timedelta(days=2),
        expires=NOW + timedelta(days=30),
        fired=7,
        helped=3,
    )
    values.update(fields)
    return Rule(**values)  # type: ignore[arg-type]  # Rule's own fields, by name


def exported(tmp_path: Path) -> tuple[Path, list[str]]:
    """A bundle of a team home's two active rules (the trial one and the expired one left
    out); the ids in the bundle."""
    library = RuleLibrary(tmp_path / "team" / "rules")
    library.add(learned("Run `make lint` before `git commit`."), "active")
    library.add(learned("Use `uv run pytest`.", kind="skill", expires=None), "active")
    library.add(learned("Still on trial."), "trial")
    old = library.add(learned("Old.", expires=NOW - timedelta(days=1)), "active")
    dest = tmp_path / "bundle"
    out = export_rules(library, dest, "team-home", NOW)
    assert out.left_out == [f"{old.rule.id}: expired on 2026-12-06 (its expires)"]
    return dest, [e.id for e in out.entries]


def manifest_of(dest: Path) -> dict:
    return tomllib.loads((dest / MANIFEST).read_text())


def add_entry(dest: Path, rule: Rule, **entry: str) -> None:
    """Write `rule` into the bundle and list it, as a hand edit of the bundle would."""
    text = dump_rule(rule)
    (dest / "rules" / f"{rule.id}.md").write_text(text)
    data = manifest_of(dest)
    data["rules"].append(
        {
            "id": rule.id,
            "kind": rule.kind,
            "file": f"rules/{rule.id}.md",
            "sha256": hashlib.sha256(text.encode()).hexdigest(),
            **entry,
        }
    )
    (dest / MANIFEST).write_text(tomli_w.dumps(data))


def test_export_stamps_provenance_and_an_expiry(tmp_path: Path) -> None:
    dest, ids = exported(tmp_path)
    data = manifest_of(dest)
    assert data["format"] == 1 and data["home"] == "team-home"
    assert [(r["id"], r["kind"]) for r in data["rules"]] == [(ids[0], "failure"), (ids[1], "skill")]
    rules, skipped = check_bundle(RuleLibrary(tmp_path / "mine"), dest, NOW, None)
    assert skipped == [] and [r.id for r in rules] == ids
    first, second = rules
    assert first.provenance is not None
    assert first.provenance.home == "team-home" and first.provenance.runs == [RUN]
    assert first.provenance.grounding == "grounded (1 quotes)"
    assert first.provenance.origin_id == ids[0]
    assert first.expires == NOW + timedelta(days=30)
    # No expiry of its own: 90 days after it was verified (created, here).
    assert second.expires == NOW - timedelta(days=2) + timedelta(days=90)


def test_import_files_each_rule_on_trial_firing_nowhere(tmp_path: Path) -> None:
    dest, ids = exported(tmp_path)
    mine = RuleLibrary(tmp_path / "mine")
    events = EventLog(tmp_path / "events.jsonl")
    out = import_rules(mine, dest, NOW, None, events)
    assert out.skipped == [] and len(out.landed) == 2
    for stored, origin in zip(out.landed, ids, strict=True):
        rule = stored.rule
        assert stored.status == "trial" and rule.scope.nowhere
        assert (rule.fired, rule.helped, rule.harmed, rule.idle) == (0, 0, 0, 0)
        assert rule.reason == f"imported from {dest}"
        assert rule.provenance is not None and rule.provenance.origin_id == origin
        assert rule.provenance.imported == NOW and rule.provenance.imported_from == str(dest)
    written = events.read()
    assert [(e["type"], e["origin"], e["home"]) for e in written] == [
        ("rule_imported", ids[0], "team-home"),
        ("rule_imported", ids[1], "team-home"),
    ]
    assert [e["rule"] for e in written] == [s.rule.id for s in out.landed]


def test_a_rule_without_an_expiry_is_refused(tmp_path: Path) -> None:
    """A bundle file written by hand with no `expires`: a rule could fire for ever on trust
    no home renews, so it is skipped, and with --strict the bundle is refused whole."""
    dest, ids = exported(tmp_path)
    forever = learned("Never expires.", expires=None, id="r-0099-never-expires")
    add_entry(dest, forever)
    mine = RuleLibrary(tmp_path / "mine")
    rules, skipped = check_bundle(mine, dest, NOW, None)
    assert [r.id for r in rules] == ids
    assert skipped == [
        "r-0099-never-expires: expired (no expires date): export it again from a home that "
        "verified it"
    ]
    with pytest.raises(BundleError, match="refused, nothing imported"):
        import_rules(mine, dest, NOW, None, None, strict=True)
    assert mine.scan() == []


def test_an_expired_rule_is_refused_saying_when(tmp_path: Path) -> None:
    dest, ids = exported(tmp_path)
    old = learned("Old.", expires=NOW - timedelta(days=3), id="r-0098-old")
    add_entry(dest, old)
    _, skipped = check_bundle(RuleLibrary(tmp_path / "mine"), dest, NOW, None)
    assert skipped == [
        "r-0098-old: expired on 2026-12-04: export it again from a home that verified it"
    ]
    # The day it expires, read a day earlier, is still good.
    rules, _ = check_bundle(RuleLibrary(tmp_path / "m2"), dest, NOW - timedelta(days=4), None)
    assert "r-0098-old" in [r.id for r in rules]


def test_each_hostile_entry_is_skipped_by_name_and_the_rest_taken(tmp_path: Path) -> None:
    dest, ids = exported(tmp_path)
    first = f"rules/{ids[0]}.md"
    add_entry(dest, learned("Digest.", id="r-0090-digest"), sha256="0" * 64)
    add_entry(dest, learned("Kind.", id="r-0091-kind"), kind="skill")
    add_entry(dest, learned("Path.", id="r-0092-path"), file=first)
    add_entry(dest, learned("Bad id.", id="r-0093-bad-id"), id="../../etc")
    add_entry(dest, learned("Pattern.", id="r-0094-pattern", trigger_patterns=[r"(a)\1"]))
    add_entry(dest, learned("Big.", id="r-0095-big", why="x" * MAX_RULE_BYTES))
    add_entry(dest, learned("Twice.", id="r-0096-twice"))
    add_entry(dest, learned("Twice.", id="r-0096-twice"))
    link = learned("Link.", id="r-0097-link")
    add_entry(dest, link)
    target = tmp_path / "elsewhere.md"
    (dest / "rules" / f"{link.id}.md").rename(target)
    (dest / "rules" / f"{link.id}.md").symlink_to(target)
    rules, skipped = check_bundle(RuleLibrary(tmp_path / "mine"), dest, NOW, None)
    assert [r.id for r in rules] == ids
    why = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in skipped}
    assert why["r-0090-digest"] == ("its sha256 does not match the manifest: changed after export")
    assert why["r-0091-kind"] == "the file says r-0091-kind (failure); the manifest disagrees"
    assert why["r-0092-path"].startswith(f"file '{first}' is not rules/ID.md")
    assert why["../../etc"].startswith("file 'rules/r-0093-bad-id.md' is not rules/ID.md")
    assert why["r-0094-pattern"].startswith("trigger pattern '(a)\\\\1': ")
    assert why["r-0095-big"] == f"rules/r-0095-big.md: larger than {MAX_RULE_BYTES:,} bytes"
    assert why["r-0096-twice"] == "appears twice in the manifest"
    assert why["r-0097-link"] == "rules/r-0097-link.md: a link; a bundle holds plain files only"
    assert len(skipped) == 8


def test_a_bundle_with_nothing_to_take_is_refused_whole(tmp_path: Path) -> None:
    dest, ids = exported(tmp_path)
    data = manifest_of(dest)
    for entry in data["rules"]:
        entry["sha256"] = "1" * 64
    (dest / MANIFEST).write_text(tomli_w.dumps(data))
    with pytest.raises(BundleError) as caught:
        check_bundle(RuleLibrary(tmp_path / "mine"), dest, NOW, None)
    assert str(caught.value).startswith(f"{dest}: refused, nothing imported:\n  {ids[0]}: ")


def test_what_is_no_bundle_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no such folder. Fix: give the folder"):
        read_manifest(tmp_path / "none")
    dest, _ = exported(tmp_path)
    data = manifest_of(dest)
    data["format"] = 2
    (dest / MANIFEST).write_text(tomli_w.dumps(data))
    with pytest.raises(BundleError, match="format 2; this loopd reads format 1"):
        read_manifest(dest)
    (dest / MANIFEST).write_text("not = [toml")
    with pytest.raises(BundleError, match="not a bundle manifest"):
        read_manifest(dest)
    (dest / MANIFEST).unlink()
    with pytest.raises(BundleError, match="loopd-rules.toml: no such file in the bundle"):
        read_manifest(dest)
    other = tmp_path / "busy"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(BundleError, match="holds other files"):
        export_rules(RuleLibrary(tmp_path / "team" / "rules"), other, "h", NOW)
    assert (other / "notes.txt").read_text() == "mine"


def test_sources_and_kinds_as_given_on_the_command_line() -> None:
    assert is_remote("https://example.com/rules") and is_remote("git@host:rules")
    assert is_remote("/srv/rules.git/") and not is_remote("/srv/rules")
    assert only_plain_names(["skill", "failure"]) == ["skill", "failure"]
    with pytest.raises(BundleError, match="--kind lesson: not a kind"):
        only_plain_names(["lesson"])


AGREES = {"grounded": True, "unsupported": [], "contradicts": [], "reason": "grounded"}


def _client(server: ScriptedModelServer) -> ModelClient:
    return ModelClient(VerifierConfig(base_url=server.base_url, model="judge"))


def test_a_rule_contradicting_this_homes_is_skipped_and_with_strict_refused(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    dest, ids = exported(tmp_path)
    mine = RuleLibrary(tmp_path / "mine")
    own = mine.add(learned("Never run `make lint` before `git commit`: CI does."), "active")
    says = {**AGREES, "contradicts": [own.rule.id], "reason": "opposite advice"}
    model_server.add({"json": says}, {"json": AGREES}, name="rule_verification")
    out = import_rules(mine, dest, NOW, _client(model_server), None)
    assert out.skipped == [f"{ids[0]}: contradicts this home's {own.rule.id}"]
    assert [s.rule.provenance.origin_id for s in out.landed if s.rule.provenance] == [ids[1]]
    assert len(model_server.chat_requests("rule_verification")) == 2  # each rule asked
    model_server.add({"json": says}, {"json": AGREES}, name="rule_verification")
    with pytest.raises(BundleError) as caught:
        import_rules(mine, dest, NOW, _client(model_server), None, strict=True)
    assert str(caught.value) == (
        f"{dest}: refused, nothing imported:\n  {ids[0]}: contradicts this home's {own.rule.id}"
    )


def test_strict_with_a_bad_entry_refuses_before_asking_the_model(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    dest, ids = exported(tmp_path)
    mine = RuleLibrary(tmp_path / "mine")
    mine.add(learned("Run `make lint` first, always, before `git commit`."), "active")
    add_entry(dest, learned("Old.", expires=None, id="r-0099-old"))
    add_entry(dest, learned("Moved.", id="r-0098-moved"))
    (dest / "rules" / "r-0098-moved.md").unlink()
    with pytest.raises(BundleError) as caught:
        check_bundle(mine, dest, NOW, _client(model_server), strict=True)
    assert str(caught.value) == (
        f"{dest}: refused, nothing imported:\n"
        "  r-0099-old: expired (no expires date): export it again from a home that verified it\n"
        "  r-0098-moved: rules/r-0098-moved.md: no such file in the bundle"
    )
    assert model_server.chat_requests("rule_verification") == []


def test_a_reimported_rule_keeps_its_origin_and_gets_this_homes_number(tmp_path: Path) -> None:
    """Home A exports, B imports and exports again, C imports: the origin is A's rule; each
    home numbers it anew; its counters start over; the event says where it came from."""
    team = RuleLibrary(tmp_path / "a" / "rules")
    for n in range(3):
        team.add(learned(f"Filler {n}."), "trial")
    origin = team.add(learned("Run `make lint`.", harmed=2, idle=5), "active")
    export_rules(team, tmp_path / "bundle-a", "home-a", NOW)
    b = RuleLibrary(tmp_path / "b" / "rules")
    (landed,) = import_rules(b, tmp_path / "bundle-a", NOW, None, None).landed
    assert landed.rule.id != origin.rule.id and landed.rule.id.startswith("r-0001-")
    assert (landed.rule.harmed, landed.rule.idle, landed.rule.fired) == (0, 0, 0)
    export_rules(b, tmp_path / "bundle-b", "home-b", NOW, statuses=("trial", "active"))
    c = RuleLibrary(tmp_path / "c" / "rules")
    events = EventLog(tmp_path / "events.jsonl")
    later = NOW + timedelta(days=1)
    (again,) = import_rules(c, tmp_path / "bundle-b", later, None, events).landed
    assert again.rule.provenance is not None
    assert again.rule.provenance.origin_id == origin.rule.id
    assert again.rule.provenance.home == "home-a"  # the home that verified it
    (event,) = events.read()
    assert event["ts"].startswith("2026-12-08T03:00:00")
    assert (event["rule"], event["origin"], event["bundle"]) == (
        again.rule.id,
        origin.rule.id,
        str(tmp_path / "bundle-b"),
    )


def test_provenance_names_the_runs_of_the_evidence_and_keeps_what_it_had(tmp_path: Path) -> None:
    other = "20261201T010000Z-app-9b1c"
    library = RuleLibrary(tmp_path / "team" / "rules")
    evidence = [
        Evidence(path=f"runs/{other}/attempt-2/checks.log", line=1, quote="make lint"),
        Evidence(path="docs/CONTRIBUTING.md", line=4, quote="lint"),
    ]
    library.add(learned("From evidence only.", source_run="", evidence=evidence), "active")
    library.add(
        learned(
            "Shared before.",
            provenance=Provenance(home="first", repos=["/srv/x"], verified_by=["person"]),
        ),
        "active",
    )
    export_rules(library, tmp_path / "bundle", "team-home", NOW)
    first, second = check_bundle(RuleLibrary(tmp_path / "mine"), tmp_path / "bundle", NOW, None)[0]
    assert first.provenance is not None and second.provenance is not None
    assert first.provenance.runs == [other]
    assert first.provenance.repos == ["/srv/app"]
    assert first.provenance.verified_by == ["grounding", "model:judge"]
    assert (second.provenance.home, second.provenance.repos) == ("first", ["/srv/x"])
    assert second.provenance.verified_by == ["person"]
    assert second.provenance.runs == [RUN]


def test_a_long_pattern_is_named_by_its_first_60_characters(tmp_path: Path) -> None:
    dest, _ = exported(tmp_path)
    pattern = "(a)\\1" + "b" * 80
    add_entry(dest, learned("Long.", id="r-0090-long", trigger_patterns=[pattern]))
    _, skipped = check_bundle(RuleLibrary(tmp_path / "mine"), dest, NOW, None)
    (line,) = skipped
    assert line.startswith(f"r-0090-long: trigger pattern {pattern[:60]!r}: ")


def test_every_kind_may_be_chosen_and_a_folder_named_like_git_is_a_folder() -> None:
    kinds = ["failure", "decision", "knowledge", "skill"]
    assert only_plain_names(kinds) == kinds
    with pytest.raises(BundleError) as caught:
        only_plain_names(["rule"])
    assert str(caught.value) == (
        "--kind rule: not a kind. Fix: use one of failure, decision, knowledge, skill"
    )
    assert not is_remote("/srv/bundle.gitX")


def test_a_bundle_file_is_plain_regular_utf8_and_within_its_cap(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    (root / "rules" / "sub").mkdir(parents=True)
    for bad in ("", "/etc/passwd", "rules//x.md", "rules/./x.md", "rules/../x.md", "x/"):
        with pytest.raises(BundleError) as caught:
            _read_bundle_file(root, bad, 10)
        assert str(caught.value) == f"{bad!r} is not a plain path inside the bundle"
    with pytest.raises(BundleError, match="^rules/sub: not a regular file$"):
        _read_bundle_file(root, "rules/sub", 10)
    (root / "rules" / "ten.md").write_bytes(b"0123456789")
    assert _read_bundle_file(root, "rules/ten.md", 10) == "0123456789"  # the cap itself
    with pytest.raises(BundleError, match="^rules/ten.md: larger than 9 bytes$"):
        _read_bundle_file(root, "rules/ten.md", 9)
    (root / "rules" / "latin.md").write_bytes("café".encode("latin-1"))
    with pytest.raises(BundleError, match="^rules/latin.md: not UTF-8 text$"):
        _read_bundle_file(root, "rules/latin.md", 10)
    (root / "rules" / "unicode.md").write_text("café ✓", encoding="utf-8")
    assert _read_bundle_file(root, "rules/unicode.md", 20) == "café ✓"
    (root / "rules" / "link").symlink_to("sub")
    with pytest.raises(
        BundleError, match="^rules/link/x.md: a link; a bundle holds plain files only$"
    ):
        _read_bundle_file(root, "rules/link/x.md", 10)


def test_export_into_an_earlier_bundle_replaces_its_rules(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "team" / "rules")
    first = library.add(learned("First."), "active")
    second = library.add(learned("Second.", kind="skill"), "active")
    dest = tmp_path / "bundle"
    git(tmp_path, "init", "-q", str(dest))  # a bundle kept in a git repository
    export_rules(library, dest, "h", NOW)
    assert sorted(p.name for p in (dest / "rules").glob("*.md")) == [
        f"{first.rule.id}.md",
        f"{second.rule.id}.md",
    ]
    out = export_rules(library, dest, "h", NOW, kinds=("skill",))
    assert [e.id for e in out.entries] == [second.rule.id]
    assert [p.name for p in (dest / "rules").glob("*.md")] == [f"{second.rule.id}.md"]
    assert manifest_of(dest)["exported"] == "2026-12-07T03:00:00Z"
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(BundleError) as caught:
        export_rules(library, file, "h", NOW)
    assert str(caught.value) == f"{file}: not a folder. Fix: give a new or empty folder"


def test_export_leaves_out_each_expired_rule_and_says_why(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "team" / "rules")
    old = library.add(
        learned("Verified long ago.", expires=None, created=NOW - timedelta(days=91)), "active"
    )
    gone = library.add(learned("Expired.", expires=NOW - timedelta(days=2)), "active")
    fresh = library.add(learned("Fresh.", expires=None, created=None), "active")
    out = export_rules(library, tmp_path / "bundle", "h", NOW)
    assert out.left_out == [
        f"{old.rule.id}: expired on 2026-12-06 (90 days after its last verification)",
        f"{gone.rule.id}: expired on 2026-12-05 (its expires)",
    ]
    (kept,) = check_bundle(RuleLibrary(tmp_path / "mine"), tmp_path / "bundle", NOW, None)[0]
    assert kept.id == fresh.rule.id
    # No date to go by: verified now, by this export, and good for 90 days from it.
    assert kept.expires == NOW + timedelta(days=90)
    assert kept.provenance is not None and kept.provenance.verified == NOW


def test_a_manifest_that_is_no_toml_says_what_toml_said(tmp_path: Path) -> None:
    dest, _ = exported(tmp_path)
    (dest / MANIFEST).write_text("not = [toml")
    try:
        tomllib.loads("not = [toml")
    except tomllib.TOMLDecodeError as exc:
        said = str(exc).splitlines()[0]
    with pytest.raises(BundleError) as caught:
        read_manifest(dest)
    assert str(caught.value) == f"{dest / MANIFEST}: not a bundle manifest ({said})"


def test_a_bundle_shared_as_a_git_repository_is_cloned_shallow(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "team" / "rules")
    library.add(learned("Shared."), "active")
    shared = tmp_path / "shared"
    git(tmp_path, "init", "-q", str(shared))
    export_rules(library, shared, "h", NOW)
    git(shared, "add", "-A")
    git(shared, "commit", "-qm", "first")
    library.add(learned("Shared later."), "active")
    export_rules(library, shared, "h", NOW)
    git(shared, "add", "-A")
    git(shared, "commit", "-qm", "rules")
    into = tmp_path / "scratch" / "bundle"
    into.parent.mkdir()
    assert clone_bundle(f"file://{shared}", into) == into
    assert git(into, "rev-list", "--count", "HEAD") == "1"  # --depth=1
    assert read_manifest(into).home == "h"
    with pytest.raises(BundleError) as caught:
        clone_bundle(f"file://{tmp_path / 'none.git'}", tmp_path / "scratch" / "other")
    text = str(caught.value)
    assert text.startswith(f"file://{tmp_path / 'none.git'}: cannot clone: ")
    assert text.endswith(
        "Fix: give a git repository holding a bundle (a path ending in .git is cloned), or "
        "the bundle's folder by a path not ending in .git"
    )

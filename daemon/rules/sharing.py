"""Rules shared between homes: `loopd rules export DEST` and `loopd rules import SRC`.

A bundle is a folder (or a git work tree a team shares): `loopd-rules.toml`, the manifest,
lists each rule with its file and that file's sha256; `rules/ID.md` are the rule files, each
with a `provenance` table (the home it came from, its repositories and runs, what verified it
and when, what the grounding found) and an `expires` date (90 days after its last
verification unless it had an earlier one).

Export never writes an expired rule: one whose `expires`, its own or the one export would
stamp, has passed is left out and named.

Import trusts nothing in a bundle. Every entry is checked before anything is written (its
file is a regular file named after its id inside the bundle, no larger than MAX_RULE_BYTES,
its sha256 matches, it parses, its id appears once, it has not expired, each trigger pattern
runs on RE2), then the model's contradiction check runs against the home's live rules. A
refused entry is skipped with its reason and the rest are taken; with `strict`, any refusal
refuses the bundle and nothing is written. A manifest that cannot be read refuses the
bundle whatever. What is accepted lands in
`rules/trial/` only, under a new id of this home, keeping its provenance, scoped to nowhere
(`scope.nowhere = true`): it fires for no loop until a person widens it (`loopd rules promote ID
--scope all`, or its `scope` edited), and this home's own promotion then judges it by its
own runs.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from daemon.git.safe import Git, GitError
from daemon.rules.library import RuleLibrary, StoredRule
from daemon.rules.modelcalls import StructuredModel
from daemon.rules.patterns import pattern_problem
from daemon.rules.rulefile import (
    DEFAULT_LIFETIME,
    LIVE,
    RULE_ID,
    Kind,
    Provenance,
    Rule,
    RuleFileError,
    Status,
    dump_rule,
    parse_rule,
)
from daemon.rules.verifyprompt import contradictions
from daemon.state.events import EventLog
from daemon.state.eventtypes import Event

MANIFEST = "loopd-rules.toml"
BUNDLE_FORMAT = 1
MAX_MANIFEST_BYTES = 2_000_000
MAX_RULE_BYTES = 64_000
MAX_RULES = 5_000


class BundleError(ValueError):
    """A bundle that cannot be exported or imported: the message says what and how to fix it."""


class BundleEntry(BaseModel):
    """One rule of a bundle: its id, its file in the bundle, and that file's sha256."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: Kind
    file: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Manifest(BaseModel):
    """`loopd-rules.toml`: what a bundle holds and where it came from."""

    model_config = ConfigDict(extra="forbid")

    format: int = BUNDLE_FORMAT
    exported: datetime
    home: str = ""
    rules: list[BundleEntry] = Field(default_factory=list, max_length=MAX_RULES)


def _write(path: Path, text: str) -> None:
    """A bundle's file, whole or not at all; with the umask's mode (a team reads it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _provenance(rule: Rule, home_id: str, now: datetime) -> Provenance:
    """What a rule says of its source when it leaves its home."""
    kept = rule.provenance or Provenance()
    runs = [rule.source_run] if rule.source_run else []
    runs += [p.split("/")[1] for p in (e.path for e in rule.evidence) if p.startswith("runs/")]
    quotes = sum(1 for e in rule.evidence if e.quote)
    return kept.model_copy(
        update={
            "home": kept.home or home_id,
            "repos": kept.repos or list(rule.scope.repos),
            "runs": kept.runs or sorted(set(runs)),
            "verified_by": kept.verified_by or list(rule.verified_by),
            "verified": kept.verified or rule.created or now,
            "grounding": kept.grounding
            or (f"grounded ({quotes} quotes)" if "grounding" in rule.verified_by else "none"),
            "origin_id": kept.origin_id or rule.id,
        }
    )


@dataclass
class Exported:
    """What an export wrote, and the rules it left out, each with why."""

    entries: list[BundleEntry]
    left_out: list[str]


def _shared(rule: Rule, home_id: str, now: datetime) -> Rule:
    """The rule as it leaves its home: its provenance filled in, an `expires` date stamped."""
    provenance = _provenance(rule, home_id, now)
    verified = provenance.verified or now
    expires = rule.expires or verified + DEFAULT_LIFETIME
    return rule.model_copy(update={"provenance": provenance, "expires": expires})


def export_rules(
    library: RuleLibrary,
    dest: Path,
    home_id: str,
    now: datetime,
    kinds: tuple[str, ...] = (),
    statuses: tuple[Status, ...] = ("active",),
) -> Exported:
    """Write the chosen rules as a bundle into `dest` (new, empty, or an earlier bundle);
    a rule whose `expires` (its own, or verified + 90 days) has passed is left out."""
    if dest.exists() and not dest.is_dir():
        raise BundleError(f"{dest}: not a folder. Fix: give a new or empty folder")
    if dest.is_dir() and not (dest / MANIFEST).is_file():
        mine = {MANIFEST, "rules", ".git"}
        if any(name not in mine for name in os.listdir(dest)):
            raise BundleError(
                f"{dest}: holds other files and no {MANIFEST}. Fix: give a new or empty "
                "folder, or an earlier bundle"
            )
    chosen = [
        s for s in library.scan() if s.status in statuses and (not kinds or s.rule.kind in kinds)
    ]
    folder = dest / "rules"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.md"):
        old.unlink()
    entries = []
    left_out = []
    for stored in sorted(chosen, key=lambda s: s.rule.id):
        rule = stored.rule
        shared = _shared(rule, home_id, now)
        if shared.expired(now):
            assert shared.expires is not None  # stamped by _shared
            how = "its expires" if rule.expires else "90 days after its last verification"
            left_out.append(f"{rule.id}: expired on {shared.expires:%Y-%m-%d} ({how})")
            continue
        text = dump_rule(shared)
        _write(folder / f"{rule.id}.md", text)
        entries.append(
            BundleEntry(
                id=rule.id, kind=rule.kind, file=f"rules/{rule.id}.md", sha256=_digest(text)
            )
        )
    manifest = Manifest(exported=now, home=home_id, rules=entries)
    _write(dest / MANIFEST, tomli_w.dumps(manifest.model_dump(mode="json")))
    return Exported(entries, left_out)


# import --------------------------------------------------------------------------------


@dataclass
class Refusals:
    """Why a bundle is refused, one line per problem, each naming the entry."""

    lines: list[str] = field(default_factory=list)

    def add(self, where: str, problem: str) -> None:
        self.lines.append(f"{where}: {problem}")


def _read_bundle_file(root: Path, relative: str, cap: int) -> str:
    """A regular file inside the bundle, no link on its way, at most `cap` bytes."""
    parts = relative.split("/")
    if not relative or relative.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise BundleError(f"{relative!r} is not a plain path inside the bundle")
    path = root
    for part in parts:
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            raise BundleError(f"{relative}: no such file in the bundle") from None
        if stat.S_ISLNK(mode):
            raise BundleError(f"{relative}: a link; a bundle holds plain files only")
    if not stat.S_ISREG(mode):
        raise BundleError(f"{relative}: not a regular file")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags)
    try:
        if os.fstat(fd).st_size > cap:
            raise BundleError(f"{relative}: larger than {cap:,} bytes")
        data = os.read(fd, cap + 1)
    finally:
        os.close(fd)
    if len(data) > cap:
        raise BundleError(f"{relative}: larger than {cap:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise BundleError(f"{relative}: not UTF-8 text") from None


def read_manifest(src: Path) -> Manifest:
    """The bundle's manifest, checked; BundleError saying what is wrong."""
    if not src.is_dir():
        raise BundleError(f"{src}: no such folder. Fix: give the folder `loopd rules export` made")
    text = _read_bundle_file(src, MANIFEST, MAX_MANIFEST_BYTES)
    try:
        manifest = Manifest.model_validate(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise BundleError(f"{src / MANIFEST}: not a bundle manifest ({first})") from None
    if manifest.format != BUNDLE_FORMAT:
        raise BundleError(
            f"{src / MANIFEST}: format {manifest.format}; this loopd reads format "
            f"{BUNDLE_FORMAT}. Fix: export it again with this version"
        )
    return manifest


def _checked_entry(src: Path, entry: BundleEntry, now: datetime, refusals: Refusals) -> Rule | None:
    """The entry's rule when every check passes; else None and the reasons in `refusals`."""
    if not RULE_ID.match(entry.id) or entry.file != f"rules/{entry.id}.md":
        refusals.add(entry.id, f"file {entry.file!r} is not rules/ID.md for a rule id r-NNNN-slug")
        return None
    try:
        text = _read_bundle_file(src, entry.file, MAX_RULE_BYTES)
    except (BundleError, OSError) as exc:
        refusals.add(entry.id, str(exc))
        return None
    if _digest(text) != entry.sha256:
        refusals.add(entry.id, "its sha256 does not match the manifest: changed after export")
        return None
    try:
        rule = parse_rule(text)
    except RuleFileError as exc:
        refusals.add(entry.id, str(exc))
        return None
    if rule.id != entry.id or rule.kind != entry.kind:
        refusals.add(entry.id, f"the file says {rule.id} ({rule.kind}); the manifest disagrees")
        return None
    if rule.expires is None or rule.expired(now):
        when = f"on {rule.expires:%Y-%m-%d}" if rule.expires else "(no expires date)"
        refusals.add(entry.id, f"expired {when}: export it again from a home that verified it")
        return None
    for pattern in rule.trigger_patterns:
        problem = pattern_problem(pattern)
        if problem:
            refusals.add(entry.id, f"trigger pattern {pattern[:60]!r}: {problem}")
            return None
    return rule


def check_bundle(
    library: RuleLibrary,
    src: Path,
    now: datetime,
    client: StructuredModel | None,
    strict: bool = False,
) -> tuple[list[Rule], list[str]]:
    """The bundle's rules that pass every check, and why each other one is skipped;
    BundleError when `strict` and any fails, or when none passes and some failed."""
    manifest = read_manifest(src)
    refusals = Refusals()
    seen: set[str] = set()
    rules: list[Rule] = []
    for entry in manifest.rules:
        if entry.id in seen:
            refusals.add(entry.id, "appears twice in the manifest")
            rules = [r for r in rules if r.id != entry.id]  # neither copy is taken
            continue
        seen.add(entry.id)
        rule = _checked_entry(src, entry, now, refusals)
        if rule is not None:
            rules.append(rule)
    if client is not None and not (strict and refusals.lines):
        live = library.rules(LIVE)
        agreeing = []
        for rule in rules:
            against = contradictions(rule, live, client)
            if against:
                refusals.add(rule.id, f"contradicts this home's {', '.join(against)}")
            else:
                agreeing.append(rule)
        rules = agreeing
    if refusals.lines and (strict or not rules):
        raise BundleError(f"{src}: refused, nothing imported:\n  " + "\n  ".join(refusals.lines))
    return rules, refusals.lines


@dataclass
class Imported:
    """The rules an import filed, and the bundle's entries it skipped, each with why."""

    landed: list[StoredRule]
    skipped: list[str]


def import_rules(
    library: RuleLibrary,
    src: Path,
    now: datetime,
    client: StructuredModel | None,
    events: EventLog | None,
    strict: bool = False,
) -> Imported:
    """Check the bundle, then file each rule that passed in `rules/trial/`, firing nowhere."""
    rules, skipped = check_bundle(library, src, now, client, strict)
    landed = []
    for rule in rules:
        provenance = (rule.provenance or Provenance()).model_copy(
            update={
                "origin_id": (rule.provenance.origin_id if rule.provenance else "") or rule.id,
                "imported_from": str(src),
                "imported": now,
            }
        )
        local = rule.model_copy(
            update={
                "id": "",  # the library gives it this home's next number
                "scope": rule.scope.model_copy(update={"nowhere": True}),
                "provenance": provenance,
                "fired": 0,
                "helped": 0,
                "harmed": 0,
                "idle": 0,
                "reason": f"imported from {src}",
            }
        )
        stored = library.add(local, "trial")
        landed.append(stored)
        if events is not None:
            events.append(
                Event.RULE_IMPORTED,
                now,
                rule=stored.rule.id,
                origin=provenance.origin_id,
                home=provenance.home,
                bundle=str(src),
            )
    return Imported(landed, skipped)


def is_remote(src: str) -> bool:
    """Whether SRC names a git repository to clone rather than a folder here: a URL, or a
    path ending in `.git` (a bare repository a team shares is a folder too, yet no bundle)."""
    return "://" in src or src.rstrip("/").endswith(".git") or src.startswith("git@")


def clone_bundle(src: str, into: Path) -> Path:
    """A shallow clone of a shared bundle repository (safe git: no hooks, no filters run)."""
    try:
        Git(into.parent, plain=True).run("clone", "--quiet", "--depth=1", "--", src, str(into))
    except GitError as exc:
        raise BundleError(
            f"{src}: cannot clone: {exc}. Fix: give a git repository holding a bundle (a path "
            "ending in .git is cloned), or the bundle's folder by a path not ending in .git"
        ) from None
    return into


def only_plain_names(names: list[str]) -> list[str]:
    """Kinds as given on the command line, each checked against the four kinds."""
    kinds = ("failure", "decision", "knowledge", "skill")
    for name in names:
        if name not in kinds:
            raise BundleError(f"--kind {name}: not a kind. Fix: use one of {', '.join(kinds)}")
    return names

"""One rule file: TOML front matter between `+++` lines, then Rule, Why, How to apply."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from daemon.config.errors import explain
from daemon.redact import redact
from daemon.state.runids import loop_of

RULES_REFERENCE = "docs/rules.md"

Kind = Literal["failure", "decision", "knowledge", "skill"]
Severity = Literal["remind", "refuse", "escalate"]
Status = Literal["trial", "active", "rejected", "retired"]
# Folder precedence when one id sits in two folders by hand: the first one wins.
STATUSES: tuple[Status, ...] = ("active", "trial", "retired", "rejected")
LIVE: tuple[Status, ...] = ("active", "trial")

RULE_ID = re.compile(r"^r-(\d{4,})-([a-z0-9]+(?:-[a-z0-9]+)*)$")
# The counters change on every run a rule fires in (and confidence on every duplicate that
# supports it); they are left out of the version so that the trigger evaluator's cache,
# keyed by version, survives them. Everything a person or the verifier writes is in it.
COUNTERS = ("confidence", "fired", "helped", "harmed", "idle")
FRONT_KEYS = (
    "id",
    "kind",
    "severity",
    "trigger_intent",
    "trigger_patterns",
    "scope",
    "confidence",
    "fired",
    "helped",
    "harmed",
    "idle",
    "created",
    "expires",
    "source_run",
    "source_task",
    "verified_by",
    "verified_with",
    "evidence",
    "reason",
    "provenance",
)
DEFAULT_LIFETIME = timedelta(days=90)
# What each kind means, written after `kind` in every rule file so a reader need not guess.
KIND_WORDS: dict[str, str] = {
    "failure": "a failure: a mistake an earlier attempt made, and how to avoid it",
    "decision": "a decision: what a person or a passing run decided; follow it",
    "knowledge": "knowledge: a fact about this repository that an agent lacked",
    "skill": "a skill: a procedure that worked, with the command that verified it",
}
FENCE = "+++"
_SECTION = re.compile(r"^\*\*(Rule|Why|How to apply):\*\*[ \t]*", re.MULTILINE)
_SECTION_FIELDS = {"Rule": "rule", "Why": "why", "How to apply": "how_to_apply"}


class RuleFileError(ValueError):
    """A rule file that cannot be read: the message says what is wrong and how to fix it."""


class Evidence(BaseModel):
    """Where a rule's support is: a file relative to `state/`, a line, a verbatim quote."""

    model_config = ConfigDict(extra="forbid")

    path: str
    line: int | None = Field(None, ge=0)
    quote: str = ""


class Scope(BaseModel):
    """Which repositories, loops (globs) and changed paths (wildmatch globs) a rule fires for.

    `repos` empty (or absent, in a hand-written or older file): every repository.
    """

    model_config = ConfigDict(extra="forbid")

    repos: list[str] = []
    loops: list[str] = ["*"]
    paths: list[str] = []
    # An imported rule fires nowhere until a person widens it (`loopd rules promote ID
    # --scope all`) or sets this to false: another home's lesson is not this home's yet.
    nowhere: bool = False


class VerifiedWith(BaseModel):
    """A skill's proof: the command loopd ran that showed the procedure works, and its result."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1)
    exit_code: int = 0
    output: str = ""  # the last lines of its output, as loopd recorded them
    where: str = ""  # the file under state/ that records the run: a checks.log, an evidence.jsonl


class Provenance(BaseModel):
    """Where a shared rule came from: its home, repository, runs and verification."""

    model_config = ConfigDict(extra="forbid")

    home: str = ""  # the exporting home's id (state/home-id there)
    repos: list[str] = []  # the repositories it was learned in
    runs: list[str] = []  # the runs it was learned from and verified on
    verified_by: list[str] = []  # the verifier's steps that accepted it
    verified: datetime | None = None  # when it was last verified
    grounding: str = ""  # what the grounding check found: "grounded (N quotes)", "none"
    origin_id: str = ""  # its id in the exporting home
    imported_from: str = ""  # the bundle it was imported from, in this home
    imported: datetime | None = None

    @field_validator("verified", "imported")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Rule(BaseModel):
    """A rule: its front matter and its three paragraphs."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    id: str = ""  # empty only for a candidate that the verifier has not filed yet
    kind: Kind = "failure"
    severity: Severity = "remind"
    trigger_intent: str = ""
    trigger_patterns: list[str] = []
    scope: Scope = Scope()
    confidence: float = Field(0.5, ge=0.0, le=1.0)
    fired: int = Field(0, ge=0)
    helped: int = Field(0, ge=0)
    harmed: int = Field(0, ge=0)
    idle: int = Field(0, ge=0)  # firings the critic called irrelevant
    created: datetime | None = None
    expires: datetime | None = None
    source_run: str = ""
    source_task: str = ""
    verified_by: list[str] = []
    verified_with: VerifiedWith | None = None  # a skill: the command it was verified with
    evidence: list[Evidence] = []
    reason: str = ""  # why it was last moved: rejected, retired, promoted
    provenance: Provenance | None = None  # a rule exported from, or imported into, a home
    rule: str
    why: str
    how_to_apply: str

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        if value and not RULE_ID.match(value):
            raise ValueError(
                f"id {value!r} is not of the form r-NNNN-slug (e.g. r-0042-grep-count)"
            )
        return value

    @field_validator("trigger_patterns")
    @classmethod
    def _patterns_are_text(cls, value: list[str]) -> list[str]:
        # Whether RE2 can run a pattern is checked where rules are read and verified: a
        # pattern it cannot run is skipped with a warning, and the rest of the rule works.
        return [p for p in value if isinstance(p, str)]

    @field_validator("created", "expires")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @field_validator("rule", "why", "how_to_apply")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; write one or two sentences")
        return value.strip()

    @property
    def version(self) -> str:
        """A hash of the file without the counters (see COUNTERS)."""
        text = dump_rule(self, exclude=COUNTERS)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    @property
    def number(self) -> int:
        match = RULE_ID.match(self.id)
        return int(match.group(1)) if match else 0

    @property
    def source_loop(self) -> str:
        """The loop of `source_run` (RUN_ID is `YYYYMMDDTHHMMSSZ-LOOP-xxxx`)."""
        return loop_of(self.source_run) if "-" in self.source_run[17:] else ""

    def expired(self, now: datetime) -> bool:
        return self.expires is not None and self.expires <= now


def kind_problem(rule: Rule) -> str | None:
    """Why a candidate cannot be a rule of its kind, or None: a skill must carry the command
    that verified it, and that command must have passed."""
    if rule.kind != "skill":
        return None
    proof = rule.verified_with
    if proof is None:
        return (
            "a skill needs the command it was verified with (verified_with): a check of a "
            "passing attempt or a command loopd ran for record_evidence that passed, named "
            "in the skill's text"
        )
    if proof.exit_code != 0:
        return f"its command `{proof.command}` exited {proof.exit_code}: a skill must have worked"
    return None


def slugify(text: str, words: int = 6) -> str:
    """A file-name slug from the first words of `text`."""
    parts = re.findall(r"[a-z0-9]+", text.lower())
    slug = "-".join(parts[:words])[:60].strip("-")
    return slug or "rule"


def make_id(number: int, slug: str) -> str:
    return f"r-{number:04d}-{slugify(slug)}"


# ---------------------------------------------------------------------------------------
# TOML values, written by hand so the front matter keeps the documented shape: inline
# `scope` and `evidence`, regexes as literal strings.


def _toml_string(value: str) -> str:
    controls = any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in value)
    if "\\" in value and "'" not in value and not controls:
        return f"'{value}'"
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(round(value, 4))
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, datetime):
        value = value.astimezone(UTC)
        fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if value.microsecond else "%Y-%m-%dT%H:%M:%SZ"
        return value.strftime(fmt)
    if isinstance(value, dict):
        items = [f"{k} = {_toml_value(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _redacted(rule: Rule) -> Rule:
    """The rule with its texts redacted: rule files are shared between homes and machines."""
    # Not the trigger patterns: a pattern is code, and a marker in it would change what fires.
    return rule.model_copy(
        update={
            key: redact(getattr(rule, key))
            for key in ("rule", "why", "how_to_apply", "trigger_intent", "source_task", "reason")
        }
        | {"evidence": [e.model_copy(update={"quote": redact(e.quote)}) for e in rule.evidence]}
        | (
            {
                "verified_with": rule.verified_with.model_copy(
                    update={
                        "command": redact(rule.verified_with.command),
                        "output": redact(rule.verified_with.output),
                    }
                )
            }
            if rule.verified_with is not None
            else {}
        )
    )


def dump_rule(rule: Rule, exclude: tuple[str, ...] = ()) -> str:
    """The rule as its file's text, its texts redacted."""
    rule = _redacted(rule)
    data = rule.model_dump(mode="python")
    lines = [FENCE]
    for key in FRONT_KEYS:
        value = data[key]
        if key in exclude or value is None or (key == "reason" and not value):
            continue
        if key == "evidence" and len(value) > 1:
            lines.append("evidence = [")
            lines.extend(f"  {_toml_value(item)}," for item in value)
            lines.append("]")
            continue
        if key == "scope":
            # Left out when empty or false: every repository; the rule is not held back.
            value = {k: v for k, v in value.items() if k not in ("repos", "nowhere") or v}
        line = f"{key} = {_toml_value(value)}"
        if key == "kind" and value in KIND_WORDS:
            line += f"  # {KIND_WORDS[value]}"
        lines.append(line)
    lines.append(FENCE)
    body = (
        f"**Rule:** {rule.rule}\n\n**Why:** {rule.why}\n\n**How to apply:** {rule.how_to_apply}\n"
    )
    return "\n".join(lines) + "\n" + body


def _split(text: str) -> tuple[str, str]:
    lines = text.replace("\r\n", "\n").split("\n")
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start >= len(lines) or lines[start].strip() != FENCE:
        raise RuleFileError("the file does not start with a '+++' line; put the front matter first")
    for end in range(start + 1, len(lines)):
        if lines[end].strip() == FENCE:
            return "\n".join(lines[start + 1 : end]), "\n".join(lines[end + 1 :])
    raise RuleFileError("the front matter has no closing '+++' line; add one after it")


def _body(text: str) -> dict[str, str]:
    marks = list(_SECTION.finditer(text))
    names = [m.group(1) for m in marks]
    if names != ["Rule", "Why", "How to apply"]:
        found = ", ".join(f"**{n}:**" for n in names) or "none"
        raise RuleFileError(
            "the body must hold the paragraphs **Rule:**, **Why:** and **How to apply:**, "
            f"once each and in that order (found: {found})"
        )
    if text[: marks[0].start()].strip():
        raise RuleFileError("text before **Rule:**; move it into one of the three paragraphs")
    out = {}
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out[_SECTION_FIELDS[mark.group(1)]] = text[mark.end() : end].strip()
    return out


def parse_rule(text: str, require_id: bool = True) -> Rule:
    """Read a rule file's text; RuleFileError says what is wrong."""
    front, body = _split(text)
    try:
        data = tomllib.loads(front)
    except tomllib.TOMLDecodeError as exc:
        raise RuleFileError(
            f"front matter is not valid TOML: {exc}; correct that line (strings in double "
            "quotes, regular expressions in single quotes, one key = value a line)"
        ) from None
    collision = {"rule", "why", "how_to_apply"} & set(data)
    if collision:
        raise RuleFileError(
            f"front matter key {sorted(collision)[0]!r} belongs in the body; remove it"
        )
    data.update(_body(body))
    try:
        rule = Rule.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{p.key or 'front matter'}: {p.message} ({p.fix})"
            for p in explain(Rule, exc, reference=RULES_REFERENCE)
        ]
        raise RuleFileError("; ".join(problems)) from None
    if require_id and not rule.id:
        raise RuleFileError('id is missing; add id = "r-NNNN-slug" matching the file name')
    return rule

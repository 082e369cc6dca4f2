"""`loopd rules list|show|match|verify|promote|retire|export|import`: the rule library."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from daemon.cli.common import CommandError, home_of
from daemon.cli.jsonout import print_json
from daemon.cli.learning_parsers import STATUS_CHOICES
from daemon.clock import utc_now
from daemon.model.client import ModelClient, ModelUnavailable
from daemon.rules.evaluator import JudgeCache, select_rules
from daemon.rules.library import RuleLibrary
from daemon.rules.patterns import matches_everything
from daemon.rules.rulefile import KIND_WORDS, LIVE, STATUSES, Rule, RuleFileError
from daemon.rules.sharing import (
    BundleError,
    clone_bundle,
    export_rules,
    import_rules,
    is_remote,
    only_plain_names,
)
from daemon.rules.verifier import candidate_from_file, verify_candidate
from daemon.state.eventtypes import Event


def rule_library(args: argparse.Namespace):  # noqa: ANN202 - RuleLibrary

    # The command prints the library's warnings itself (see _warn), once each.
    logging.getLogger("loopd.rules").addHandler(logging.NullHandler())
    home = home_of(args)
    library = RuleLibrary(home.rules_dir)
    return home, library


def _warn(library: Any) -> None:
    for warning in library.warnings:
        print(f"loopd: warning: skipped {warning}", file=sys.stderr)


def _get(library: Any, rule_id: str) -> Any:
    stored = library.find(rule_id)
    _warn(library)
    if stored is None:
        raise CommandError(f"no rule {rule_id!r} in rules/. Fix: `loopd rules list` shows the ids")
    return stored


def _verifier(home: Any) -> Any:
    loaded = home.load()
    if not loaded.daemon_ok:
        raise CommandError("\n".join(str(e) for e in loaded.errors))
    return loaded.daemon.verifier


def _client(cfg: Any) -> Any:
    if not cfg.configured:
        return None

    return ModelClient(cfg)


def _where(rule: Any) -> str:
    """A rule's scope in words."""
    if rule.scope.nowhere:
        return "nowhere until widened (imported)"
    return "every repository" if not rule.scope.repos else ", ".join(rule.scope.repos)


def _row(stored: Any) -> dict[str, Any]:
    rule = stored.rule
    return {
        "id": rule.id,
        "status": stored.status,
        "kind": rule.kind,
        "severity": rule.severity,
        "confidence": rule.confidence,
        "fired": rule.fired,
        "helped": rule.helped,
        "harmed": rule.harmed,
        "idle": rule.idle,
        "repos": rule.scope.repos,
        "nowhere": rule.scope.nowhere,
        "expires": rule.expires.isoformat() if rule.expires else None,
        "expired": rule.expired(utc_now()),
        "imported_from": rule.provenance.imported_from if rule.provenance else "",
        "source_run": rule.source_run,
        "verified_with": rule.verified_with.model_dump() if rule.verified_with else None,
        "rule": rule.rule,
        "path": str(stored.path),
    }


def list_cmd(args: argparse.Namespace) -> int:
    """List the rules by kind (live ones: trial and active; --status or --all for others)."""
    _, library = rule_library(args)
    now = utc_now()
    wanted: tuple[str, ...]
    if args.status:
        wanted = (args.status,)
    else:
        wanted = STATUSES if args.all else LIVE
    items = [s for s in library.scan() if s.status in wanted]
    _warn(library)
    kinds = list(KIND_WORDS)
    items.sort(key=lambda s: (kinds.index(s.rule.kind), STATUS_CHOICES.index(s.status), s.rule.id))
    if args.json:
        print_json([_row(s) for s in items])
        return 0
    if not items:
        print("No rules.")
        return 0
    for kind in kinds:
        of_kind = [s for s in items if s.rule.kind == kind]
        if not of_kind:
            continue
        print(f"{kind} ({len(of_kind)}): {KIND_WORDS[kind].split(': ', 1)[1]}")
        for s in of_kind:
            r = s.rule
            print(
                f"  {r.id}  {s.status}  {r.severity}  fired {r.fired}  helped {r.helped}  "
                f"harmed {r.harmed}  idle {r.idle}  confidence {r.confidence:.2f}"
            )
            print(f"      {r.rule}")
            print(f"      scope: {_where(r)}")
            if r.verified_with is not None:
                proof = r.verified_with
                print(f"      verified with `{proof.command}` (exit {proof.exit_code})")
            if r.expired(now):
                print(f"      expired on {r.expires:%Y-%m-%d}: it no longer fires")
            if r.provenance is not None and r.provenance.imported_from:
                print(
                    f"      imported from {r.provenance.imported_from} ({r.provenance.origin_id})"
                )
    return 0


def show_cmd(args: argparse.Namespace) -> int:
    """Show one rule: its file, its status and its version."""
    _, library = rule_library(args)
    stored = _get(library, args.id)
    if args.json:
        data = stored.rule.model_dump(mode="json")
        data.update(status=stored.status, path=str(stored.path), version=stored.rule.version)
        print_json(data)
        return 0
    print(f"# {stored.path}  ({stored.status}, version {stored.rule.version})")
    print(stored.path.read_text(encoding="utf-8"), end="")
    return 0


def match_cmd(args: argparse.Namespace) -> int:
    """Print the rules that would fire for a task, and why (pattern or model)."""
    if args.task and args.task_option and args.task != args.task_option:
        raise CommandError("give the task once: as the argument or as --task, not both")
    task = args.task or args.task_option
    if not task:
        raise CommandError('give the task: `loopd rules match "Make the tests pass"`')
    home, library = rule_library(args)
    cfg = _verifier(home)
    client = None if args.no_model else _client(cfg)
    cache = JudgeCache(home.state_dir / "cache" / "trigger-matches.json")
    loop = home.load().loops.get(args.loop) if args.loop else None
    selection = select_rules(
        library,
        task,
        args.loop or "",
        list(args.path or []),
        client,
        cfg,
        None,
        utc_now(),
        cache=cache,
        repo=str(loop.config.repo_path) if loop is not None else None,
    )
    _warn(library)
    if args.json:
        print_json(selection.to_dict())
        return 0
    if not selection.fired:
        print("No rule fires.")
    for fired in selection.fired:
        how = f"pattern {fired.detail}" if fired.why == "pattern" else fired.detail
        severity = "" if fired.rule.severity == "remind" else f" [{fired.rule.severity}]"
        print(f"{fired.rule.id} ({fired.status}){severity}: {how}")
        print(f"    {fired.rule.rule}")
    print(f"model: {selection.judge} ({selection.model_calls} call(s))")
    return 0


def verify_cmd(args: argparse.Namespace) -> int:
    """Run the rule verifier on a candidate rule file; exit 0 accepted, 1 rejected."""
    home, library = rule_library(args)
    candidate_path = Path(args.candidate)
    evidence_dir = Path(args.evidence)
    if not evidence_dir.is_dir():
        raise CommandError(f"--evidence {args.evidence}: no such folder")
    try:
        candidate = candidate_from_file(candidate_path)
    except OSError as exc:
        raise CommandError(f"{candidate_path}: cannot read: {exc.strerror}") from None
    except RuleFileError as exc:
        raise CommandError(f"{candidate_path}: {exc}") from None
    cfg = _verifier(home)
    client = None if args.no_model else _client(cfg)
    store = None if args.dry_run else home.state()
    try:
        result = verify_candidate(
            library,
            candidate,
            evidence_dir,
            client,
            cfg,
            store.events if store else None,
            utc_now(),
            state_root=home.state_dir,
            use_model=not args.no_model,
            write=not args.dry_run,
        )
    except ModelUnavailable as exc:
        print(
            f"loopd: the model step could not run: {exc}\n"
            "Fix: start the endpoint, or pass --no-model to skip that step",
            file=sys.stderr,
        )
        return 1
    data = result.to_dict()
    if not args.no_model and client is None:
        data["reasons"].append("no [verifier] base_url in loopd.toml: the model step was skipped")
    if args.json:
        print_json(data)
    else:
        where = f" -> {result.path}" if result.path else ""
        print(f"{result.decision}{where}")
        for reason in data["reasons"]:
            print(f"  {reason}")
    return 0 if result.accepted else 1


def promote_cmd(args: argparse.Namespace) -> int:
    """Make a rule active; --severity refuse|escalate and --scope all are a person's decisions."""
    home, library = rule_library(args)
    stored = _get(library, args.id)
    rule = stored.rule
    now = utc_now()
    broad = [p for p in rule.trigger_patterns if matches_everything(p)]
    if broad and not args.broad:
        raise CommandError(
            f"{rule.id}: its trigger pattern {broad[0][:60]!r} matches every task, so active it "
            "would fire on every run. Fix: narrow trigger_patterns in its file, or pass --broad "
            "to promote it anyway"
        )
    events = home.state().events
    update: dict[str, Any] = {}
    said: list[str] = []
    if args.severity and args.severity != rule.severity:
        update["severity"] = args.severity
        said.append(f"severity {rule.severity} -> {args.severity}")
    if args.scope == "all" and (rule.scope.repos or rule.scope.nowhere):
        # An imported rule fires nowhere: widening it lets it fire in every repository.
        update["scope"] = {**rule.scope.model_dump(), "repos": [], "nowhere": False}
        said.append(f"scope {_where(rule)} -> every repository")
    if stored.status != "active":
        by = getattr(args, "by", "")  # the console says who; the command line does not
        reason = f"promoted by a person ({by})" if by else "promoted by a person"
        moved = library.move(rule.id, "active", events, now, reason=reason, update=update or None)
        print(f"{moved.rule.id}: {stored.status} -> active ({moved.rule.severity})")
        if "scope" in update:
            print(f"{moved.rule.id}: {said[-1]}")
        return 0
    if not update:
        print(f"{rule.id} is already active ({rule.severity})")
        return 0
    library.save(stored, Rule.model_validate({**rule.model_dump(), **update}))
    fields = {k: v for k, v in (("severity", args.severity), ("scope", args.scope)) if k in update}
    events.append(
        Event.RULE_PROMOTED,
        now,
        rule=rule.id,
        **{"from": "active", "to": "active"},
        **fields,
        reason="set by a person: " + "; ".join(said),
    )
    for line in said:
        print(f"{rule.id}: {line}")
    return 0


def retire_cmd(args: argparse.Namespace) -> int:
    """Retire a rule: it stops firing; the file moves to rules/retired/."""
    home, library = rule_library(args)
    stored = _get(library, args.id)
    if stored.status == "retired":
        print(f"{stored.rule.id} is already retired")
        return 0
    library.move(stored.rule.id, "retired", home.state().events, utc_now(), reason=args.reason)
    print(f"{stored.rule.id}: {stored.status} -> retired")
    return 0


def export_cmd(args: argparse.Namespace) -> int:
    """Write rules, with their provenance, as a bundle another home can import."""
    home, library = rule_library(args)
    try:
        exported = export_rules(
            library,
            Path(args.dest),
            home.state().home_id(),
            utc_now(),
            kinds=tuple(only_plain_names(args.kind or [])),
            statuses=tuple(args.status or ["active"]),
        )
    except BundleError as exc:
        raise CommandError(str(exc)) from None
    _warn(library)
    entries = exported.entries
    for line in exported.left_out:
        print(f"loopd: warning: left out {line}", file=sys.stderr)
    if args.json:
        rows = [e.model_dump() for e in entries]
        print_json({"dest": str(args.dest), "rules": rows, "left_out": exported.left_out})
        return 0
    print(f"{len(entries)} rule(s) -> {args.dest}")
    for entry in entries:
        print(f"  {entry.id} ({entry.kind})")
    return 0


def import_cmd(args: argparse.Namespace) -> int:
    """Check a bundle, then file its rules in rules/trial/, firing nowhere until widened."""
    home, library = rule_library(args)
    client = None if args.no_model else _client(_verifier(home))
    if client is None and not args.no_model:
        raise CommandError(
            "importing rules checks them against this home's rules with the verifier model, "
            "and loopd.toml has no [verifier] base_url. Fix: configure [verifier], or pass "
            "--no-model to import without the contradiction check"
        )
    with tempfile.TemporaryDirectory(prefix="loopd-bundle-") as scratch:
        src = Path(args.src)
        if is_remote(args.src):
            src = clone_bundle(args.src, Path(scratch) / "bundle")
        try:
            imported = import_rules(
                library, src, utc_now(), client, home.state().events, strict=args.strict
            )
        except BundleError as exc:
            raise CommandError(str(exc)) from None
        except ModelUnavailable as exc:
            raise CommandError(
                f"the contradiction check could not run: {exc}. Fix: start the endpoint, or "
                "pass --no-model"
            ) from None
    landed = imported.landed
    for line in imported.skipped:
        print(f"loopd: warning: skipped {line}", file=sys.stderr)
    if args.json:
        print_json([_row(s) for s in landed])
        return 0
    print(
        f"{len(landed)} rule(s) -> rules/trial/, held back (they fire nowhere) until you widen them"
    )
    for stored in landed:
        origin = stored.rule.provenance.origin_id if stored.rule.provenance else ""
        print(f"  {stored.rule.id}  (was {origin})  {stored.rule.rule}")
    if landed:
        print("Fix scope: `loopd rules promote ID --scope all`, or edit `scope` in the file")
    return 0

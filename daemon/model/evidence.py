"""The evidence bundle of an attempt: what the agent really saw and did, within a budget.

The attempt folder is read in two passes. The first streams `transcript.jsonl` and
`diff.patch` line by line and keeps only an index (line numbers, byte offsets, sizes, which
of the summary's citations each part holds); the second re-reads just the parts that fit the
budget. Memory stays bounded by the budget and the longest single line, not by the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from daemon.model.citations import CITED, Citation, citations
from daemon.model.evidence_parts import (
    Source,
    cut_marker,
    index_diff,
    index_transcript,
    index_whole,
    trim,
)
from daemon.redact import redact
from daemon.state.agentrecords import render_records
from daemon.state.records import DiffStat
from daemon.state.stored import is_stored

__all__ = [
    "Citation",
    "Evidence",
    "EvidencePart",
    "SECTIONS",
    "build_evidence",
    "citations",
    "cut_marker",
    "trim",
]

CHARS_PER_TOKEN = 4
_SAFETY = 0.97  # room for redaction markers longer than what they replace
DIFF_SUMMARY_FILES = 20  # files listed by name above the diff


@dataclass
class EvidencePart:
    """One rendered part of the evidence; a part without a title marks what was left out."""

    section: str
    title: str
    body: str
    cited: bool = False  # the summary cites it
    cut: int = 0  # characters cut from it (or left out, for a gap); 0: kept whole


_HEADINGS = {
    "checks": "# Checks run by loopd after the attempt (checks.log)",
    "diff": "# The attempt's diff (diff.patch)",
    "transcript": "# What the agent did: tool calls with their verbatim outputs (transcript.jsonl)",
    "prompt": "# The prompt the agent received (prompt.md)",
}
SECTIONS = tuple(_HEADINGS)
RECORDS_HEADING = "# What the agent recorded through loopd's tools"
RECORDS_SHARE = 6  # at most 1/6 of the budget: the agent's own words weigh less than the checks


@dataclass
class Evidence:
    """What the critic (and the post-mortem) read about one attempt, within a budget."""

    task: str
    summary: str
    violations: list[str]
    parts: list[EvidencePart]
    budget_tokens: int
    citations: list[str]  # what the summary cites, as found in it
    diff_summary: str = ""  # the files changed with +/- counts, from diffstat.json
    # What the agent recorded through loopd's tools: its claims with what loopd saw when it
    # ran their commands, and its decisions (state/runs/RUN_ID/evidence.jsonl, decisions.md).
    records: str = ""
    # The order of the sections; calibration renders another order to see if verdicts change.
    sections: tuple[str, ...] = SECTIONS

    def render(self) -> str:
        """The evidence as Markdown for the prompt; never longer than the budget."""
        out = [
            f"# Task\n{self.task.strip()}\n",
            "\n# The agent's final summary\n"
            f"{self.summary.strip() or '(the agent gave no final summary)'}\n",
            "\n# Violations found by loopd (protected paths, moved refs)\n"
            + ("\n".join(f"- {v}" for v in self.violations) or "none")
            + "\n",
        ]
        if self.records:
            out.append(f"\n{RECORDS_HEADING}\n{self.records}")
        for section in self.sections:
            heading = _HEADINGS[section]
            parts = [p for p in self.parts if p.section == section]
            summary = self.diff_summary if section == "diff" else ""
            if not parts and not summary:
                continue
            out.append(f"\n{heading}\n")
            if summary:
                out.append(f"\n{summary}")
            for part in parts:
                if part.title:
                    out.append(f"\n## {part.title}\n{part.body.rstrip(chr(10))}\n")
                else:
                    out.append(f"\n{part.body}\n")
        text = "".join(out)
        limit = self.budget_tokens * CHARS_PER_TOKEN
        if len(text) > limit:  # only when redaction lengthened text beyond the margin
            text, _ = trim(text, limit, 0.9)
        return text


def build_evidence(
    attempt_dir: Path,
    task: str,
    summary: str,
    budget_tokens: int,
    violations: list[str] | None = None,
) -> Evidence:
    """The evidence bundle of an attempt folder, within `budget_tokens` (4 characters each)."""
    violations = [redact(v) for v in (violations or [])]
    budget = int(budget_tokens * CHARS_PER_TOKEN * _SAFETY)
    cites = citations(summary)
    task_text, _ = trim(redact(task), max(200, budget // 8))
    summary_text, _ = trim(redact(summary), max(400, budget // 4))
    records = _records(attempt_dir, budget)
    diff_summary = _diff_summary(attempt_dir)
    fixed = _fixed(task_text + summary_text + records + diff_summary, violations, bool(records))
    remaining = max(0, budget - fixed)

    sources: list[Source] = []
    checks, diff = attempt_dir / "checks.log", attempt_dir / "diff.patch"
    transcript, prompt = attempt_dir / "transcript.jsonl", attempt_dir / "prompt.md"
    if checks.is_file():
        sources += index_whole(checks, "checks", 1, 0.3, cites, len(sources))
    if diff.is_file():
        sources += index_diff(diff, cites, len(sources))
    if is_stored(transcript):  # compressed once its run finished: still `transcript.jsonl`
        sources += index_transcript(transcript, cites, len(sources))
    if prompt.is_file():
        sources += index_whole(prompt, "prompt", 4, 0.5, cites, len(sources))
    for source in sources:
        source.score = sum(cites[i].weight for i in source.hits)
        # The prompt restates the task, so it names the same files: it is no evidence of them.
        if source.score >= CITED and source.section != "prompt":
            source.tier = 0

    allot = _allocate(sources, remaining)
    parts: list[EvidencePart] = []
    gap: EvidencePart | None = None
    for source in sources:
        share = allot.get(id(source), 0)
        if share <= 0:
            if gap is None or gap.section != source.section:
                gap = EvidencePart(source.section, "", "")
                parts.append(gap)
            gap.cut += source.size
            gap.body = f"[... {gap.cut} characters cut: parts left out here ...]"
            continue
        gap = None
        body, cut = source.load_trimmed(share)
        parts.append(EvidencePart(source.section, source.title, body, source.tier == 0, cut))
    return Evidence(
        task=task_text,
        summary=summary_text,
        violations=violations,
        parts=parts,
        budget_tokens=budget_tokens,
        citations=[c.text for c in cites],
        diff_summary=diff_summary,
        records=records,
    )


def _records(attempt_dir: Path, budget: int) -> str:
    """What the agent recorded through loopd's tools, from the run's folder (the attempt
    folder's parent), within a share of the budget; "" when nothing."""
    return redact(render_records(attempt_dir.parent, budget // RECORDS_SHARE))


def _fixed(texts: str, violations: list[str], records: bool) -> int:
    """Characters the parts always shown take: `texts` (task, summary, the agent's records,
    the diff's summary), the violations, the headings and a margin."""
    fixed = len(texts) + sum(len(v) + 3 for v in violations)
    fixed += sum(len(h) + 2 for h in _HEADINGS.values()) + 200
    return fixed + (len(RECORDS_HEADING) + 2 if records else 0)


def _diff_summary(attempt_dir: Path) -> str:
    """The diff's files and counts as loopd recorded them when it committed the attempt."""
    try:
        stat = DiffStat.model_validate_json((attempt_dir / "diffstat.json").read_bytes())
    except (OSError, ValueError):
        return ""
    lines = [f"- {redact(c.stat())}" for c in stat.files[:DIFF_SUMMARY_FILES]]
    if stat.total_files > len(lines):
        lines.append(f"- ... and {stat.total_files - len(lines)} more files")
    total = f"{stat.total_files} files changed, +{stat.added} -{stat.removed}"
    if stat.patch_capped:
        total += f"; diff.patch was capped at {stat.patch_bytes} bytes"
    return "\n".join([total, *lines]) + "\n"


def _overhead(source: Source) -> int:
    """Characters a part costs besides its body: heading, newlines, a possible cut marker."""
    return len(source.title) + 8 + len(cut_marker(source.size)) + 2 + 60  # 60: a gap marker


def _allocate(sources: list[Source], budget: int) -> dict[int, int]:
    """Characters of body for each part (by id); parts not in the result are left out.

    Cited parts first and whole, the strongest citations first, keeping a floor for the
    checks and the diff; then the checks, the diff and loopd's own events share what is left
    in equal shares; then the rest of the transcript from its end backwards, where the
    attempt concluded; the prompt last.
    """
    allot: dict[int, int] = {}
    left = budget
    min_slice = 200

    floor_parts = [s for s in sources if s.tier == 1]
    floor = min(sum(s.size + _overhead(s) for s in floor_parts), budget // 5)
    for source in sorted((s for s in sources if s.tier == 0), key=lambda s: (-s.score, s.order)):
        cost = source.size + _overhead(source)
        room = left - floor
        if cost <= room:
            allot[id(source)] = source.size
            left -= cost
        elif room > _overhead(source) + min_slice:
            allot[id(source)] = room - _overhead(source)
            left -= room

    def water_fill(group: list[Source], pool: int) -> int:
        """Equal shares, parts smaller than a share kept whole; returns what was spent."""
        spent = 0
        waiting = sorted(group, key=lambda s: s.size)
        while waiting:
            share = pool // len(waiting)
            source = waiting.pop(0)
            want = source.size + _overhead(source)
            give = min(want, share)
            if give < want and give - _overhead(source) < min_slice:
                continue
            allot[id(source)] = give - _overhead(source)
            pool -= give
            spent += give
        return spent

    rest = [s for s in sources if s.tier == 3]
    shared = [s for s in sources if s.tier in (1, 2)]
    left -= water_fill(shared, left if not rest else left * 2 // 3)

    for source in sorted(rest, key=lambda s: -s.order):
        if left < min_slice + _overhead(source):
            break
        give = min(source.size + _overhead(source), max(left // 4, 2_000), left)
        allot[id(source)] = give - _overhead(source)
        left -= give

    for source in (s for s in sources if s.tier == 4):
        if left > min_slice + _overhead(source):
            give = min(source.size + _overhead(source), left)
            allot[id(source)] = give - _overhead(source)
            left -= give
    return allot

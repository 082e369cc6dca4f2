"""`state/README.md`: what each file and folder of `state/` is, for the person reading it.

`loopd init` writes it, and `loopd run` writes it when it is missing or when it is loopd's
own page from another version of loopd. The page ends with a line holding a digest of the
text above it: while the two agree, the page is loopd's and is kept current; a page a person
edited (the digest no longer agrees) or wrote (no such line) is theirs and is left alone.
Deleting it brings loopd's current page back.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from daemon.state.atomic import write_atomic

README = """\
# state/: what loopd wrote, and what each part is

Everything here is written by loopd (files 0600, folders 0700). Read it freely; edit only
what this page says you may. `loopd status`, `loopd runs`, `loopd show RUN_ID`,
`loopd logs RUN_ID` and `loopd report` read it for you. A RUN_ID looks like
`20261129T021000Z-app-3f2a`: the UTC time the run was queued, the loop, four hex digits.

## Start here in the morning

- `status.toml`: what the daemon is doing now: `[daemon]` pid, version, started, heartbeat
  (rewritten every 10 s while it runs) and warnings; `[loops.NAME]` phase, run, attempt,
  last outcome and run, next fire (UTC), paused, pending. `loopd status` shows it with times
  in each loop's zone
- `escalations/RUN_ID.md`: a run handed to you: what was asked, each attempt, scores,
  verdicts, the rules that fired, the diff's files, the branch, and what to do next. TOML
  front matter (`status = "open"`, `"resolved"` or `"superseded"`) then Markdown. An open
  one holds back that task's scheduled runs; `loopd escalations resolve RUN_ID [--retry
  --note TEXT]` closes it, and a later run of the same task that succeeds closes it as
  superseded
- `escalations/RUN_ID-qN.md`: a question the run's agent asked you with its `ask_person`
  tool (cause `question`); the run went on. It holds nothing back; `loopd escalations
  resolve RUN_ID-qN --note TEXT` answers it
- `answers/LOOP.md`: your answers to the questions the loop's agents asked (`resolve
  RUN_ID-qN --note TEXT`), each with its question, newest last; every later run of the loop
  is given them in its prompt (`# Answers from a person`). Edit or delete it to take one back
- `progress/LOOP.md`: the loop's handoff notes, rebuilt after each run from the records
  (what changed, what still fails, what is open); the next run's prompt starts from them
- `reports/report-TIME.md`: what `loopd report` printed, kept as Markdown

## Runs

- `runs/RUN_ID/run.toml`: the run's record: loop, task, `[trigger]` (kind, reason, ref,
  merged triggers), started, finished, `outcome` and `reason`, `cause`, branch (empty once
  loopd deleted it as a run that changed nothing ended: `branch_deleted` names it), tokens,
  cost, rules fired, `land`, `target`, `landed` and `landed_as` (where its work went),
  `[exposure]` (the paths its sandbox showed), and `[[attempts]]` (exit code, nudges,
  stalls, checks passed, score, verdict, feedback, violations)
- `runs/RUN_ID/attempt-N/`: one attempt: one agent session with its nudges, then loopd's
  checks and the critic
- `attempt-N/prompt.md`: byte for byte what the agent received
- `attempt-N/transcript.jsonl`: the agent's stream, normalized, one JSON object a line
  (`ts`, `stream`, `type`: text, tool_call, tool_result, usage, final, error, raw; loopd's
  own lines have `stream = "loopd"`: process started and exited, stall, nudge); capped by
  `transcript_cap` with a `truncated` marker. `loopd logs RUN_ID` prints it as text. When
  the attempt ends it is compressed; loopd reads it by its plain name either way
- `attempt-N/transcript.jsonl.gz`: an ended attempt's transcript, compressed (`zcat` reads
  it)
- `attempt-N/diff.patch`: what loopd committed of the attempt, as a patch (capped at 20 MB;
  secrets redacted). `loopd show RUN_ID --diff` prints it
- `attempt-N/diffstat.json`: the files the attempt changed with +/- counts
- `attempt-N/checks.log`: each `done_when` command, its exit code and its output, as loopd
  ran it after the attempt (a long output: its first 256 KB, the lines naming failures,
  its last 2 MB)
- `attempt-N/after-landing.md`: a landed run a person reverted (or edited past half of it)
  within 7 days: the person's commits, messages and diff, the evidence of its post-mortem
- `attempt-N/checks-failed.txt`: the output of the checks that failed, cut to its failures
  and its end (empty when they passed): what the next attempt's prompt shows under
  `# What failed last time`
- `attempt-N/verdict.toml`: the critic's judgement: score, verdict, unsupported claims,
  feedback (or "not judged by a model")
- `attempt-N/asked.md`: what the agent was last asked when its usage limit stopped it (the
  run is parked); sent to it again when the limit resets
- `runs/RUN_ID/decisions.md`: the decisions the agent recorded with its `record_decision`
  tool (a section each: title, why, alternatives); the critic reads them, `loopd show` lists
  them
- `runs/RUN_ID/evidence.jsonl`: the agent's claims backed with `record_evidence`, one JSON
  line each: claim, command, the commit loopd made of the work, exit code, output tail and
  `refuted` (the command failed: the claim does not hold); loopd ran each command itself
- `runs/RUN_ID/evicted.toml`: what `[limits] state_max` took from the run (its
  transcripts first, then its attempt folders) and when
- `runs/RUN_ID/setup.log`: the output of the loop's `setup` commands, run in the tree before
  the first attempt
- `runs/RUN_ID/done-check.log`: `done_when` as it ran on the commit the run starts from
  (`skip_if_done`); all passing ends the run `skipped`
- `runs/RUN_ID/land.log`, `land-checks.log`, `land-setup.log`, `pr-body.md`: landing a
  succeeded run (`land`): the push and `pr_command`, setup and the checks on a merge with
  the target, the pull request's body
- `runs/RUN_ID/aftermath.toml`: a landed run followed on its target: the commits that
  landed, their patch-ids, its lines (as hashes), its state (kept, edited, reverted, gone),
  the person's commits that changed it, the 1, 7 and 30 day windows (docs/aftermath.md)
- `runs/RUN_ID/repo-guard.json`: your repository's `config`, `hooks/` and `info/` as they
  were before the agent started, for a run whose agent could write them (a worktree, an
  in-place run, a clone without a sandbox); what changed is put back and reported
- `runs/RUN_ID/pruned.toml`: the newest run of a loop, pruned by `retain_days`: its attempt
  folders and branch are gone, run.toml stays (`loopd status` shows its outcome)
- `pruned-runs.jsonl`: every other run `retain_days` pruned, one JSON line each (run, loop,
  task, trigger, started, finished, outcome, reason, attempts, branch and whether it was
  deleted, how it landed, when it was pruned); its folder is gone. `loopd runs` lists them
  after the kept runs and `loopd show RUN_ID` prints its line. Runs an open escalation, a
  live rule or a deferred lesson cites are never pruned. A line is kept `retain_days` after
  its run was pruned
- `runs/RUN_ID/worker.toml`: with the Temporal engine, a worker's own view of the run it
  works on (the home keeps run.toml)
- `runs/RUN_ID/notes.jsonl`: the knowledge and skills the agent noted during the run
  (`note_knowledge`), one JSON line each, with what the rule verifier made of it

## Experiments

- `experiments/ID/report.md` and `report.json`: what `loopd experiment` measured, per arm:
  success rate with its 95% interval, tokens, wall time, nudges and escalations; rewritten
  after each of its runs. The runs themselves are in `runs/`, trigger kind `experiment`,
  with an `[experiment]` table naming their arm
- `calibration/MODEL.toml`: the last `loopd calibrate` of that judge model: its false-pass
  and false-fail rates with 95% intervals, order disagreement, latency and tokens, over
  which cases. `loopd status` and `loopd check` warn when the judge in use has none, or
  passes more bad attempts than `[verifier] max_false_pass`
- `calibration-field.toml`: the judge measured in the field: of the landed runs it passed,
  those a person reverted, with a 95% interval (`loopd calibrate --field`; `loopd status`
  shows it and warns above `[verifier] max_false_pass`)

## The daemon's working files (leave them to loopd)

- `events.jsonl`: the audit log, one JSON object a line (`ts`, `type`, `loop`, `run`, ...):
  every trigger, run, attempt, check, verdict, rule change, escalation, notification (each
  type and its fields: docs/events.md in loopd's source). Past `events_rotate` it is
  renamed `events-N.jsonl` (N counts up) and a new one starts; a rotated file whose last
  event is older than `retain_days` is deleted, and the oldest go first when `state/` is
  over `state_max` and no finished run has more to give.
  `events.jsonl.not-a-file` is what stood in its place and was no regular file (a FIFO, a
  link), set aside
- `queue.toml`: runs waiting to start, each with its RUN_ID and trigger (kept across
  restarts), and `taken`: inbox files the queue accounts for. `queue.unreadable.toml` is one
  loopd could not read, set aside
- `landing/KEY.toml`: a target branch's landing queue (KEY: a hash of the repository and
  target, which the file names): the succeeded runs waiting to land there in the order
  they entered (and land in), each with the process finishing it (`pid`, `mark`), and the
  step of the one landing now (`landing`, or `moving` with the target's old and new
  commit), written before the step is done, so a restart finishes or redoes it and never
  lands a run twice
- `usage.toml`: the size of `state/` and of its largest loops, as the housekeeper last
  measured it (hourly, and at once when its estimate of the growth since passes it)
  against `state_max`; `loopd status` shows it and its age
- `skips.json`: per loop, the streak of scheduled fires skipped in a row for one reason
  (held by an escalation, ...), so that its count outlives a kill -9
- `runs-index.json`: a cache of a few fields of each run record (outcome, branch, landing),
  each with the identity of the `run.toml` it was read from, so `loopd branches` need not
  parse thousands of records; the daemon refreshes it hourly, and any reader rebuilds what
  is missing or stale
- `cache/status-facts.json`: what `loopd status` shows of the configuration and this host
  (loops, schedules, errors, warnings, sandbox, limits), kept by the last `status` that read
  the configuration, with the identity of each file it came from, so the next `status`
  answers without reading it again; a changed file, or an hour, and it is read again.
  Deleting it costs one slower `status`
- `maintenance.toml`: per repository loopd fetches into, when it last ran `git gc --auto`
  there (at most once a day)
- `schedule.toml`: per loop, `handled_until`: every scheduled fire up to then was run,
  caught up or reported missed, so a restart never fires twice
- `inbox/`: triggers waiting for the daemon, one JSON file each, written by `loopd trigger`,
  `loopd escalations resolve --retry` and the daemon from the git hooks' records
  (`hook-PID-N.hook`: what moved, as the hooks saw it; a record goes once it is made into
  triggers). `inbox/bad/` keeps files that were not valid triggers. `inbox/.seen/` holds
  the hooks' markers: one push (ref, commit) triggers a loop once
- `deliveries.log`: the webhook deliveries `[listen]` accepted in the last 24 hours (time,
  service, delivery id; and the sha256 of each body), so a replayed delivery is refused;
  written once the delivery's triggers are, so a delivery answered 503 (a full disk) is
  taken when its sender retries it
- `.space-probe`: written and removed at once, every second while `state/` is full, to
  see whether there is room again
- `hooks.log`: errors of the git hooks `loopd hooks install` wrote (a hook never fails git)
- `live/RUN_ID`: an empty marker per run without an outcome yet, so a restart finds the runs
  to resume or end
- `locks/LOOP.lock`: held by whoever runs the loop now (the daemon or `loopd once`);
  `locks/quota.lock`: taken while `quota.toml` or `logins.toml` is written;
  `locks/landing-KEY.lock`: held by whoever lands a run on that target now (one landing at
  a time per target), `locks/landing-KEY.queue.lock` while its queue file is written
- `web-token`: the console's login token (`loopd web`, made on its first start, 0600);
  `loopd web --url` prints the address with it. Delete it and restart `loopd web` to change it
- `loopd.lock`: held by the daemon of this home; one daemon per home
- `home-id`: this home's id, made on first use; rules exported from this home name it as
  their source (`loopd rules export`)
- `paused/LOOP`: the loop is paused (`loopd pause` / `loopd resume`); its triggers are
  recorded and wait
- `control/cancel-RUN_ID`: `loopd cancel` asked to stop that run; removed when it ended.
  `control/reload-TOKEN`: `loopd reload` asked the daemon to read its files again; removed
  as it does
- `deferred/RUN_ID-N.toml`: a lesson (post-mortem) waiting for the model at `[verifier]`,
  retried later
- `cache/trigger-matches.json`: the rule evaluator's cached model answers (`loopd rules
  match`, `loopd replay`); safe to delete
- `quota.toml`: per agent profile, when the usage limit it ran into resets; runs parked on
  it wait until then
- `logins.toml`: per agent profile whose provider refused its login, the run that found it
  and its escalation; that profile's runs wait until `loopd check` finds the login working
- `land-holds.toml`: loops whose landings people reverted `revert_limit` times in 7 days,
  held at `land = "branch"` until their escalation is resolved (`loopd escalations
  resolve ID`); your loop files are not changed
- `budget.toml`: per token budget (the home's, a loop's), the last day its exhaustion was
  announced, so it is announced once a day
- `ref-ledger.jsonl`: every ref loopd itself moved in your repositories (run branches,
  kept commits, pruning, landing), one JSON line each, kept 7 days: a move the agent made
  is then told apart from loopd's

## With the Temporal engine

- `engine.key`: this home's secret for its runs' tokens; never sent anywhere, keep it
  private
- `worker.lock`: held by the worker of this home (`loopd worker`); one worker per home
- `inbox.lock`: held by the one process that forwards `inbox/` to the engine (`loopd run`
  before a `loopd worker` on the same home), so each trigger file is sent once
- `worker-live/RUN_ID`: an attempt a worker runs now; a worker that restarts ends what it
  left running
- `worker-events.jsonl`: what the worker did on this machine (`worker-events-N.jsonl` once
  rotated)

- `README.md`: this page. loopd keeps it current while it is loopd's own (its last line
  says so); once you edit it, it is yours and loopd leaves it alone. Delete it to get
  loopd's current page back

Deleting `state/` forgets everything above (runs, escalations, the queue); loopd makes it
again. Your loops, rules and repositories are outside it, and so are the run trees (under
`[limits] worktrees`, by default `~/.cache/loopd/worktrees`; each run's agent gets a private
HOME there, removed with the run) and the embedded example's repository
(`~/.cache/loopd/example`).
"""

# The last line of loopd's page: a digest of the text above it.
MARK = "<!-- written by loopd; kept current until edited: "
# loopd's pages from before the digest line (their whole text's SHA-256): still loopd's own.
EARLIER = {
    "814f44b2bc1f7744355905c0cc9b3a2f903828879c948cd58ed76e2d9a81e76d",
    "b34c8d0dce2a31012c2cf0309b8b3a4b74cab28ba8083dc08f24622c583b89b3",
}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stamped(text: str) -> str:
    """`text` as loopd writes it: with its digest line."""
    return f"{text}\n{MARK}{_digest(text)[:16]} -->\n"


def is_loopds(page: str) -> bool:
    """Whether `page` is a page loopd wrote and nobody edited since (of any version)."""
    if _digest(page) in EARLIER:
        return True
    body, sep, last = page.rstrip("\n").rpartition("\n")
    if not sep or not last.startswith(MARK) or not last.endswith(" -->"):
        return False
    return last[len(MARK) : -len(" -->")] == _digest(body)[:16]


def write_state_readme(state_dir: Path) -> Path | None:
    """Write `state/README.md` when there is none or it is an older page of loopd's own; the
    path written, or None (current, or a person's)."""
    path = state_dir / "README.md"
    page = stamped(README)
    try:
        current = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        current = None
    except (OSError, UnicodeDecodeError):
        return None  # not loopd's to touch
    if current == page or (current is not None and not is_loopds(current)):
        return None
    write_atomic(path, page)
    return path

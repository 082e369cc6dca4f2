"""`state/README.md`: what each file and folder of `state/` is, for the person reading it.

`loopd init` writes it, and `loopd run` writes it when it is missing. A person may delete or
edit it; loopd only writes it where there is none.
"""

from __future__ import annotations

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
- `progress/LOOP.md`: the loop's handoff notes, rebuilt after each run from the records
  (what changed, what still fails, what is open); the next run's prompt starts from them
- `reports/report-TIME.md`: what `loopd report` printed, kept as Markdown

## Runs

- `runs/RUN_ID/run.toml`: the run's record: loop, task, `[trigger]` (kind, reason, ref,
  merged triggers), started, finished, `outcome` and `reason`, `cause`, branch, tokens,
  cost, rules fired, `land`, `target`, `landed` and `landed_as` (where its work went),
  and `[[attempts]]` (exit code, nudges, stalls, checks passed, score, verdict, feedback,
  violations)
- `runs/RUN_ID/attempt-N/`: one attempt: one agent session with its nudges, then loopd's
  checks and the critic
- `attempt-N/prompt.md`: byte for byte what the agent received
- `attempt-N/transcript.jsonl`: the agent's stream, normalized, one JSON object a line
  (`ts`, `stream`, `type`: text, tool_call, tool_result, usage, final, error, raw; loopd's
  own lines have `stream = "loopd"`: process started and exited, stall, nudge); capped by
  `transcript_cap` with a `truncated` marker. `loopd logs RUN_ID` prints it as text
- `attempt-N/diff.patch`: what loopd committed of the attempt, as a patch (capped at 20 MB;
  secrets redacted). `loopd show RUN_ID --diff` prints it
- `attempt-N/diffstat.json`: the files the attempt changed with +/- counts
- `attempt-N/checks.log`: each `done_when` command, its exit code and its output, as loopd
  ran it after the attempt
- `attempt-N/checks-failed.txt`: the tail of the checks that failed (empty when they
  passed): what the next attempt's prompt shows under `# What failed last time`
- `attempt-N/verdict.toml`: the critic's judgement: score, verdict, unsupported claims,
  feedback (or "not judged by a model")
- `runs/RUN_ID/setup.log`: the output of the loop's `setup` commands, run in the tree before
  the first attempt
- `runs/RUN_ID/done-check.log`: `done_when` as it ran on the commit the run starts from
  (`skip_if_done`); all passing ends the run `skipped`
- `runs/RUN_ID/land.log`, `land-checks.log`, `land-setup.log`, `pr-body.md`: landing a
  succeeded run (`land`): the push and `pr_command`, setup and the checks on a merge with
  the target, the pull request's body
- `runs/RUN_ID/pruned.toml`: written when `retain_days` pruned the run's attempt folders and
  branch; run.toml stays

## The daemon's working files (leave them to loopd)

- `events.jsonl`: the audit log, one JSON object a line (`ts`, `type`, `loop`, `run`, ...):
  every trigger, run, attempt, check, verdict, rule change, escalation, notification. Past
  `events_rotate` it is renamed `events-N.jsonl` (N counts up) and a new one starts
- `queue.toml`: runs waiting to start, each with its RUN_ID and trigger (kept across
  restarts), and `taken`: inbox files the queue accounts for. `queue.unreadable.toml` is one
  loopd could not read, set aside
- `schedule.toml`: per loop, `handled_until`: every scheduled fire up to then was run,
  caught up or reported missed, so a restart never fires twice
- `inbox/`: triggers waiting for the daemon, one JSON file each, written by `loopd trigger`,
  `loopd escalations resolve --retry` and the git hooks. `inbox/bad/` keeps files that were
  not valid triggers. `inbox/.seen/` holds the hooks' markers: one push (ref, commit)
  triggers a loop once
- `live/RUN_ID`: an empty marker per run without an outcome yet, so a restart finds the runs
  to resume or end
- `locks/LOOP.lock`: held by whoever runs the loop now (the daemon or `loopd once`)
- `loopd.lock`: held by the daemon of this home; one daemon per home
- `paused/LOOP`: the loop is paused (`loopd pause` / `loopd resume`); its triggers are
  recorded and wait
- `control/cancel-RUN_ID`: `loopd cancel` asked to stop that run; removed when it ended
- `deferred/RUN_ID-N.toml`: a lesson (post-mortem) waiting for the model at `[verifier]`,
  retried later
- `cache/trigger-matches.json`: the rule evaluator's cached model answers (`loopd rules
  match`); safe to delete
- `agent-homes/PROFILE/`: the private HOME of an agent profile on a local endpoint (its
  config and sessions)

- `README.md`: this page; loopd writes it where there is none

Deleting `state/` forgets everything above (runs, escalations, the queue); loopd makes it
again. Your loops, rules and repositories are outside it, and so are the run trees (under
`[limits] worktrees`, by default `~/.cache/loopd/worktrees`) and the embedded example's
repository (`~/.cache/loopd/example`).
"""


def write_state_readme(state_dir: Path) -> Path | None:
    """Write `state/README.md` when there is none; the path written, or None."""
    path = state_dir / "README.md"
    if path.exists():
        return None
    write_atomic(path, README)
    return path

"""`/metrics`: the daemon's counters and gauges for Prometheus, through prometheus_client.

Counters follow the event log as it is written (an observer of `EventLog`): runs by loop and
outcome, attempts, nudges, judge calls, tokens and cost, webhook deliveries; they count from the
daemon's start, as Prometheus counters do. Gauges are read at each scrape: queue depth,
parked runs, open escalations, the rule library by status and kind, the heartbeat's age.

A `loopd worker` counts its own log the same way (`per_attempt`): it sees no run start or
finish, so tokens and cost count as its attempts finish, and the trigger-to-start latency is
taken at a run's first attempt; it has no webhooks and no rule library.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.rules.library import RuleLibrary
from daemon.rules.rulefile import Status
from daemon.state.eventtypes import Event
from daemon.state.store import StateStore

# Trigger received to run started, in seconds: webhooks aim under 0.2 s, schedules wait longer.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
RULE_STATUSES: tuple[Status, ...] = ("trial", "active", "rejected", "retired")
MAX_STARTS = 100_000  # runs started and not scraped yet, kept for their latency
# Attempts whose checks ran and whose verdict has not come yet. Failing checks bring no
# verdict, so without a bound one entry per failing attempt stayed for the daemon's life.
MAX_CHECKED = 1_000


class Metrics:
    """Counts events as they are written; builds the exposition on a scrape."""

    def __init__(
        self,
        store: StateStore,
        rules_dir: Path | None,
        gauges: Callable[[], dict[str, float]],
        per_attempt: bool = False,
    ) -> None:
        from prometheus_client import CollectorRegistry, Histogram

        self.store = store
        # Its parse cache keeps a scrape cheap; a worker has none to count.
        self.library = RuleLibrary(rules_dir) if rules_dir is not None else None
        self.gauges = gauges
        self.per_attempt = per_attempt
        self._lock = threading.Lock()
        # Sums, not only counts: the cost is in dollars.
        self.counts: dict[str, defaultdict[tuple[str, ...], float]] = {
            "runs": defaultdict(float),
            "attempts": defaultdict(float),
            "nudges": defaultdict(float),
            "judge": defaultdict(float),
            "tokens": defaultdict(float),
            "cost": defaultdict(float),
        }
        self.webhooks: Callable[[], Counter[tuple[str, str]]] | None = None  # the daemon's desk
        self.registry = CollectorRegistry(auto_describe=False)
        # Runs started, as (run, the event's time): their trigger's time is read from their
        # records at the scrape, not on the run's thread as it starts (the record may still
        # be on its way to the disk then). First in the registry, so that a scrape takes
        # them into the latency histogram before collecting it.
        self._starts: list[tuple[str, str]] = []
        self.registry.register(_BeforeScrape(self._take_starts))
        self.latency = Histogram(
            "loopd_trigger_to_start_seconds",
            "Seconds from a trigger's time to its run's "
            + ("first attempt here." if per_attempt else "start."),
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.judge_seconds = Histogram(
            "loopd_judge_seconds",
            "Seconds from an attempt's checks to the critic's verdict (evidence and the call).",
            buckets=(0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0),
            registry=self.registry,
        )
        self._checked: dict[tuple[str, int], datetime] = {}  # (run, attempt) -> checks' time
        self.registry.register(self)

    # the event log's observer --------------------------------------------------------------
    def observe(self, event: dict[str, Any]) -> None:
        kind, loop = event.get("type"), event.get("loop") or ""
        with self._lock:
            if kind == Event.RUN_FINISHED:
                self.counts["runs"][(loop, str(event.get("outcome") or ""))] += 1
                tokens = event.get("tokens")
                if isinstance(tokens, int):
                    self.counts["tokens"][(loop,)] += tokens
            elif kind == Event.ATTEMPT_STARTED:
                self.counts["attempts"][(loop,)] += 1
            elif kind == Event.NUDGE:
                self.counts["nudges"][(loop,)] += 1
            elif kind == Event.CHECKS and event.get("run"):
                key = (event["run"], int(event.get("attempt") or 0))
                self._checked[key] = datetime.fromisoformat(event["ts"])
                while len(self._checked) > MAX_CHECKED:
                    del self._checked[next(iter(self._checked))]  # the oldest
            elif kind == Event.VERDICT:
                checked = self._checked.pop(
                    (event.get("run") or "", int(event.get("attempt") or 0)), None
                )
                if event.get("judged"):
                    # A closed vocabulary: the verdict's text is the model's (the agent can
                    # steer it), so a label of it would publish it and grow without bound.
                    verdict = "pass" if event.get("passed") else "fail"
                    self.counts["judge"][(loop, verdict)] += 1
                    if checked is not None:
                        seconds = (datetime.fromisoformat(event["ts"]) - checked).total_seconds()
                        self.judge_seconds.observe(max(0.0, seconds))
        if not event.get("run"):
            return
        if self.per_attempt:
            if kind == Event.ATTEMPT_STARTED and event.get("attempt") == 1:
                self._started(event)
            elif kind == Event.ATTEMPT_FINISHED:
                self._attempt_spent(event)
        elif kind == Event.RUN_STARTED:
            self._started(event)
        elif kind == Event.RUN_FINISHED:
            self._cost(event)

    def _attempt_spent(self, event: dict[str, Any]) -> None:
        """A worker's finished attempt: its tokens and cost, from the worker's record."""
        try:
            run = self.store.load_run(event["run"])
        except (OSError, ValueError):
            return
        for attempt in run.attempts:
            if attempt.n == event.get("attempt"):
                with self._lock:
                    self.counts["tokens"][(run.loop,)] += attempt.tokens
                    self.counts["cost"][(run.loop,)] += attempt.cost_usd

    def _cost(self, event: dict[str, Any]) -> None:
        """What the finished run cost, from its record (the event carries its tokens only)."""
        try:
            run = self.store.load_run(event["run"])
        except (OSError, ValueError):
            return
        with self._lock:
            self.counts["cost"][(run.loop,)] += run.cost_usd

    def _started(self, event: dict[str, Any]) -> None:
        """A run started: its trigger-to-start latency is taken at the next scrape."""
        with self._lock:
            self._starts.append((event["run"], event["ts"]))
            if len(self._starts) > MAX_STARTS:
                del self._starts[: len(self._starts) - MAX_STARTS]

    def _take_starts(self) -> None:
        """The trigger-to-start latency of the runs started since the last scrape, from their
        records (their trigger's time); a record not written yet waits for the next one."""
        with self._lock:
            starts, self._starts = self._starts, []
        waiting = []
        for run_id, ts in starts:
            try:
                run = self.store.load_run(run_id)
            except FileNotFoundError:
                waiting.append((run_id, ts))
                continue
            except (OSError, ValueError):
                continue
            if run.trigger.ts is None:
                continue
            seconds = (datetime.fromisoformat(ts) - run.trigger.ts).total_seconds()
            if seconds >= 0:
                self.latency.labels(kind=run.trigger.kind).observe(seconds)
        with self._lock:
            self._starts[:0] = waiting

    # the scrape ----------------------------------------------------------------------------
    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        def counter(name: str, text: str, labels: list[str], key: str) -> CounterMetricFamily:
            family = CounterMetricFamily(name, text, labels=labels)
            for values, n in sorted(self.counts[key].items()):
                family.add_metric(list(values), n)
            return family

        with self._lock:
            if not self.per_attempt:
                yield counter(
                    "loopd_runs", "Runs finished, by loop and outcome.", ["loop", "outcome"],
                    "runs",
                )  # fmt: skip
            yield counter("loopd_attempts", "Agent attempts started.", ["loop"], "attempts")
            yield counter("loopd_nudges", "Nudges sent to stalled agents.", ["loop"], "nudges")
            yield counter(
                "loopd_judge_calls",
                "Attempts judged by the critic, by loop and pass or fail.",
                ["loop", "verdict"],
                "judge",
            )
            what = "attempts" if self.per_attempt else "runs"
            yield counter("loopd_tokens", f"Agent tokens of finished {what}.", ["loop"], "tokens")
            yield counter("loopd_cost_usd", f"What finished {what} cost, in USD.", ["loop"], "cost")
        if self.webhooks is not None:
            hooks = CounterMetricFamily(
                "loopd_webhook_deliveries", "Webhook deliveries by service and result.",
                labels=["kind", "result"],
            )  # fmt: skip
            for (kind, result), n in sorted(self.webhooks().items()):
                hooks.add_metric([kind, result], n)
            yield hooks
        for name, value in sorted(self.gauges().items()):
            yield GaugeMetricFamily(f"loopd_{name}", _GAUGE_HELP.get(name, name), value=value)
        if self.library is not None:
            yield _rules(self.library)


class _BeforeScrape:
    """A collector that collects nothing: it calls `before` when a scrape reaches it."""

    def __init__(self, before: Callable[[], None]) -> None:
        self.before = before

    def collect(self) -> Iterator[Any]:
        self.before()
        return iter(())


def _rules(library: RuleLibrary) -> Any:
    """The rule library by status and kind, read at the scrape."""
    from prometheus_client.core import GaugeMetricFamily

    rules = GaugeMetricFamily(
        "loopd_rules", "Rule files by status and kind.", labels=["status", "kind"]
    )
    counted: Counter[tuple[str, str]] = Counter()
    try:
        for stored in library.rules(RULE_STATUSES):
            counted[(stored.status, stored.rule.kind)] += 1
    except OSError:
        pass  # no rules folder: nothing to count
    for (status, kind), n in sorted(counted.items()):
        rules.add_metric([status, kind], n)
    return rules


_GAUGE_HELP = {
    "queue_depth": "Runs waiting to start.",
    "running_runs": "Runs working now (on a worker: its attempts).",
    "parked_runs": "Runs parked on an agent's usage limit.",
    "open_escalations": "Escalations waiting for a person.",
    "heartbeat_age_seconds": "Seconds since the daemon's last tick.",
}

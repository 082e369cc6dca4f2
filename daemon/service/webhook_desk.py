"""A webhook delivery judged: signed, not replayed, for a known repository and a watched ref.

Synchronous and free of HTTP: the listener hands it the path's service, the headers, the
body and the source address, and answers with the status it returns. Every ignored delivery
is an event, and so is every refusal up to a sample (daemon/service/refusals.py: what a
client sent is capped in events and answers, and a flood writes a bounded number of events);
an accepted push goes to the RemoteFeed (its fetch and its triggers, in the inbox before the
202 on the local engine).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from daemon.config import Loop, RemoteConfig
from daemon.git.refname import branch_problem
from daemon.scheduling import webhooks
from daemon.scheduling.remotes import RemoteFeed, RemotePush, watching
from daemon.service.refusals import RefusalSampler, shown
from daemon.state.deliveries import Deliveries
from daemon.state.eventtypes import Event
from daemon.state.space import StateSpace, no_space

EventSink = Callable[..., None]


@dataclass
class Answer:
    status: int
    text: str


def accepted_text(loops: list[Loop], named: dict[str, str]) -> str:
    """A 202's text: "accepted", then each loop's trigger (its inbox file: the run that takes
    it lists it under `[trigger] inbox`), or that the triggers follow the fetch."""
    if not named:
        which = ", ".join(loop.name for loop in loops)
        return f"accepted: loop(s) {which}; their triggers follow the fetch\n"
    each = "; ".join(f"loop {loop}: trigger {name}" for loop, name in named.items())
    return f"accepted: {each} (its run lists it under [trigger] inbox: `loopd runs LOOP`)\n"


class RateLimit:
    """A token bucket per source address: `per_minute` deliveries, refilled evenly."""

    def __init__(self, per_minute: int, monotonic: Callable[[], float]) -> None:
        self.per_minute = per_minute
        self.monotonic = monotonic
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, at)
        self._lock = threading.Lock()

    def allow(self, address: str) -> bool:
        now = self.monotonic()
        rate = self.per_minute / 60.0
        with self._lock:
            tokens, at = self._buckets.get(address, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - at) * rate)
            allowed = tokens >= 1.0
            self._buckets[address] = (tokens - 1.0 if allowed else tokens, now)
            if len(self._buckets) > 10_000:  # many addresses: forget the full buckets
                full = [a for a, (t, _) in self._buckets.items() if t >= self.per_minute - 1]
                for address_ in full:
                    del self._buckets[address_]
        return allowed


class WebhookDesk:
    """Judges deliveries; counts them by service and result for /metrics."""

    def __init__(
        self,
        loops: Callable[[], dict[str, Loop]],
        remotes: Callable[[], dict[str, RemoteConfig]],
        deliveries: Deliveries,
        feed: RemoteFeed,
        clock: Callable[[], datetime],
        event: EventSink,
        environ: Mapping[str, str] = os.environ,
        monotonic: Callable[[], float] = time.monotonic,
        space: StateSpace | None = None,
    ) -> None:
        self.loops = loops
        self.space = space  # state/'s room: a delivery it has none for is answered 503
        self.remotes = remotes
        self.deliveries = deliveries
        self.feed = feed
        self.clock = clock
        self.event = event
        self.environ = environ
        self.counts: Counter[tuple[str, str]] = Counter()  # (kind, result) -> deliveries
        self.sampler = RefusalSampler(monotonic, clock)
        self._lock = threading.Lock()

    def refuse(self, kind: str, status: int, why: str, source: str, **more: str) -> Answer:
        """Count a refused delivery, record it when the sample takes it, and answer it.

        `why` is loopd's own text with any client string in it already `shown`; `source` and
        `more` (a delivery id, a remote) are capped here."""
        self._count(kind, "refused")
        write, over = self.sampler.admit(kind, status)
        self._write_counted(over)
        if write:
            capped = {k: shown(v) for k, v in more.items()}
            try:
                self.event(
                    Event.WEBHOOK_REFUSED, kind=kind, status=status, why=why,
                    source=shown(source), **capped,
                )  # fmt: skip
            except OSError as exc:  # a refusal is answered whatever the disk says
                if not no_space(exc):
                    raise
                if self.space is not None:
                    self.space.hit(self.clock(), "the event webhook_refused")
        return Answer(status, why + "\n")

    def flush(self) -> None:
        """Write the counts of the refusal windows that are over (the daemon's tick)."""
        self._write_counted(self.sampler.due())

    def _write_counted(self, over: list[Any]) -> None:
        for counted in over:
            self.event(
                Event.WEBHOOK_REFUSALS_COUNTED, kind=counted.kind, status=counted.status,
                count=counted.count, since=counted.since.isoformat(),
            )  # fmt: skip

    def _count(self, kind: str, result: str) -> None:
        with self._lock:
            self.counts[(kind, result)] += 1

    def handle(self, kind: str, headers: Mapping[str, str], body: bytes, source: str) -> Answer:
        """Judge one delivery (headers lower-cased) and say what to answer."""
        received = self.clock()
        delivery = webhooks.header(headers, kind, webhooks.DELIVERY)[:200]
        try:
            payload, repository = webhooks.parse(kind, body)
        except (ValueError, RecursionError):  # RecursionError: nested too deep
            return self.refuse(kind, 400, "the body is not JSON", source, delivery=delivery)
        if not isinstance(payload, dict):
            why = "the body is not a JSON object"
            return self.refuse(kind, 400, why, source, delivery=delivery)
        found = [
            (name, remote)
            for name, remote in sorted(self.remotes().items())
            if remote.kind == kind and remote.repository.lower() == repository.lower()
        ]
        if not found:
            why = f"no [remotes.NAME] of kind {kind!r} has repository {shown(repository)!r}"
            return self.refuse(kind, 404, why, source, delivery=delivery)
        given = webhooks.header(headers, kind, webhooks.SIGNATURE)
        if not given:
            return self.refuse(kind, 401, "unsigned delivery", source, delivery=delivery)
        name, remote = next(
            ((n, r) for n, r in found if webhooks.verified(kind, self._secret(r), given, body)),
            (None, None),
        )
        if name is None or remote is None:
            unset = [n for n, r in found if not self._secret(r)]
            why = "wrong signature" + (
                f" (secret_env of [remotes.{unset[0]}] is unset or empty)" if unset else ""
            )
            return self.refuse(kind, 403, why, source, delivery=delivery)
        if not delivery:
            why = "no delivery id header: a replay could not be told apart"
            return self.refuse(kind, 400, why, source, remote=name)
        if self.space is not None and self.space.full:
            # Nothing it leads to could be written: the sender retries a 503.
            return self.full(kind, source, remote=name, delivery=delivery)
        digest = hashlib.sha256(body).hexdigest()
        keys = self.deliveries.claim(kind, delivery, received, digest)
        if not keys:
            return self.refuse(
                kind, 409, "replayed delivery", source, remote=name, delivery=delivery
            )
        try:
            answer = self._judge(kind, name, delivery, headers, payload, source, received)
        except BaseException as exc:
            # Not recorded: the delivery is forgotten, so that the sender's retry is taken.
            self.deliveries.release(keys)
            if no_space(exc) and self.space is not None:
                self.space.hit(self.clock(), f"webhook delivery {shown(delivery)}")
                return self.full(kind, source, remote=name, delivery=delivery)
            raise
        try:
            self.deliveries.keep(keys)
        except OSError as exc:  # its triggers are written: a replay is refused until a restart
            if no_space(exc) and self.space is not None:
                self.space.hit(self.clock(), "state/deliveries.log")
        return answer

    def full(self, kind: str, source: str, **more: str) -> Answer:
        """A delivery `state/` has no room for: 503, so that the sender sends it again."""
        why = "state/ is full: loopd cannot record this delivery now; send it again later"
        return self.refuse(kind, 503, why, source, **more)

    def _judge(
        self,
        kind: str,
        name: str,
        delivery: str,
        headers: Mapping[str, str],
        payload: dict[str, Any],
        source: str,
        received: datetime,
    ) -> Answer:
        """A signed, first-time delivery of remote `name`: ignored, refused or accepted."""
        event_name = webhooks.header(headers, kind, webhooks.EVENT)
        if event_name != webhooks.PUSH_EVENTS[kind]:
            why = f"event {shown(event_name)!r} is not a push"
            return self._ignored(kind, name, shown(delivery), why)
        push = webhooks.push_of(kind, payload)
        if not push.ref.startswith("refs/heads/"):
            why = f"ref {shown(push.ref)!r} is not a branch"
            return self._ignored(kind, name, shown(delivery), why, shown(push.ref))
        branch = push.ref.removeprefix("refs/heads/")
        problem = branch_problem(branch)
        if problem:
            # Signed, yet no service sends it: git itself refuses such a branch.
            why = f"ref {shown(push.ref)!r} is not a valid branch name: {problem}"
            return self.refuse(kind, 400, why, source, remote=name, delivery=delivery)
        if not push.after or push.after == webhooks.ZERO:
            return self._ignored(kind, name, delivery, "the branch was deleted", push.ref)
        loops = watching(self.loops(), name, branch)
        if not loops:
            return self._ignored(kind, name, delivery, "no loop watches this ref", push.ref)
        return self._accept(kind, name, delivery, push, loops, received)

    def _accept(
        self,
        kind: str,
        name: str,
        delivery: str,
        push: webhooks.Push,
        loops: list[Loop],
        received: datetime,
    ) -> Answer:
        """A push some loops watch: counted, its event written, handed to the remote feed."""
        branch = push.ref.removeprefix("refs/heads/")
        self._count(kind, "accepted")
        self.event(
            Event.WEBHOOK_ACCEPTED,
            kind=kind,
            remote=name,
            delivery=delivery,
            ref=push.ref,
            old=push.before,
            new=push.after,
            loops=[loop.name for loop in loops],
        )
        named = self.feed.accept(
            RemotePush(
                remote=name,
                branch=branch,
                before=push.before,
                after=push.after,
                source="webhook",
                received=received,
                delivery=delivery,
            ),
            loops,
        )
        return Answer(202, accepted_text(loops, named))

    def _ignored(self, kind: str, remote: str, delivery: str, why: str, ref: str = "") -> Answer:
        self._count(kind, "ignored")
        self.event(
            Event.WEBHOOK_IGNORED, kind=kind, remote=remote, delivery=delivery, ref=ref, why=why
        )
        return Answer(200, f"ignored: {why}\n")

    def _secret(self, remote: RemoteConfig) -> str:
        return self.environ.get(remote.secret_env, "") if remote.secret_env else ""

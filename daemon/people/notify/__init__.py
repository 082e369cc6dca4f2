"""Notifications through `[notify]`: a command, a webhook and apprise URLs, sent off the run's
thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.clock import utc_now
from daemon.config import NotifyConfig
from daemon.people.escalation_file import Escalation
from daemon.people.notify.apprise_urls import AppriseNotifier
from daemon.people.notify.base import Notifier, NotifyError
from daemon.people.notify.command import CommandNotifier
from daemon.people.notify.messages import (
    attempt_failed_message,
    daemon_failure_message,
    escalation_message,
    outcome_message,
    question_message,
    quota_wait_message,
    repeat_digest_message,
    state_full_message,
    verifier_down_message,
    verifier_up_message,
)
from daemon.people.notify.webhook import WebhookNotifier
from daemon.plugins import NOTIFIERS, PluginError, load
from daemon.redact import redact, redact_value
from daemon.retry import WEBHOOK, RetryPolicy
from daemon.state.events import EventLog, iso
from daemon.state.eventtypes import Event
from daemon.state.records import ESCALATING_OUTCOMES, AttemptRecord, RunRecord

__all__ = [
    "CommandNotifier",
    "Notifications",
    "Notifier",
    "NotifyError",
    "WebhookNotifier",
    "notifiers_from_config",
    "plugin_notifier",
]


def notifiers_from_config(
    config: NotifyConfig,
    sleep: Callable[[float], object] = time.sleep,
    retry: RetryPolicy = WEBHOOK,
) -> list[Notifier]:
    """The notifiers `[notify]` names, command first; `sleep` waits between a webhook's
    `retry` tries. NotifyError: one that cannot be made (apprise missing, a plugin)."""
    out: list[Notifier] = []
    if config.command:
        out.append(CommandNotifier(config.command))
    if config.webhook:
        out.append(WebhookNotifier(config.webhook, retry=retry, sleep=sleep))
    if config.urls:
        out.extend(AppriseNotifier(url) for url in config.urls)
    for name, options in config.plugins.items():
        out.append(plugin_notifier(name, options))
    return out


def plugin_notifier(name: str, options: dict[str, Any]) -> Notifier:
    """The notifier plugin `name` made from its options; NotifyError says why it cannot be."""
    try:
        cls = load(NOTIFIERS, name)
    except PluginError as exc:
        raise NotifyError(f"loopd.toml: [notify.plugins.{name}]: {exc}") from None
    notifier = cls.from_options(dict(options))  # type: ignore[attr-defined] # load() checked the base
    if not isinstance(notifier, Notifier):
        raise NotifyError(
            f"loopd.toml: [notify.plugins.{name}]: {cls.__name__}.from_options gave "
            f"{type(notifier).__name__}, not a Notifier. Fix: return an instance of the class"
        )
    return notifier


class Notifications:
    """Sends each notification through every notifier, each in its own background thread.

    `notify` returns at once: a dead webhook costs a thread for its retries, never a run's
    time. Each failure is the event `notify_failed`; each delivery `notified`. `drain`, called
    when loopd is about to exit, cuts the waits between retries short.
    """

    def __init__(
        self,
        config: NotifyConfig,
        events: EventLog,
        notifiers: list[Notifier] | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.events = events
        self._exiting = threading.Event()  # set by drain(): retries stop waiting
        self.notifiers = (
            notifiers
            if notifiers is not None
            else notifiers_from_config(config, sleep=self._exiting.wait)
        )
        self._clock = clock  # failures happen later, on another thread
        self._pending: set[threading.Thread] = set()
        self._lock = threading.Lock()

    @property
    def configured(self) -> bool:
        return bool(self.notifiers)

    def notify(
        self, kind: str, message: str, payload: dict[str, Any], now: datetime
    ) -> list[threading.Thread]:
        """Send `message` through every notifier in the background; returns the threads."""
        message = redact(message)
        payload = redact_value({"kind": kind, **payload, "ts": iso(now)})
        threads = []
        for notifier in self.notifiers:
            thread = threading.Thread(
                target=self._deliver,
                args=(notifier, kind, message, payload, now),
                name=f"notify-{notifier.name}",
                daemon=True,  # a hung notifier must not keep loopd from exiting
            )
            with self._lock:
                self._pending.add(thread)
            thread.start()
            threads.append(thread)
        return threads

    def _deliver(
        self,
        notifier: Notifier,
        kind: str,
        message: str,
        payload: dict[str, Any],
        asked: datetime,
    ) -> None:
        loop, run = payload.get("loop"), payload.get("run")
        try:
            try:
                notifier.send(message, payload)
            except Exception as exc:  # noqa: BLE001 - any failure of a notifier is reported
                error = str(exc) if isinstance(exc, NotifyError) else f"{type(exc).__name__}: {exc}"
                self.events.append(
                    Event.NOTIFY_FAILED,
                    self._clock(),
                    loop=loop,
                    run=run,
                    kind=kind,
                    notifier=notifier.name,
                    error=redact(error),
                    asked=iso(asked),
                )
            else:
                self.events.append(
                    Event.NOTIFIED, self._clock(), loop=loop, run=run, kind=kind,
                    notifier=notifier.name,
                )  # fmt: skip
        except OSError:
            pass  # a full state/: the notification itself went out, or was tried
        finally:
            with self._lock:
                self._pending.discard(threading.current_thread())

    def drain(self, timeout: float) -> bool:
        """loopd is exiting: wait up to `timeout` seconds for notifications in flight.

        A webhook waiting to retry tries once more at once instead, so its failure is
        recorded before loopd exits. True when no notification is left in flight.
        """
        self._exiting.set()
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                pending = list(self._pending)
            if not pending:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            pending[0].join(left)

    # the kinds loopd sends ----------------------------------------------------------
    def escalated(self, run: RunRecord, path: Path, now: datetime) -> None:
        """Notify an escalation (always, whatever `notify_on` says)."""
        message, payload = escalation_message(run, path)
        self.notify("escalated", message, payload, now)

    def question(self, run: RunRecord, path: Path, question: str, now: datetime) -> None:
        """Notify an agent's question (always, like an escalation: a person must answer)."""
        message, payload = question_message(run, path, question)
        self.notify("question", message, payload, now)

    def escalation_repeated(self, meta: Escalation, path: Path, now: datetime) -> None:
        """Notify the daily digest of an open escalation's repeats (the caller says when)."""
        message, payload = repeat_digest_message(meta, path)
        self.notify("escalation-repeated", message, payload, now)

    def retry_not_run(self, loop: str, run_id: str, why: str, now: datetime) -> None:
        """Notify that an interrupted run's retry could not run (always: its work waits)."""
        message = (
            f"loopd: {loop}: the retry of interrupted run {run_id} could not run: {why}. "
            f"Its work so far is on its branch; `loopd show {run_id}` has it"
        )
        self.notify("retry-not-run", message, {"loop": loop, "run": run_id, "why": why}, now)

    def run_finished(self, run: RunRecord, notify_on: Sequence[str], now: datetime) -> None:
        """Notify a finished run when `notify_on` asks for its outcome (escalations excluded)."""
        if run.outcome in ESCALATING_OUTCOMES:
            return  # `escalated` sends those, once
        if run.outcome and run.outcome in notify_on:
            message, payload = outcome_message(run)
            self.notify(run.outcome, message, payload, now)

    def attempt_failed(
        self, run: RunRecord, attempt: AttemptRecord, notify_on: Sequence[str], now: datetime
    ) -> None:
        """Notify a failed attempt when `notify_on` holds "failed-attempt"."""
        if "failed-attempt" in notify_on:
            message, payload = attempt_failed_message(run, attempt)
            self.notify("failed-attempt", message, payload, now)

    def quota_wait(self, run: RunRecord, now: datetime) -> None:
        """Notify a run parked on its agent's usage limit (once a park; `notify_on` "waiting")."""
        message, payload = quota_wait_message(run)
        self.notify("waiting", message, payload, now)

    def verifier_down(self, base_url: str, since: datetime, error: str, now: datetime) -> None:
        """Notify a verifier outage that has lasted past the notice time."""
        message, payload = verifier_down_message(base_url, since, error, now)
        self.notify("verifier-down", message, payload, now)

    def verifier_up(self, base_url: str, since: datetime, now: datetime) -> None:
        """Notify the end of an outage that was notified."""
        message, payload = verifier_up_message(base_url, since, now)
        self.notify("verifier-up", message, payload, now)

    def state_full(self, home: Path, what: str, now: datetime) -> None:
        """Notify that `state/` is full (always: nothing is recorded until there is room)."""
        message, payload = state_full_message(home, what)
        self.notify("state-full", message, payload, now)

    def daemon_failed(self, home: Path, error: str, now: datetime, wait: float = 10.0) -> None:
        """Notify that the daemon failed, and wait (bounded) since it is about to exit."""
        message, payload = daemon_failure_message(home, error)
        self.notify("daemon-failed", message, payload, now)
        self.drain(wait)

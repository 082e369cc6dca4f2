"""What holds a loop's new runs back: its agent profile's usage limit, and token budgets.

Budgets: `[limits] daily_tokens` counts every loop's tokens in the day of `[limits] timezone`
(default: this machine's zone); a loop's `daily_tokens` counts its own in the day of its
`timezone`. A spent budget holds new runs of its scope until the next day begins; a run in
progress finishes. Tokens count on the day their attempt finished (or now, while it runs);
agents that report no usage count nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from daemon.agents.registry import adapter_class
from daemon.clock import local_zone
from daemon.config import DaemonConfig, LoadedConfig, Loop
from daemon.scheduling.cron import parse_timezone
from daemon.state.holds import load_logins, load_quota
from daemon.state.store import StateStore

# How a refused login's hold begins (the engine's view tells it from a dated one by it).
LOGIN_HOLD = "the provider refused the login of agent profile"
LOOKBACK = timedelta(days=3)  # runs started this long ago may still spend today


@dataclass(frozen=True)
class Hold:
    """Why a loop's new runs wait, and until when."""

    why: str
    until: datetime | None  # None: a refused login, lifted by `loopd check`, not by a time
    kind: str  # "quota" | "budget" | "login"

    def wait_text(self) -> str:
        """How long new runs wait, for a sentence: "until TIME", or what lifts a login's."""
        if self.until is None:
            return "until `loopd check` finds the login working again"
        return f"until {self.until}"


@dataclass(frozen=True)
class Spend:
    """Tokens an attempt spent, when, for which loop."""

    loop: str
    at: datetime
    tokens: int


@dataclass(frozen=True)
class BudgetDay:
    """One scope's budget today."""

    scope: str  # "home" or "loop:NAME"
    day: str  # YYYY-MM-DD in the scope's zone
    tokens: int
    limit: int
    until: datetime  # the next day's start

    @property
    def exhausted(self) -> bool:
        return self.limit > 0 and self.tokens >= self.limit


def day_window(now: datetime, zone: tzinfo) -> tuple[datetime, datetime, str]:
    """Today in `zone`: its start, the next day's start (both aware), and its date."""
    local = now.astimezone(zone)
    start = datetime(local.year, local.month, local.day, tzinfo=zone)
    following = start.date() + timedelta(days=1)
    end = datetime(following.year, following.month, following.day, tzinfo=zone)
    return start, end, start.date().isoformat()


def recent_spends(store: StateStore, now: datetime) -> list[Spend]:
    """Tokens of attempts of runs started since LOOKBACK, and of every live run."""
    floor = (now - LOOKBACK).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    ids = {i for i in store.run_ids() if i[:16] >= floor} | set(store.live_runs())
    out = []
    for run_id in sorted(ids):
        try:
            run = store.load_run(run_id)
        except (OSError, ValueError):
            continue
        for attempt in run.attempts:
            if attempt.tokens:
                out.append(Spend(run.loop, attempt.finished or now, attempt.tokens))
    return out


def _spent(spends: Iterable[Spend], start: datetime, end: datetime, loop: str | None) -> int:
    return sum(s.tokens for s in spends if start <= s.at < end and (loop is None or s.loop == loop))


def home_zone(config: DaemonConfig) -> tzinfo:
    tz = config.limits.timezone
    return parse_timezone(tz) if tz else local_zone()


def budget_days(
    config: DaemonConfig, loops: Mapping[str, Loop], spends: list[Spend], now: datetime
) -> list[BudgetDay]:
    """Today's count of every budget that is set: the home's first, then each loop's."""
    out = []
    if config.limits.daily_tokens:
        start, end, day = day_window(now, home_zone(config))
        out.append(
            BudgetDay(
                "home", day, _spent(spends, start, end, None), config.limits.daily_tokens, end
            )
        )
    for name, loop in sorted(loops.items()):
        if loop.config.daily_tokens:
            start, end, day = day_window(now, parse_timezone(loop.config.timezone))
            tokens = _spent(spends, start, end, name)
            out.append(BudgetDay(f"loop:{name}", day, tokens, loop.config.daily_tokens, end))
    return out


def holds(
    store: StateStore,
    config: DaemonConfig,
    loops: Mapping[str, Loop],
    days: list[BudgetDay],
    now: datetime,
) -> dict[str, Hold]:
    """Each loop whose new runs wait now, and why (a refused login first, a usage limit,
    then budgets)."""
    quota = load_quota(store).profiles
    logins = load_logins(store).profiles
    home = next((d for d in days if d.scope == "home" and d.exhausted), None)
    out: dict[str, Hold] = {}
    for name, loop in loops.items():
        limit = quota.get(loop.config.agent)
        own = next((d for d in days if d.scope == f"loop:{name}" and d.exhausted), None)
        refused = logins.get(loop.config.agent)
        if refused is not None:
            why = (
                f"{LOGIN_HOLD} {loop.config.agent!r} "
                f"(run {refused.run}); log in again, then `loopd check`"
            )
            out[name] = Hold(why, None, "login")
        elif limit is not None and limit.resume_at > now:
            why = f"the usage limit of agent profile {loop.config.agent!r}"
            out[name] = Hold(why, limit.resume_at, "quota")
        elif home is not None:
            why = f"[limits] daily_tokens: {home.tokens} of {home.limit} tokens spent today"
            out[name] = Hold(why, home.until, "budget")
        elif own is not None:
            why = f"daily_tokens: {own.tokens} of {own.limit} tokens spent today"
            out[name] = Hold(why, own.until, "budget")
    return out


def loop_hold(store: StateStore, config: DaemonConfig, loop: Loop, now: datetime) -> Hold | None:
    """Whether `loop`'s new runs wait now (for `loopd once`, which has no daemon to ask)."""
    loops = {loop.name: loop}
    budgeted = config.limits.daily_tokens or loop.config.daily_tokens
    days = budget_days(config, loops, recent_spends(store, now) if budgeted else [], now)
    return holds(store, config, loops, days, now).get(loop.name)


def budget_warnings(loaded: LoadedConfig) -> list[str]:
    """Budgets that cannot hold anything: their loop's agent reports no token usage."""
    out = []
    home_budget = loaded.daemon.limits.daily_tokens
    for _, loop in sorted(loaded.loops.items()):
        profile = loaded.daemon.profile(loop.config.agent)
        if profile is None or not loop.config.enabled or adapter_class(profile.adapter).usage:
            continue
        why = (
            f"agent profile {loop.config.agent!r} (adapter {profile.adapter!r}) reports no "
            "token usage"
        )
        if loop.config.daily_tokens:
            out.append(
                f"{loop.path}: daily_tokens: {why}, so this loop's runs never count toward "
                "its budget and it never holds them; use an adapter that reports usage or "
                "remove daily_tokens"
            )
        if home_budget:
            out.append(
                f"{loop.path}: [limits] daily_tokens in loopd.toml does not count this loop's "
                f"runs: {why}"
            )
    return out

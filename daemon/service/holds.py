"""The daemon's view of what holds new runs: usage limits of agent profiles and spent token
budgets; it records `budget_exhausted` once a day per budget."""

from __future__ import annotations

from datetime import datetime

from daemon.runs.budget import BudgetDay, Hold, budget_days, holds, recent_spends
from daemon.service.context import Context
from daemon.state.eventtypes import Event
from daemon.state.holds import load_budget_marks, save_budget_marks
from daemon.state.records import BudgetStatus

RECOUNT_EVERY = 15.0  # seconds of the monotonic clock between counts of the tokens spent


class Holds:
    """Counts tokens now and then (and after a run ends), and says which loops wait."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._counted_at = float("-inf")
        self._days: list[BudgetDay] = []

    def recount(self) -> None:
        """A run ended: count again before the next run starts."""
        self._counted_at = float("-inf")

    def _budget_days(self, now: datetime) -> list[BudgetDay]:
        ctx = self.ctx
        config = ctx.config.daemon
        budgeted = config.limits.daily_tokens or any(
            loop.config.daily_tokens for loop in ctx.loops.values()
        )
        if not budgeted:
            self._days = []
            return self._days
        mono = ctx.monotonic()
        if mono - self._counted_at >= RECOUNT_EVERY or any(d.until <= now for d in self._days):
            spends = recent_spends(ctx.store, now)
            self._days = budget_days(config, ctx.loops, spends, now)
            self._counted_at = mono
            self._announce(now)
        return self._days

    def _announce(self, now: datetime) -> None:
        """`budget_exhausted`, once a day per budget (kept across restarts)."""
        spent = [d for d in self._days if d.exhausted]
        if not spent:
            return
        store = self.ctx.store
        marks = load_budget_marks(store)
        changed = False
        for day in spent:
            if marks.announced.get(day.scope) == day.day:
                continue
            marks.announced[day.scope] = day.day
            changed = True
            loop = day.scope.removeprefix("loop:") if day.scope.startswith("loop:") else None
            store.events.append(
                Event.BUDGET_EXHAUSTED,
                self.ctx.clock(),
                loop=loop,
                scope="home" if loop is None else "loop",
                day=day.day,
                tokens=day.tokens,
                limit=day.limit,
                until=day.until.isoformat(),
            )
        if changed:
            save_budget_marks(store, marks)

    def held(self, now: datetime) -> dict[str, Hold]:
        """Each loop whose new runs wait now, and why."""
        ctx = self.ctx
        return holds(ctx.store, ctx.config.daemon, ctx.loops, self._budget_days(now), now)

    def budget_status(self) -> BudgetStatus | None:
        """`[budget]` of status.toml: the home's budget today, when one is set."""
        home = next((d for d in self._days if d.scope == "home"), None)
        if home is None:
            return None
        return BudgetStatus(
            day=home.day,
            tokens=home.tokens,
            limit=home.limit,
            exhausted=home.exhausted,
            until=home.until,
        )

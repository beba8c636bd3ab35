"""Budgets (pure): what a tenant may spend per period, in GPU-hours and in money, over owned and rented GPUs alike.

Spend accrues from what ran: a job's GPU-hours on a node, priced at that node's price per GPU-hour (a cloud pool's
node: its instance type's price / its GPUs; an owned node: the admin's rate, CORRAL_OWNED_GPU_PRICE_PER_HOUR).
At 80% of either limit the tenant is warned (an alert, through the existing notifiers); at 100% its policy applies:
`notify` (only that), `no-burst` (its jobs start no new cloud node) or `hold` (its new jobs wait).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from corral.core.errors import ValidationError

PERIODS = ("month", "week", "day")
POLICIES = ("notify", "no-burst", "hold")
WARN_PCT = 80.0
MAX_LIMIT = 1e12


@dataclass(frozen=True, slots=True)
class Budget:
    """A tenant's budget. None: no limit of that kind (at least one is set)."""

    tenant: str
    period: str = "month"
    gpu_hours: float | None = None
    money: float | None = None
    policy: str = "notify"


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A budget against what its tenant spent this period. `used_pct`: the higher of the two (0 with no limit);
    `state`: ok | warning (>= 80%) | exceeded (>= 100%); `enforced`: the policy acts now (exceeded, not notify)."""

    budget: Budget
    period_start: datetime
    period_end: datetime
    gpu_hours_used: float
    money_used: float
    used_pct: float
    state: str

    @property
    def enforced(self) -> bool:
        return self.state == "exceeded" and self.budget.policy != "notify"


def check_budget(b: Budget) -> Budget:
    """Raise ValidationError naming the field."""
    if b.period not in PERIODS:
        raise ValidationError("period", f"{b.period!r}: one of {', '.join(PERIODS)}")
    if b.policy not in POLICIES:
        raise ValidationError("policy", f"{b.policy!r}: one of {', '.join(POLICIES)}")
    if b.gpu_hours is None and b.money is None:
        raise ValidationError("gpu_hours", "a budget limits GPU-hours, money or both: give at least one")
    for name, value in (("gpu_hours", b.gpu_hours), ("money", b.money)):
        if value is not None and not (math.isfinite(value) and 0 <= value <= MAX_LIMIT):
            raise ValidationError(name, f"must be a number in 0..{MAX_LIMIT:g}")
    return b


def compute_period(period: str, now: datetime) -> tuple[datetime, datetime]:
    """The period `now` is in (UTC): a calendar month, an ISO week from Monday, or a day."""
    now = now.astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day, day + timedelta(days=1)
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    start = day.replace(day=1)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start, end


def _pct(used: float, limit: float | None) -> float:
    if limit is None:
        return 0.0
    if limit <= 0:
        return 100.0 if used > 0 or limit == 0 else 0.0
    return 100.0 * used / limit


def compute_status(b: Budget, gpu_hours_used: float, money_used: float, now: datetime) -> BudgetStatus:
    start, end = compute_period(b.period, now)
    pct = max(_pct(gpu_hours_used, b.gpu_hours), _pct(money_used, b.money))
    state = "exceeded" if pct >= 100.0 else "warning" if pct >= WARN_PCT else "ok"
    return BudgetStatus(b, start, end, gpu_hours_used, money_used, pct, state)


def describe_hold(s: BudgetStatus) -> str:
    """The sentence a held job shows."""
    what = []
    if s.budget.gpu_hours is not None:
        what.append(f"{s.gpu_hours_used:.1f} of {s.budget.gpu_hours:g} GPU-hours")
    if s.budget.money is not None:
        what.append(f"{s.money_used:.2f} of {s.budget.money:g} money")
    return (
        f"its tenant {s.budget.tenant} has used its {s.budget.period}ly budget ({', '.join(what)}); its policy "
        f"holds new jobs until {s.period_end:%Y-%m-%d %H:%M} UTC or a larger budget"
    )


__all__ = [
    "PERIODS",
    "POLICIES",
    "WARN_PCT",
    "Budget",
    "BudgetStatus",
    "check_budget",
    "compute_period",
    "compute_status",
    "describe_hold",
]

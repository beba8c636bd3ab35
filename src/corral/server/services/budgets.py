"""Budgets: set and read them (admins set; a tenant's members read their own), and the tracker that measures each
tenant's spend this period and says which tenants' budgets act now (no-burst: the autoscaler; hold: the scheduler;
at 80% and 100%: an alert through the existing notifiers)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from corral.core.budgets import Budget, BudgetStatus, check_budget, compute_period, compute_status
from corral.core.errors import NotFoundError, ValidationError
from corral.core.pools import CLUSTER_KINDS, POOL_LABEL, SOURCE_LABEL, STATIC_POOL
from corral.core.tenancy import Action
from corral.server.auth import Principal
from corral.server.services.audit import record_audit
from corral.server.services.reports import JobRun, compute_usage_rows
from corral.store.protocols import AuditStore, JobStore, NodeStore, PoolStore, TelemetryStore, TenancyStore

REFRESH_S = 30.0  # spend is measured at most this often (a report over the period's runs)


class BudgetStore(PoolStore, TenancyStore, JobStore, NodeStore, TelemetryStore, AuditStore, Protocol):
    """What budgets read and write."""


class PricesStore(PoolStore, NodeStore, Protocol):
    """What compute_prices reads."""


def compute_prices(store: PricesStore) -> tuple[dict[str, float], dict[str, str]]:
    """node -> price per GPU-hour, and node -> pool, for every node a cloud pool ever started (owned nodes are
    priced at the admin's rate by the caller), and node -> pool for the nodes of Slurm and Kubernetes pools (owned
    GPUs too: the admin's rate)."""
    prices: dict[str, float] = {}
    pools: dict[str, str] = {}
    for node in store.list_nodes():
        if node.labels.get(SOURCE_LABEL) in CLUSTER_KINDS:
            pools[node.name] = node.labels.get(POOL_LABEL, STATIC_POOL)
    for n in store.list_pool_nodes():
        pools[n.name] = n.pool
        prices[n.name] = n.price_per_hour / n.gpus if n.gpus else n.price_per_hour
    return prices, pools


class BudgetTracker:
    """Each tenant's spend this period against its budget, measured at most every REFRESH_S (any thread)."""

    def __init__(self, store: BudgetStore, owned_price: float, refresh_s: float = REFRESH_S) -> None:
        self.store = store
        self.owned_price = owned_price
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        # also read again where the scheduler runs: the loops' process of a server of several (server/workers.py)
        self.forward: Callable[[], None] | None = None
        self._at = 0.0
        self._statuses: dict[str, BudgetStatus] = {}
        self._tenant_ids: dict[str, int] = {}

    def refresh(self, now: datetime | None = None, force: bool = False) -> dict[str, BudgetStatus]:
        clock = time.monotonic()
        with self._lock:
            if not force and self._at and clock - self._at < self.refresh_s:
                return self._statuses
            now = now or datetime.now(UTC)
            budgets = self.store.list_budgets()
            statuses: dict[str, BudgetStatus] = {}
            if budgets:
                prices, _ = compute_prices(self.store)
                starts = {compute_period(b.period, now)[0] for _, b in budgets}
                earliest = min(starts)
                runs = [
                    JobRun.from_columns(r)
                    for r in self.store.list_runs_between(earliest, now, tenant_id=None, with_placement=True)
                ]
                names = {t.id: t.name for t in self.store.list_tenants()}
                by_start: dict[datetime, dict[str, tuple[float, float]]] = {}
                for start in starts:
                    rows = compute_usage_rows(
                        runs, "tenant", start, now, now, names, {}, {}, prices=prices, owned_price=self.owned_price
                    )
                    by_start[start] = {r["key"]: (r["gpu_hours"], r["cost"]) for r in rows}
                for tenant_id, b in budgets:
                    used = by_start[compute_period(b.period, now)[0]].get(b.tenant, (0.0, 0.0))
                    statuses[b.tenant] = compute_status(b, used[0], used[1], now)
                    self._tenant_ids[b.tenant] = tenant_id
            self._statuses, self._at = statuses, clock
            return statuses

    def invalidate(self) -> None:
        with self._lock:
            self._at = 0.0
        if self.forward is not None:
            self.forward()

    def statuses(self) -> dict[str, BudgetStatus]:
        return self.refresh()

    def no_burst(self) -> frozenset[str]:
        """Tenants whose budget is used up with policy no-burst (or hold: a held tenant starts nothing)."""
        return frozenset(t for t, s in self.refresh().items() if s.enforced)

    def held(self) -> dict[int, BudgetStatus]:
        """Tenant id -> its status, for tenants whose budget is used up with policy hold."""
        out: dict[int, BudgetStatus] = {}
        for name, s in self.refresh().items():
            if s.enforced and s.budget.policy == "hold" and name in self._tenant_ids:
                out[self._tenant_ids[name]] = s
        return out


# ---- use-cases ----------------------------------------------------------------------------------
def set_budget(store: BudgetStore, caller: Principal, tenant: str, budget: Budget) -> None:
    caller.require(Action.MANAGE_CLUSTER)
    t = store.find_tenant(tenant)
    if t is None:
        raise NotFoundError("tenant", tenant)
    check_budget(budget)
    store.set_budget(t.id, budget, datetime.now(UTC))
    record_audit(
        store,
        caller,
        "budget.set",
        tenant,
        f"{budget.period}: {budget.gpu_hours} GPU-hours, {budget.money} money, policy {budget.policy}",
    )


def delete_budget(store: BudgetStore, caller: Principal, tenant: str) -> None:
    caller.require(Action.MANAGE_CLUSTER)
    t = store.find_tenant(tenant)
    if t is None or not store.delete_budget(t.id):
        raise NotFoundError("budget", tenant)
    record_audit(store, caller, "budget.delete", tenant)


def visible_statuses(tracker: BudgetTracker, store: BudgetStore, caller: Principal) -> list[BudgetStatus]:
    """Admins see every tenant's; anyone else only their own tenant's."""
    statuses = tracker.refresh()
    if caller.is_admin:
        return [statuses[k] for k in sorted(statuses)]
    if caller.tenant_id is None:
        return []
    mine = store.get_tenant(caller.tenant_id)
    return [statuses[mine.name]] if mine is not None and mine.name in statuses else []


def check_tenant_name(name: str) -> str:
    if not name or len(name) > 64:
        raise ValidationError("tenant", "1-64 characters")
    return name


__all__ = [
    "BudgetStore",
    "BudgetTracker",
    "compute_prices",
    "delete_budget",
    "set_budget",
    "visible_statuses",
]

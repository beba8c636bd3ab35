"""Cloud pools in SQL: the pools half of SqlStore (a mixin). See corral.store.protocols.PoolStore."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.budgets import Budget
from corral.core.errors import ConflictError
from corral.core.pools import LIVE_STATES, PoolNode, PoolSpec, pool_from_dict, pool_to_dict
from corral.store.records import Pool, PoolEvent
from corral.store.tables import BudgetRow, PoolEventRow, PoolNodeRow, PoolRow, TenantRow
from corral.store.tenancy import affected_rows, utc

MAX_EVENTS_PER_POOL = 1000  # a pool keeps its newest events
NODE_COLUMNS = {
    "state",
    "provider_id",
    "token_id",
    "joined_at",
    "idle_since",
    "ended_at",
    "notice_at",
    "reason",
    "job_ids",
}


def _s(at: datetime | None) -> float | None:
    return (utc(at) or at).timestamp() if at is not None else None


def _at(s: float | None) -> datetime | None:
    return datetime.fromtimestamp(s, UTC) if s is not None else None


def to_pool(r: PoolRow) -> Pool:
    return Pool(
        id=r.id,
        spec=pool_from_dict(r.spec),
        created_by=r.created_by or "",
        created_at=utc(r.created_at) or r.created_at,
        updated_at=utc(r.updated_at) or r.updated_at,
        version=r.version or 1,
    )


def to_pool_node(r: PoolNodeRow) -> PoolNode:
    return PoolNode(
        name=r.name,
        pool=r.pool,
        instance_type=r.instance_type,
        state=r.state,
        launched_s=_s(r.launched_at) or 0.0,
        spot=bool(r.spot),
        price_per_hour=float(r.price_per_hour or 0.0),
        gpus=r.gpus or 0,
        joined_s=_s(r.joined_at),
        idle_since_s=_s(r.idle_since),
        ended_s=_s(r.ended_at),
        notice_at_s=_s(r.notice_at),
        provider_id=r.provider_id or "",
        reason=r.reason or "",
    )


class PoolMethods:
    """Every method is one transaction."""

    def _tx(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    # ---- pools ----
    def create_pool(self, spec: PoolSpec, created_by: str, now: datetime) -> Pool:
        try:
            with self._tx() as s:
                row = PoolRow(
                    name=spec.name, spec=pool_to_dict(spec), created_by=created_by, created_at=now, updated_at=now
                )
                s.add(row)
                s.flush()
                return to_pool(row)
        except IntegrityError as e:
            raise ConflictError(f"a pool named {spec.name} exists already", "name") from e

    def get_pool(self, name: str) -> Pool | None:
        with self._tx() as s:
            row = s.scalars(select(PoolRow).where(PoolRow.name == name)).first()
            return to_pool(row) if row is not None else None

    def list_pools(self) -> list[Pool]:
        with self._tx() as s:
            return [to_pool(r) for r in s.scalars(select(PoolRow).order_by(PoolRow.name))]

    def update_pool(self, spec: PoolSpec, now: datetime, expected_version: int | None = None) -> Pool | None:
        with self._tx() as s:
            row = s.scalars(select(PoolRow).where(PoolRow.name == spec.name).with_for_update()).first()
            if row is None:
                return None
            if expected_version is not None and row.version != expected_version:
                raise ConflictError(f"pool {spec.name} was changed meanwhile (version {row.version}); read it again")
            row.spec = pool_to_dict(spec)
            row.updated_at = now
            row.version = (row.version or 1) + 1
            s.flush()
            return to_pool(row)

    def delete_pool(self, name: str) -> bool:
        with self._tx() as s:
            return bool(affected_rows(s.execute(delete(PoolRow).where(PoolRow.name == name))))

    # ---- the nodes pools started ----
    def add_pool_node(self, node: PoolNode, token_id: int | None, job_ids: Sequence[str]) -> None:
        with self._tx() as s:
            s.add(
                PoolNodeRow(
                    name=node.name,
                    pool=node.pool,
                    instance_type=node.instance_type,
                    spot=node.spot,
                    price_per_hour=node.price_per_hour,
                    gpus=node.gpus,
                    state=node.state,
                    provider_id=node.provider_id,
                    token_id=token_id,
                    launched_at=_at(node.launched_s),
                    reason=node.reason,
                    job_ids=list(job_ids),
                )
            )

    def update_pool_node(self, name: str, changes: Mapping[str, Any]) -> bool:
        bad = set(changes) - NODE_COLUMNS
        if bad:
            raise ValueError(f"not a pool node column: {', '.join(sorted(bad))}")
        with self._tx() as s:
            row = s.scalars(select(PoolNodeRow).where(PoolNodeRow.name == name)).first()
            if row is None:
                return False
            for k, v in changes.items():
                setattr(row, k, v)
            return True

    def list_pool_nodes(self, pool: str | None = None, live_only: bool = False) -> list[PoolNode]:
        with self._tx() as s:
            q = select(PoolNodeRow).order_by(PoolNodeRow.id)
            if pool is not None:
                q = q.where(PoolNodeRow.pool == pool)
            if live_only:
                q = q.where(PoolNodeRow.state.in_(LIVE_STATES))
            return [to_pool_node(r) for r in s.scalars(q)]

    def get_pool_node(self, name: str) -> tuple[PoolNode, int | None, list[str]] | None:
        with self._tx() as s:
            row = s.scalars(select(PoolNodeRow).where(PoolNodeRow.name == name)).first()
            return (to_pool_node(row), row.token_id, list(row.job_ids or ())) if row is not None else None

    def pool_node_for_token(self, token_id: int) -> PoolNode | None:
        with self._tx() as s:
            row = s.scalars(select(PoolNodeRow).where(PoolNodeRow.token_id == token_id)).first()
            return to_pool_node(row) if row is not None else None

    # ---- budgets ----
    def set_budget(self, tenant_id: int, budget: Budget, now: datetime) -> None:
        try:
            self._set_budget(tenant_id, budget, now)
        except IntegrityError:  # another writer made it meanwhile: this one replaces it
            self._set_budget(tenant_id, budget, now)

    def _set_budget(self, tenant_id: int, budget: Budget, now: datetime) -> None:
        with self._tx() as s:
            row = s.scalars(select(BudgetRow).where(BudgetRow.tenant_id == tenant_id)).first()
            if row is None:
                row = BudgetRow(tenant_id=tenant_id)
                s.add(row)
            row.period, row.gpu_hours, row.money, row.policy = (
                budget.period,
                budget.gpu_hours,
                budget.money,
                budget.policy,
            )
            row.updated_at = now

    def delete_budget(self, tenant_id: int) -> bool:
        with self._tx() as s:
            return bool(affected_rows(s.execute(delete(BudgetRow).where(BudgetRow.tenant_id == tenant_id))))

    def list_budgets(self) -> list[tuple[int, Budget]]:
        with self._tx() as s:
            rows = s.execute(
                select(BudgetRow, TenantRow.name)
                .join(TenantRow, TenantRow.id == BudgetRow.tenant_id)
                .order_by(TenantRow.name)
            ).all()
            return [(r.tenant_id, Budget(name, r.period, r.gpu_hours, r.money, r.policy)) for r, name in rows]

    # ---- events ----
    def add_pool_events(self, events: Sequence[tuple[str, str, str, str]], now: datetime) -> None:
        if not events:
            return
        with self._tx() as s:
            for pool, node, kind, message in events:
                s.add(PoolEventRow(pool=pool, node=node, at=now, kind=kind, message=message[:2000]))
            s.flush()
            for pool in {e[0] for e in events}:
                cut = s.scalars(
                    select(PoolEventRow.id)
                    .where(PoolEventRow.pool == pool)
                    .order_by(PoolEventRow.id.desc())
                    .offset(MAX_EVENTS_PER_POOL)
                    .limit(1)
                ).first()
                if cut is not None:
                    s.execute(delete(PoolEventRow).where(PoolEventRow.pool == pool, PoolEventRow.id <= cut))

    def list_pool_events(self, pool: str | None = None, limit: int = 100) -> list[PoolEvent]:
        with self._tx() as s:
            q = select(PoolEventRow).order_by(PoolEventRow.id.desc()).limit(limit)
            if pool is not None:
                q = q.where(PoolEventRow.pool == pool)
            return [PoolEvent(r.id, r.pool, r.node, utc(r.at) or r.at, r.kind, r.message) for r in s.scalars(q)][::-1]

"""Long-running services in SQL: the services half of SqlStore (a mixin).

A change of a service is a read-modify-write under a row lock (FOR UPDATE on PostgreSQL, the store's lock on
SQLite): the API (create, update, scale, rollback, delete) and the leader's controller change the same row, and
neither loses the other's change. Replicas are ordinary jobs carrying `service_id` and `service_revision`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.errors import ConflictError
from corral.core.models import Job
from corral.core.services import MAX_EVENTS, MAX_REVISIONS
from corral.core.states import JobState
from corral.store.records import Service
from corral.store.tables import JobRow, ServiceRow, ServiceSampleRow, ServiceTrafficRow
from corral.store.tenancy import utc

UPDATABLE = {"settings", "revisions", "revision", "stable_revision", "replicas", "state", "deleting"}
ServiceChange = Callable[[Service], Mapping[str, Any] | None]


def to_service(r: ServiceRow) -> Service:
    return Service(
        id=r.id,
        tenant_id=r.tenant_id,
        user_id=r.user_id,
        name=r.name,
        settings=dict(r.settings or {}),
        revisions=tuple(r.revisions or ()),
        revision=r.revision,
        stable_revision=r.stable_revision or 0,
        replicas=r.replicas,
        state=dict(r.state or {}),
        events=tuple(r.events or ()),
        deleting=bool(r.deleting),
        version=r.version or 1,
        created_at=utc(r.created_at) or r.created_at,
        updated_at=utc(r.updated_at) or r.updated_at,
    )


def _event(now: datetime, kind: str, message: str) -> dict[str, Any]:
    return {"at": now.isoformat(), "kind": kind, "message": message}


class ServiceMethods:
    """Every method is one transaction (see corral.store.protocols.ServiceStore for the contracts)."""

    is_sqlite: bool
    _to_job: Callable[[JobRow], Job]

    def _tx(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    def _rmw(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    def create_service(
        self,
        tenant_id: int,
        user_id: int | None,
        name: str,
        settings: Mapping[str, Any],
        revision: Mapping[str, Any],
        replicas: int,
        now: datetime,
    ) -> Service:
        try:
            with self._tx() as s:
                row = ServiceRow(
                    tenant_id=tenant_id,
                    user_id=user_id,
                    name=name,
                    settings=dict(settings),
                    revisions=[{**revision, "revision": 1, "created_at": now.isoformat()}],
                    revision=1,
                    stable_revision=0,
                    replicas=replicas,
                    state={
                        "rollout": {"state": "progressing", "message": "starting revision 1", "since": now.isoformat()}
                    },
                    events=[_event(now, "created", f"created with revision 1, {replicas} replica(s)")],
                    deleting=False,
                    version=1,
                    created_at=now,
                    updated_at=now,
                )
                s.add(row)
                s.flush()
                return to_service(row)
        except IntegrityError as e:  # the name is the cluster's (the gateway's URL), whoever holds it
            raise ConflictError(f"the service name {name!r} is taken", field="name") from e

    def get_service(self, service_id: int) -> Service | None:
        with self._tx() as s:
            row = s.get(ServiceRow, service_id)
            return to_service(row) if row else None

    def get_service_by_name(self, name: str) -> Service | None:
        with self._tx() as s:
            row = s.scalars(select(ServiceRow).where(ServiceRow.name == name)).first()
            return to_service(row) if row else None

    def list_services(self, tenant_id: int | None = None) -> list[Service]:
        with self._tx() as s:
            q = select(ServiceRow).order_by(ServiceRow.id)
            if tenant_id is not None:
                q = q.where(ServiceRow.tenant_id == tenant_id)
            return [to_service(r) for r in s.scalars(q).all()]

    def modify_service(
        self, service_id: int, change: ServiceChange, now: datetime, events: Sequence[tuple[str, str]] = ()
    ) -> Service | None:
        with self._rmw() as s:
            row = s.get(ServiceRow, service_id, with_for_update=not self.is_sqlite)
            if row is None:
                return None
            current = to_service(row)
            changes = dict(change(current) or {})
            # the callable may add events of its own under the key "_events" (kind, message)
            added = [*events, *changes.pop("_events", ())]
            unknown = set(changes) - UPDATABLE
            if unknown:
                raise ValueError(f"not updatable: {sorted(unknown)}")
            if not changes and not added:
                return current
            for key, value in changes.items():
                setattr(row, key, value)
            if "revisions" in changes:
                row.revisions = list(changes["revisions"])[-MAX_REVISIONS:]
            if added:
                row.events = [*(row.events or []), *(_event(now, k, m) for k, m in added)][-MAX_EVENTS:]
            row.version = (row.version or 1) + 1
            row.updated_at = now
            s.flush()
            return to_service(row)

    def live_replicas(self, service_id: int | None = None) -> list[Job]:
        with self._tx() as s:
            q = select(JobRow).where(
                JobRow.service_id.is_not(None), JobRow.state.in_([JobState.PENDING.value, JobState.RUNNING.value])
            )
            if service_id is not None:
                q = q.where(JobRow.service_id == service_id)
            return [self._to_job(r) for r in s.scalars(q.order_by(JobRow.id)).all()]

    def delete_service(self, service_id: int) -> bool:
        with self._tx() as s:
            s.execute(delete(ServiceTrafficRow).where(ServiceTrafficRow.service_id == service_id))
            s.execute(delete(ServiceSampleRow).where(ServiceSampleRow.service_id == service_id))
            res = s.execute(delete(ServiceRow).where(ServiceRow.id == service_id))
            return bool(res.rowcount)  # type: ignore[attr-defined]

    def save_service_traffic(self, server: str, data: Mapping[int, Mapping[str, Any]], now: datetime) -> None:
        with self._tx() as s:
            for service_id, counts in data.items():
                row = s.get(ServiceTrafficRow, (service_id, server))
                if row is None:
                    s.add(ServiceTrafficRow(service_id=service_id, server=server, data=dict(counts), updated_at=now))
                else:
                    row.data = dict(counts)
                    row.updated_at = now

    def load_service_traffic(self) -> dict[int, dict[str, dict[str, Any]]]:
        with self._tx() as s:
            out: dict[int, dict[str, dict[str, Any]]] = {}
            for r in s.scalars(select(ServiceTrafficRow)).all():
                out.setdefault(r.service_id, {})[r.server] = {**(r.data or {}), "_updated_at": utc(r.updated_at)}
            return out

    def add_service_samples(self, samples: Sequence[tuple[int, Mapping[str, Any]]], now: datetime) -> None:
        with self._tx() as s:
            s.add_all(ServiceSampleRow(service_id=sid, at=now, data=dict(d)) for sid, d in samples)

    def service_samples(self, service_id: int, since: datetime) -> list[tuple[datetime, dict[str, Any]]]:
        with self._tx() as s:
            q = (
                select(ServiceSampleRow.at, ServiceSampleRow.data)
                .where(ServiceSampleRow.service_id == service_id, ServiceSampleRow.at >= since)
                .order_by(ServiceSampleRow.at)
            )
            return [(utc(at) or at, dict(d or {})) for at, d in s.execute(q).all()]

    def prune_service_samples(self, before: datetime) -> int:
        with self._tx() as s:
            res = s.execute(delete(ServiceSampleRow).where(ServiceSampleRow.at < before))
            return int(res.rowcount or 0)  # type: ignore[attr-defined]

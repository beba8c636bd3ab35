"""Operating the pool in SQL: cordon, GPU health and admin disable, node events, the audit log (a mixin)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from corral.store.records import AuditEntry, NodeEvent
from corral.store.tables import AuditRow, GpuRow, JobRow, NodeEventRow, NodeRow
from corral.store.tenancy import affected_rows, utc


class NodeAdminMethods:
    """Every method is one transaction; each returns False for an unknown node or GPU."""

    def _tx(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    def set_node_cordoned(self, name: str, cordoned: bool) -> bool:
        with self._tx() as s:
            res = s.execute(update(NodeRow).where(NodeRow.name == name).values(cordoned=cordoned))
            return bool(affected_rows(res))

    def delete_node(self, name: str) -> bool:
        with self._tx() as s:
            # LIKE finds the candidates (SQLite's ignores ASCII case: N3's gang matches n3); the name is then
            # compared whole, so a gang on another node never keeps this one
            listed = s.execute(
                select(JobRow.node, JobRow.node_list).where(
                    JobRow.state == "RUNNING",
                    (JobRow.node == name) | JobRow.node_list.contains(f",{name},", autoescape=True),
                )
            ).all()
            if any(node == name or name in (nodes or "").split(",") for node, nodes in listed):
                return False
            s.execute(delete(GpuRow).where(GpuRow.node_name == name))
            return bool(affected_rows(s.execute(delete(NodeRow).where(NodeRow.name == name))))

    def set_gpu_disabled(self, node: str, index: int, disabled: bool) -> bool:
        with self._tx() as s:
            res = s.execute(
                update(GpuRow).where(GpuRow.node_name == node, GpuRow.index == index).values(disabled=disabled)
            )
            return bool(affected_rows(res))

    def set_gpu_health(self, node: str, index: int, healthy: bool, reason: str) -> bool:
        """Record a health transition; True only when the state changed."""
        with self._tx() as s:
            res = s.execute(
                update(GpuRow)
                .where(GpuRow.node_name == node, GpuRow.index == index, GpuRow.healthy.is_(not healthy))
                .values(healthy=healthy, health_reason="" if healthy else reason)
            )
            return bool(affected_rows(res))

    def add_node_event(self, node: str, gpu_index: int | None, kind: str, message: str, now: datetime) -> None:
        with self._tx() as s:
            s.add(NodeEventRow(node=node, gpu_index=gpu_index, at=now, kind=kind, message=message))

    def list_node_events(self, node: str, gpu_index: int | None = None, limit: int = 200) -> list[NodeEvent]:
        """Newest first."""
        with self._tx() as s:
            q = select(NodeEventRow).where(NodeEventRow.node == node)
            if gpu_index is not None:
                q = q.where(NodeEventRow.gpu_index == gpu_index)
            rows = s.scalars(q.order_by(NodeEventRow.id.desc()).limit(limit)).all()
            return [NodeEvent(r.node, r.gpu_index, utc(r.at) or r.at, r.kind, r.message) for r in rows]

    def add_audit(self, actor: str, action: str, target: str, detail: str, now: datetime) -> None:
        with self._tx() as s:
            s.add(AuditRow(at=now, actor=actor, action=action, target=target, detail=detail))

    def list_audit(self, limit: int = 200, before_id: int | None = None) -> list[AuditEntry]:
        """Newest first."""
        with self._tx() as s:
            q = select(AuditRow)
            if before_id is not None:
                q = q.where(AuditRow.id < before_id)
            rows = s.scalars(q.order_by(AuditRow.id.desc()).limit(limit)).all()
            return [AuditEntry(utc(r.at) or r.at, r.actor, r.action, r.target, r.detail) for r in rows]

"""Server replicas in SQL (issue 17): the leader lease and the replicas' heartbeats, the half of SqlStore (a mixin)
that lets several `corral server` processes share one database with one of them leading.

The lease is one row claimed by one conditional UPDATE, atomic on both databases: its holder renews it, anyone
takes it once it has expired (the epoch then grows, a fencing token: a paused ex-leader finds its epoch gone and
applies nothing). Expiry is judged by the claimer's clock: replicas need clocks kept in step (NTP), as with
Kubernetes' leases.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import case, delete, or_, select, update
from sqlalchemy.orm import Session

from corral.store.migrate import SchemaState, load_schema_state
from corral.store.records import Lease, Replica
from corral.store.tables import LeaseRow, NodeRow, ReplicaRow

LEADER = "leader"


class ReplicaMethods:
    def _tx(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    def claim_lease(self, holder: str, now: datetime, ttl_s: float, name: str = LEADER) -> Lease:
        """Renew the lease when `holder` has it, take it when it has expired; the lease as it stands after (held by
        `holder` or by another). A takeover starts a new epoch and a new `since`."""
        expires = now + timedelta(seconds=ttl_s)
        with self._tx() as s:
            s.execute(
                update(LeaseRow)
                .where(LeaseRow.name == name, or_(LeaseRow.holder == holder, LeaseRow.expires_at < now))
                .values(
                    # SET reads the row as it was: a renewal keeps epoch and since, a takeover starts anew
                    epoch=case((LeaseRow.holder == holder, LeaseRow.epoch), else_=LeaseRow.epoch + 1),
                    since=case((LeaseRow.holder == holder, LeaseRow.since), else_=now),
                    holder=holder,
                    expires_at=expires,
                )
            )
        lease = self.get_lease(name)
        assert lease is not None, f"no lease row {name!r} (migration 0021)"
        return lease

    def release_lease(self, holder: str, now: datetime, name: str = LEADER) -> bool:
        """Give the lease up at once (a clean stop): another replica may take it without waiting for expiry."""
        with self._tx() as s:
            res = s.execute(
                update(LeaseRow).where(LeaseRow.name == name, LeaseRow.holder == holder).values(expires_at=now)
            )
            return bool(res.rowcount)  # type: ignore[attr-defined]

    def get_lease(self, name: str = LEADER) -> Lease | None:
        with self._tx() as s:
            row = s.get(LeaseRow, name)
            if row is None:
                return None
            since = _aware(row.since) if row.since is not None else None
            return Lease(row.name, row.holder, int(row.epoch), since, _aware(row.expires_at))

    def touch_replica(self, replica: Replica) -> None:
        """Insert or refresh a replica's heartbeat (`last_seen_at`)."""
        with self._tx() as s:
            row = s.get(ReplicaRow, replica.id)
            if row is None:
                s.add(
                    ReplicaRow(
                        id=replica.id,
                        host=replica.host,
                        url=replica.url,
                        version=replica.version,
                        started_at=replica.started_at,
                        last_seen_at=replica.last_seen_at,
                        schema_head=replica.schema_head,
                    )
                )
            else:
                row.last_seen_at = replica.last_seen_at

    def list_replicas(self, seen_since: datetime) -> list[Replica]:
        """Replicas heard from since `seen_since`, oldest first."""
        with self._tx() as s:
            rows = s.scalars(
                select(ReplicaRow).where(ReplicaRow.last_seen_at >= seen_since).order_by(ReplicaRow.started_at)
            ).all()
            return [
                Replica(r.id, r.host, r.url, r.version, _aware(r.started_at), _aware(r.last_seen_at), r.schema_head)
                for r in rows
            ]

    def forget_replicas(self, seen_before: datetime) -> int:
        """Drop the heartbeats of replicas gone since before `seen_before` (they are history)."""
        with self._tx() as s:
            res = s.execute(delete(ReplicaRow).where(ReplicaRow.last_seen_at < seen_before))
            return int(res.rowcount)  # type: ignore[attr-defined]

    def load_schema_state(self) -> SchemaState:
        """The database's schema revision and the oldest code revision that may run on it (`corral status`)."""
        with self._tx() as s:
            return load_schema_state(s.connection())

    def advance_report_order(self, node: str, boot: str, seq: int) -> bool:
        """Record that `node`'s report (`boot`, `seq`) is being applied, unless one of the same agent process with a
        number as high was applied already, by any replica (False: this one is older: its exits only count)."""
        with self._tx() as s:
            res = s.execute(
                update(NodeRow)
                .where(NodeRow.name == node, or_(NodeRow.report_boot != boot, NodeRow.report_seq < seq))
                .values(report_boot=boot, report_seq=seq)
            )
            return bool(res.rowcount)  # type: ignore[attr-defined]

    def save_web_ports(self, node: str, reports: list[dict[str, Any]], now: datetime) -> None:
        """What `node`'s agent reported of its jobs' web-UI ports (services/webports.py), for every replica's proxy."""
        with self._tx() as s:
            s.execute(update(NodeRow).where(NodeRow.name == node).values(web_ports=reports, web_ports_at=now))

    def load_web_ports(self, node: str) -> tuple[list[dict[str, Any]], datetime | None]:
        """(reports, when written) as the replica the node's agent syncs with wrote them; ([], None) when none."""
        with self._tx() as s:
            row = s.execute(select(NodeRow.web_ports, NodeRow.web_ports_at).where(NodeRow.name == node)).first()
            if row is None or row[1] is None:
                return [], None
            return list(row[0] or []), _aware(row[1])


def _aware(value: datetime | None) -> datetime:
    assert value is not None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

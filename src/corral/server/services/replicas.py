"""The control plane as `corral status` shows it: the server replicas sharing the database and which leads."""

from __future__ import annotations

from datetime import datetime, timedelta

from corral.api.schemas import ReplicaOut, StatusOut
from corral.store.protocols import ReplicaStore

REPLICA_GONE_AFTER_S = 15.0  # a replica silent for longer is not listed as alive


def compute_status(store: ReplicaStore, replica_id: str, now: datetime) -> StatusOut:
    """The lease, the live replicas and the schema revision, as the database has them: any replica answers the
    same."""
    lease = store.get_lease()
    live = lease is not None and lease.holder != "" and lease.expires_at > now
    leader = lease.holder if live and lease is not None else None
    replicas = store.list_replicas(now - timedelta(seconds=REPLICA_GONE_AFTER_S))
    schema = store.load_schema_state()
    return StatusOut(
        replica=replica_id,
        leader=leader,
        leader_since=lease.since if live and lease is not None else None,
        leader_epoch=lease.epoch if lease is not None else 0,
        lease_expires_at=lease.expires_at if live and lease is not None else None,
        replicas=[
            ReplicaOut(
                id=r.id,
                host=r.host,
                url=r.url,
                version=r.version,
                started_at=r.started_at,
                last_seen_at=r.last_seen_at,
                leader=r.id == leader,
                schema_head=r.schema_head,
            )
            for r in replicas
        ],
        schema_revision=schema.revision,
        min_compatible_revision=schema.min_compatible,
    )

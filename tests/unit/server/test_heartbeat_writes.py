"""A node's heartbeat (every agent sync) is written at most every HEARTBEAT_WRITE_EVERY: an agent that reports each
exit at once syncs many times a second, and each write was a transaction the job path waited behind. What a node's
liveness relies on still holds: a LOST node is READY again at its first sync, a heartbeat older than that is
written, and a node that is gone is not found. On SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from corral.core.resources import GpuInfo
from corral.server.services.agents import HEARTBEAT_WRITE_EVERY, record_heartbeat
from corral.store.sql import open_store


def test_a_heartbeat_is_written_at_most_every_interval_and_always_for_a_lost_node(database_url: str) -> None:
    store = open_store(database_url)
    t0 = datetime.now(UTC)
    store.upsert_node("n1", "n1", "simulated", 8000, 65536, {}, [GpuInfo(0, "GPU-0", "H100-80GB", 81920)], t0)
    assert store.touch_node("n1", t0)

    def beat(at: datetime) -> datetime:
        record = store.get_node("n1")
        assert record is not None and record_heartbeat(store, record, at)
        after = store.get_node("n1")
        assert after is not None and after.state == "READY"
        return after.last_heartbeat_at

    soon = t0 + HEARTBEAT_WRITE_EVERY / 2
    assert beat(soon) == t0  # fresh enough: not written again
    later = t0 + HEARTBEAT_WRITE_EVERY * 2
    assert beat(later) == later
    assert store.mark_nodes_lost(later + timedelta(seconds=1)) == ["n1"]
    assert beat(later + timedelta(milliseconds=10)) == later + timedelta(milliseconds=10)  # LOST: READY at once
    record = store.get_node("n1")
    assert record is not None
    assert record_heartbeat(store, record, record.last_heartbeat_at - timedelta(seconds=5))  # a clock step back
    store.delete_node("n1")
    assert not record_heartbeat(store, replace(record, last_heartbeat_at=t0 - timedelta(hours=1)), t0)

"""The nodes counter (migration 0032) and the node list the store keeps: every scheduling pass and every GET
/api/v1/nodes lists every node and GPU, so the store keeps the list it read and, while the counter stays, reads only
each node's state and last heartbeat again. Whatever another server replica (another store) writes must show in
this store's next list exactly as a store that keeps nothing reads it (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from corral.core.models import Node
from corral.core.resources import GpuInfo
from corral.store.sql import SqlStore, open_store

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _gpus(name: str, n: int, memory_mib: int = 81920) -> list[GpuInfo]:
    return [GpuInfo(index=i, uuid=f"{name}-{i}", model="H100-80GB", memory_mib=memory_mib) for i in range(n)]


@pytest.fixture
def other(database_url: str, store: SqlStore) -> Iterator[SqlStore]:
    """Another replica's store on the same database (opened after `store`, which migrates it)."""
    s = open_store(database_url)
    try:
        yield s
    finally:
        s.close()


def _truth(database_url: str) -> list[Node]:
    """The node list as a store that keeps nothing reads it."""
    fresh = open_store(database_url)
    try:
        return fresh.list_nodes()
    finally:
        fresh.close()


def _sql(store: SqlStore, statement: str) -> None:
    with store._tx() as s:  # noqa: SLF001 (a statement as any writer, old code's included, would run it)
        s.execute(text(statement))


def test_whatever_another_replica_writes_shows_in_the_next_list(
    store: SqlStore, other: SqlStore, database_url: str
) -> None:
    changes = [
        lambda: other.upsert_node("a", "a", "simulated", 8000, 1024, {}, _gpus("a", 2), T0),
        lambda: other.upsert_node("b", "b", "simulated", 4000, 512, {"zone": "x"}, _gpus("b", 1), T0),
        lambda: other.upsert_node("a", "a", "simulated", 8000, 1024, {}, _gpus("a", 1, 40960), T0),  # smaller
        lambda: other.touch_node("b", T0 + timedelta(seconds=5)),  # a heartbeat
        lambda: other.mark_node_lost("b"),  # a state
        lambda: other.touch_node("b", T0 + timedelta(seconds=9)),  # READY again
        lambda: other.set_node_cordoned("a", True),
        lambda: other.set_node_images("a", ["img:1"]),
        lambda: other.set_gpu_health("a", 0, False, "XID 79"),
        lambda: other.set_gpu_disabled("b", 0, True),
        lambda: _sql(other, "UPDATE nodes SET address = '10.0.0.9' WHERE name = 'b'"),
        lambda: _sql(other, "UPDATE nodes SET labels = '{\"zone\": \"y\"}' WHERE name = 'b'"),
        lambda: _sql(other, "UPDATE gpus SET nvlink_peers = '[1]' WHERE node_name = 'a'"),
        lambda: _sql(other, "UPDATE nodes SET state = 'DRAINING', last_heartbeat_at = last_heartbeat_at"),
        lambda: other.delete_node("a"),
        lambda: other.upsert_node("c", "c", "simulated", 1000, 64, {}, _gpus("c", 4), T0),
    ]
    assert store.list_nodes() == []
    for i, change in enumerate(changes):
        change()
        assert store.list_nodes() == _truth(database_url), f"change {i} not seen"
        assert store.list_nodes() == _truth(database_url), f"change {i}: the kept list drifted"


def test_a_heartbeat_or_a_state_reads_only_those_again(store: SqlStore) -> None:
    store.upsert_node("a", "a", "simulated", 8000, 1024, {}, _gpus("a", 8), T0)
    first = store.list_nodes()
    store.touch_node("a", T0 + timedelta(seconds=3))
    store.mark_node_lost("a")
    again = store.list_nodes()
    assert again[0].state == "LOST" and again[0].last_heartbeat_at == T0 + timedelta(seconds=3)
    assert again[0].gpus is first[0].gpus, "read every GPU again though only the state and heartbeat changed"
    again.clear()  # a caller's list is its own
    assert [n.name for n in store.list_nodes()] == ["a"]
    store.set_gpu_health("a", 3, False, "XID 48")
    assert store.list_nodes()[0].gpus is not first[0].gpus and not store.list_nodes()[0].gpus[3].healthy


def test_every_table_of_the_node_list_has_its_triggers(store: SqlStore) -> None:
    """A migration that copies one of these tables on SQLite drops its triggers; it must create them again."""
    with store._tx() as s:  # noqa: SLF001
        if store.is_sqlite:
            q = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'nodes\\_%' ESCAPE '\\'"
        else:
            q = "SELECT tgname FROM pg_trigger WHERE tgname LIKE 'nodes\\_%'"
        names = {r[0] for r in s.execute(text(q))}
    assert names == {f"nodes_{t}_{w}" for t in ("nodes", "gpus") for w in ("ins", "upd", "del")}

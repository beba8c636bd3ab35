"""The node shapes counter (migration 0029) and the node list read_submit_lists keeps: the database bumps the
counter whenever a node or GPU is registered or removed or changes in what a job could ever ask of it, whoever
writes it (SQLite and PostgreSQL), and the store reads its node list again exactly then. A stale list once let a submission through that
no node could ever hold (a node that had just joined a Slurm pool); these tests would catch it."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text

from corral.core.models import Node
from corral.core.resources import GpuInfo
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _gpus(name: str, n: int, memory_mib: int = 81920) -> list[GpuInfo]:
    return [GpuInfo(index=i, uuid=f"{name}-{i}", model="H100-80GB", memory_mib=memory_mib) for i in range(n)]


def _node_shapes(store: SqlStore) -> list[Node]:
    """The nodes a submission is checked against (read_submit_lists), for a tenant of the test's own."""
    tenant = store.find_tenant("shapes") or store.create_tenant("shapes", T0)
    return store.read_submit_lists(tenant.id).nodes


def _shape(store: SqlStore) -> list[tuple[str, int, int, dict[str, str], list[tuple[str, int]]]]:
    return [
        (n.name, n.cpu_milli, n.memory_mib, dict(n.labels), [(g.model, g.memory_mib) for g in n.gpus])
        for n in _node_shapes(store)
    ]


def _sql(store: SqlStore, statement: str) -> None:
    with store._tx() as s:  # noqa: SLF001 (a statement as any writer, old code's included, would run it)
        s.execute(text(statement))


def test_every_change_a_fit_check_reads_is_seen_at_once(store: SqlStore) -> None:
    assert _shape(store) == []
    store.upsert_node("a", "a", "simulated", 8000, 1024, {}, _gpus("a", 2), T0)
    assert _shape(store) == [("a", 8000, 1024, {}, [("H100-80GB", 81920)] * 2)]
    store.upsert_node("b", "b", "simulated", 4000, 512, {"pool": "slurm1"}, _gpus("b", 1), T0)  # joins
    assert [s[0] for s in _shape(store)] == ["a", "b"]
    store.upsert_node("a", "a", "simulated", 8000, 1024, {}, _gpus("a", 1, 40960), T0)  # re-registers, smaller
    assert _shape(store)[0][4] == [("H100-80GB", 40960)]
    _sql(store, "UPDATE nodes SET labels = '{\"zone\": \"x\"}' WHERE name = 'b'")
    assert _shape(store)[1][3] == {"zone": "x"}
    _sql(store, "UPDATE nodes SET cpu_milli = 2000, memory_mib = 256 WHERE name = 'b'")
    assert _shape(store)[1][1:3] == (2000, 256)
    _sql(store, "UPDATE gpus SET model = 'A100' WHERE node_name = 'b'")
    assert _shape(store)[1][4] == [("A100", 81920)]
    _sql(store, "DELETE FROM gpus WHERE node_name = 'b'")
    assert _shape(store)[1][4] == []
    assert store.delete_node("a")
    assert [s[0] for s in _shape(store)] == ["b"]


def test_what_no_fit_check_reads_does_not_make_it_read_again(store: SqlStore) -> None:
    """Heartbeats, states and images change every few seconds on a busy cluster: the kept list stays."""
    store.upsert_node("a", "a", "simulated", 8000, 1024, {}, _gpus("a", 2), T0)
    first = _node_shapes(store)
    store.touch_node("a", T0)
    store.mark_node_lost("a")
    store.set_node_cordoned("a", True)
    store.set_node_images("a", ["img:1"])
    store.set_gpu_health("a", 0, False, "XID 79")
    store.set_gpu_disabled("a", 1, True)
    again = _node_shapes(store)
    assert again[0] is first[0], "read again though no shape changed"
    _sql(store, "UPDATE nodes SET labels = labels WHERE name = 'a'")  # sets the column: read again (errs safe)
    assert _node_shapes(store)[0] is not first[0]

"""A node is removed only when no running job holds a part on it, by its exact name: SQLite's LIKE ignores ASCII
case and `_` is a LIKE wildcard, so another node's gang must not keep it."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.store.records import GpuInfo, JobSpec
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _nodes(store: SqlStore, *names: str) -> None:
    for name in names:
        gpus = [GpuInfo(index=i, uuid=f"{name}-{i}", model="H100", memory_mib=81920) for i in range(2)]
        store.upsert_node(name, name, "simulated", 8000, 65536, {}, gpus, T0)


def test_a_gang_on_a_node_named_alike_does_not_keep_a_node(store: SqlStore) -> None:
    _nodes(store, "N3", "n3", "axb", "a_b", "m")
    gang = store.create_job(JobSpec(command=("true",), gpus=1, nodes=2), T0).id
    assert store.assign_job_parts(gang, [("m", [0]), ("N3", [0])], T0)
    other = store.create_job(JobSpec(command=("true",), gpus=1, nodes=2), T0).id
    assert store.assign_job_parts(other, [("m", [1]), ("axb", [0])], T0)

    assert store.delete_node("n3")  # N3's gang is not n3's
    assert store.delete_node("a_b")  # a_b as a pattern matches axb
    assert not store.delete_node("N3")  # the gang's second part is there
    assert not store.delete_node("axb")
    assert not store.delete_node("m")  # the first part of both
    assert {n.name for n in store.list_nodes()} == {"N3", "axb", "m"}

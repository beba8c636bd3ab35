"""An agent is handed only runs with a part on its own node, whatever the store's read of "its" jobs returns: a
second line behind list_node_jobs, whose LIKE on node lists once matched other nodes (SQLite ignores ASCII case;
`_` is any character), which handed one node another's gang with its secrets."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from corral.core.resources import GpuInfo
from corral.server.services.agents import compute_assignments
from corral.store.memory import MemoryStore
from corral.store.records import Job, JobSpec

NOW = datetime(2026, 11, 28, tzinfo=UTC)


class _OverBroad:
    """The store, except that every node's running jobs include node a's (an over-broad read)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def list_node_jobs(self, node: str) -> list[Job]:
        return sorted(
            {j.id: j for j in [*self._store.list_node_jobs(node), *self._store.list_node_jobs("a")]}.values(),
            key=lambda j: j.id,
        )


def test_a_node_is_never_handed_a_run_with_no_part_on_it() -> None:
    store = MemoryStore()
    for name in ("a", "b"):
        gpus = [GpuInfo(index=i, uuid=f"GPU-{name}-{i}", model="H100-80GB", memory_mib=81920) for i in range(2)]
        store.upsert_node(name, name, "simulated", 8000, 65536, {}, gpus, NOW)
    theirs = store.create_job(JobSpec(command=("x",), gpus=1), NOW).id
    mine = store.create_job(JobSpec(command=("y",), gpus=1), NOW).id
    assert store.assign_job(theirs, "a", [0], NOW) and store.assign_job(mine, "b", [1], NOW)
    b = store.get_node("b")
    assert b is not None
    assignments, cancels = compute_assignments(_OverBroad(store), b, set())  # type: ignore[arg-type]
    assert [a.job_id for a in assignments] == [mine] and cancels == []

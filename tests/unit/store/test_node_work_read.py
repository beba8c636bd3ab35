"""An agent's sync reads what it hands over in one transaction (read_node_work): the same jobs as list_node_jobs,
list_staging and list_stage_outs, each of them, and no other node's."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import event

from corral.core.staging import IN_STAGING, StageItem
from corral.core.states import JobState
from corral.store.records import GpuInfo, JobSpec
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
OUT = (StageItem("results/", "/shared/out/"),)


def _nodes(store: SqlStore, *names: str) -> None:
    for name in names:
        gpus = [GpuInfo(index=i, uuid=f"{name}-{i}", model="H100", memory_mib=81920) for i in range(2)]
        store.upsert_node(name, name, "simulated", 8000, 65536, {}, gpus, T0)


def _job(store: SqlStore, **kw: object) -> int:
    return store.create_job(JobSpec(command=("true",), gpus=1, **kw), T0).id  # type: ignore[arg-type]


def test_the_nodes_work_read_at_once_is_what_the_three_reads_give(store: SqlStore) -> None:
    _nodes(store, "a_b", "axb", "n3")
    own, gang, elsewhere = _job(store), _job(store, nodes=2), _job(store)
    assert store.assign_job_parts(own, [("a_b", [0])], T0)
    assert store.assign_job_parts(gang, [("n3", [0]), ("a_b", [1])], T0)  # a later part on a_b
    assert store.assign_job_parts(elsewhere, [("axb", [0])], T0)  # a_b as a LIKE pattern matches axb
    staged, staged_elsewhere = _job(store, nodes=2), _job(store)
    assert store.update_staging(staged, ("", None), IN_STAGING, "n3", "copying", nodes=["n3", "a_b"])
    assert store.update_staging(staged_elsewhere, ("", None), IN_STAGING, "axb", "copying", nodes=["axb"])
    shipped, shipped_elsewhere = _job(store, stage_out=OUT), _job(store, stage_out=OUT)
    assert store.assign_job_parts(shipped, [("a_b", [1])], T0) is False  # a_b is full: the gang holds GPU 1
    assert store.assign_job_parts(shipped, [("n3", [1])], T0)
    assert store.assign_job_parts(shipped_elsewhere, [("axb", [1])], T0)
    for j in (shipped, shipped_elsewhere):
        assert store.finish_job(j, JobState.SUCCEEDED, 0, "", T0)
    for name in ("a_b", "axb", "n3", "nowhere"):
        work = store.read_node_work(name)
        assert work.jobs == store.list_node_jobs(name)
        assert work.staging == store.list_staging(name)
        assert work.stage_outs == store.list_stage_outs(name)
    work = store.read_node_work("a_b")
    assert ([j.id for j in work.jobs], [j.id for j in work.staging], work.stage_outs) == ([own, gang], [staged], [])
    work = store.read_node_work("n3")
    assert [j.id for j in work.jobs] == [gang] and [j.id for j in work.staging] == [staged]
    assert [j.id for j in work.stage_outs] == [shipped]


def test_the_nodes_work_is_read_in_one_transaction(store: SqlStore) -> None:
    _nodes(store, "n1")
    checkouts: list[object] = []
    event.listen(store.engine.pool, "checkout", lambda *a: checkouts.append(a))
    store.read_node_work("n1")
    store.get_node_with_jobs("n1")
    assert len(checkouts) == 2

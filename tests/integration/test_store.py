"""The StateStore contract, run on SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from corral.core.errors import ConflictError
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.store.records import JobSpec
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def gpus(n: int, model: str = "H100-80GB") -> list[GpuInfo]:
    return [GpuInfo(index=i, uuid=f"GPU-{i}", model=model, memory_mib=81920, nvlink_peers=()) for i in range(n)]


def spec(**kw: object) -> JobSpec:
    base: dict[str, object] = {"command": ("echo", "hi"), "name": "j", "gpus": 1}
    base.update(kw)
    return JobSpec(**base)  # type: ignore[arg-type]


def test_accepted_job_is_pending_with_submitted_event(store: SqlStore) -> None:
    job = store.create_job(spec(env={"A": "1"}, gpu_models=("H100",)), T0)
    got = store.get_job(job.id)
    assert got is not None and got.state is JobState.PENDING
    assert got.spec.env == {"A": "1"} and got.spec.gpu_models == ("H100",)
    assert got.created_at == T0
    assert [e.kind for e in store.list_events(job.id)] == ["submitted"]


def test_job_survives_reopening_the_store(database_url: str) -> None:
    from corral.store.sql import open_store

    first = open_store(database_url)
    job = first.create_job(spec(), T0)
    first.close()  # as after a crash: nothing else is flushed on close
    second = open_store(database_url)
    try:
        assert second.get_job(job.id) is not None
    finally:
        second.close()


def test_assign_is_compare_and_set(store: SqlStore, ready_nodes: Callable[..., None]) -> None:
    ready_nodes("n1", "n2")  # n2's GPUs 2 and 3 exist and are free: only the job's state refuses the second assign
    job = store.create_job(spec(gpus=2), T0)
    assert store.assign_job(job.id, "n1", [0, 1], T0)
    assert not store.assign_job(job.id, "n2", [2, 3], T0)  # already RUNNING: the second scheduler loses
    got = store.get_job(job.id)
    assert got is not None and (got.state, got.node, got.gpu_indices, got.attempt) == (
        JobState.RUNNING,
        "n1",
        (0, 1),
        1,
    )
    assert [j.id for j in store.list_node_jobs("n1")] == [job.id]
    assert store.list_node_jobs("n2") == []
    other = store.create_job(spec(gpus=2), T0)
    assert store.assign_job(other.id, "n2", [2, 3], T0)  # the same place takes a PENDING job


@pytest.mark.parametrize(
    ("start_running", "expected_state", "cancel_flag"),
    [
        pytest.param(False, JobState.CANCELLED, False, id="pending-cancels-at-once"),
        pytest.param(True, JobState.RUNNING, True, id="running-asks-the-agent"),
    ],
)
def test_request_cancel(
    store: SqlStore,
    ready_nodes: Callable[..., None],
    start_running: bool,
    expected_state: JobState,
    cancel_flag: bool,
) -> None:
    ready_nodes("n1")
    job = store.create_job(spec(), T0)
    if start_running:
        assert store.assign_job(job.id, "n1", [0], T0)
    got = store.request_cancel(job.id, T0)
    assert got is not None and got.state is expected_state and got.cancel_requested is cancel_flag
    assert store.request_cancel(10_000, T0) is None


def test_finish_only_once(store: SqlStore, ready_nodes: Callable[..., None]) -> None:
    ready_nodes("n1")
    job = store.create_job(spec(), T0)
    assert store.assign_job(job.id, "n1", [0], T0)
    assert store.finish_job(job.id, JobState.FAILED, 3, "", T0 + timedelta(seconds=5))
    assert not store.finish_job(job.id, JobState.SUCCEEDED, 0, "", T0)
    got = store.get_job(job.id)
    assert got is not None and got.state is JobState.FAILED and got.exit_code == 3
    assert got.finished_at == T0 + timedelta(seconds=5)


def test_list_jobs_filters_by_state(store: SqlStore, ready_nodes: Callable[..., None]) -> None:
    ready_nodes("n1")
    a = store.create_job(spec(), T0)
    b = store.create_job(spec(), T0)
    assert store.assign_job(b.id, "n1", [0], T0)
    assert [j.id for j in store.list_jobs(states=[JobState.PENDING])] == [a.id]
    assert [j.id for j in store.list_jobs()] == [a.id, b.id]


def test_node_upsert_replaces_inventory(store: SqlStore) -> None:
    store.upsert_node("n1", "host1", "simulated", 8000, 1024, {"zone": "a"}, gpus(8), T0)
    node = store.upsert_node("n1", "host1", "simulated", 8000, 1024, {"zone": "b"}, gpus(4, "A100-40GB"), T0)
    assert len(node.gpus) == 4 and node.gpus[0].model == "A100-40GB" and node.labels == {"zone": "b"}
    assert [n.name for n in store.list_nodes()] == ["n1"]


def test_silent_nodes_become_lost_and_come_back(store: SqlStore) -> None:
    store.upsert_node("old", "h", "simulated", 0, 0, {}, gpus(1), T0)
    store.upsert_node("new", "h", "simulated", 0, 0, {}, gpus(1), T0 + timedelta(seconds=50))
    assert store.mark_nodes_lost(T0 + timedelta(seconds=30)) == ["old"]
    assert store.mark_nodes_lost(T0 + timedelta(seconds=30)) == []  # already LOST
    assert store.touch_node("old", T0 + timedelta(seconds=60))
    node = store.get_node("old")
    assert node is not None and node.state == "READY"
    assert not store.touch_node("ghost", T0)


def test_requeue_releases_gpus(store: SqlStore, ready_nodes: Callable[..., None]) -> None:
    ready_nodes("n1", "n2", gpus=5)
    job = store.create_job(spec(gpus=2), T0)
    assert store.assign_job(job.id, "n1", [0, 1], T0)
    assert store.requeue_job(job.id, "node n1 lost", T0)
    got = store.get_job(job.id)
    assert got is not None and got.state is JobState.PENDING and got.node is None and got.gpu_indices == ()
    assert not store.requeue_job(job.id, "again", T0)  # only RUNNING jobs requeue
    assert store.assign_job(job.id, "n2", [3, 4], T0)
    assert store.get_job(job.id).attempt == 2  # type: ignore[union-attr]


def test_tokens_and_users(store: SqlStore) -> None:
    user = store.create_user("alice", "admin", T0)
    with pytest.raises(ConflictError):
        store.create_user("alice", "member", T0)
    store.create_token("hash-1", "user", "t", user.id, T0)
    tok = store.find_token("hash-1")
    assert tok is not None and tok.user_id == user.id
    assert store.find_token("nope") is None
    assert store.count_users() == 1


def test_gang_parts_exiting_at_once_lose_no_exit(store: SqlStore) -> None:
    """Two agents report their parts' exits at the same moment: both exit codes are kept."""
    import threading

    parts = [(f"n{i}", (0,)) for i in range(8)]
    for n, _ in parts:
        store.upsert_node(n, n, "simulated", 0, 0, {}, gpus(1), T0)
    job = store.create_job(spec(gpus=1, nodes=8), T0)
    assert store.assign_job_parts(job.id, parts, T0)
    barrier = threading.Barrier(8)

    def report(node: str) -> None:
        barrier.wait()
        store.record_part_exit(job.id, node, 0)
        store.mark_delivered([job.id], node)

    threads = [threading.Thread(target=report, args=(n,)) for n, _ in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = store.get_job(job.id)
    assert got is not None and set(got.part_exits) == {n for n, _ in parts}
    assert got.delivered_to == {n for n, _ in parts}
    assert [j.id for j in store.list_node_jobs("n5")] == [job.id]

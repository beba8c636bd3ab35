"""What a GPU failure leads to (server/health): the job on the failed GPU is requeued (or ends when its retries are
used), jobs on other GPUs keep running, the scheduler and the node's agent are woken once, and a recovered GPU
wakes them again. Both databases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from corral.core.health import HealthPolicy
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.core.telemetry import GpuEvent, GpuEventKind, GpuSample, TelemetryBatch
from corral.server.health import TelemetryService
from corral.server.health.consequences import SchedulerAndAgentWaker
from corral.store.records import Job, JobSpec
from corral.store.sql import SqlStore

T0 = 1_767_268_800.0  # 2026-01-01 12:00 UTC


class FakeWaker:
    """Records every capacity change it is told of."""

    def __init__(self) -> None:
        self.nodes: list[str] = []

    def capacity_changed(self, node: str) -> None:
        self.nodes.append(node)


def batch(ts: float, gpus: int = 2, xid_on: int | None = None, xid: int = 79) -> TelemetryBatch:
    samples = tuple(GpuSample(ts=ts, index=i, uuid=f"GPU-n1-{i}", utilization_percent=50.0) for i in range(gpus))
    events = () if xid_on is None else (GpuEvent(ts=ts, kind=GpuEventKind.XID, gpu_index=xid_on, xid=xid),)
    return TelemetryBatch(node="n1", ts=ts, host=None, gpus=samples, events=events, gpu_count=gpus)


def running_job(store: SqlStore, gpus: list[int], max_retries: int = 3) -> Job:
    job = store.create_job(
        JobSpec(command=("train",), gpus=len(gpus), max_retries=max_retries), datetime.fromtimestamp(T0, UTC)
    )
    assert store.assign_job(job.id, "n1", gpus, datetime.fromtimestamp(T0, UTC))
    return job


@pytest.fixture
def node(store: SqlStore) -> SqlStore:
    gpus = [GpuInfo(index=i, uuid=f"GPU-n1-{i}", model="H100-80GB", memory_mib=81920) for i in range(3)]
    store.upsert_node("n1", "n1", "simulated", 8000, 65536, {}, gpus, datetime.fromtimestamp(T0, UTC))
    return store


def service(store: SqlStore, waker: FakeWaker, recovery_checks: int = 2) -> TelemetryService:
    return TelemetryService(
        store, HealthPolicy(recovery_checks=recovery_checks), backoff_s=0, clock=lambda: T0, waker=waker
    )


def state_of(store: SqlStore, job: Job) -> tuple[JobState, str]:
    j = store.get_job(job.id)
    assert j is not None
    return j.state, j.reason


def test_a_failed_gpu_requeues_its_job_only_and_wakes_scheduler_and_agent_once(node: SqlStore) -> None:
    waker = FakeWaker()
    on_failed, on_other = running_job(node, [1]), running_job(node, [0])
    result = service(node, waker).receive("n1", batch(T0 + 1, gpus=3, xid_on=1))
    assert (result.transitions, result.capacity_changed) == (1, True)
    assert waker.nodes == ["n1"]
    state, reason = state_of(node, on_failed)
    assert state is JobState.PENDING and "GPU 1 on n1 failed (xid: fatal Xid 79)" in reason
    assert [e.kind for e in node.list_events(on_failed.id)].count("gpu_failed") == 1
    assert state_of(node, on_other)[0] is JobState.RUNNING
    record = node.get_node("n1")
    assert record is not None and [(s.index, s.healthy) for s in record.gpu_status if not s.healthy] == [(1, False)]


def test_a_job_on_two_gpus_that_fail_together_is_requeued_once(node: SqlStore) -> None:
    waker = FakeWaker()
    job = running_job(node, [0, 1])
    both = batch(T0 + 1, gpus=3, xid_on=0)
    both = TelemetryBatch(
        node="n1",
        ts=both.ts,
        host=None,
        gpus=both.gpus,
        gpu_count=3,
        events=both.events + (GpuEvent(ts=T0 + 1, kind=GpuEventKind.XID, gpu_index=1, xid=48),),
    )
    assert service(node, waker).receive("n1", both).transitions == 2
    assert [e.kind for e in node.list_events(job.id)].count("gpu_failed") == 1
    after = node.get_job(job.id)
    assert after is not None and after.state is JobState.PENDING and after.failures == 1
    assert waker.nodes == ["n1"]


def test_without_a_fatal_failure_nobody_is_woken(node: SqlStore) -> None:
    waker = FakeWaker()
    job = running_job(node, [0])
    result = service(node, waker).receive("n1", batch(T0 + 1, gpus=3, xid_on=0, xid=13))  # an application's Xid
    assert (result.transitions, result.capacity_changed, waker.nodes) == (0, False, [])
    assert state_of(node, job)[0] is JobState.RUNNING


def test_a_recovered_gpu_wakes_the_scheduler_again(node: SqlStore) -> None:
    waker = FakeWaker()
    health = service(node, waker, recovery_checks=2)
    health.receive("n1", batch(T0 + 1, gpus=3, xid_on=2))
    assert waker.nodes == ["n1"]  # GPU 2 out (no job on it): capacity changed all the same
    health.receive("n1", batch(T0 + 2, gpus=3))
    assert waker.nodes == ["n1"]  # one clean check of two: still out
    assert health.receive("n1", batch(T0 + 3, gpus=3)).capacity_changed
    assert waker.nodes == ["n1", "n1"]
    record = node.get_node("n1")
    assert record is not None and all(s.healthy for s in record.gpu_status)
    assert health.unhealthy() == {"n1": {}}


def test_a_job_without_retries_left_fails_with_the_reason(node: SqlStore) -> None:
    job = running_job(node, [0], max_retries=0)
    service(node, FakeWaker()).receive("n1", batch(T0 + 1, gpus=3, xid_on=0))
    state, reason = state_of(node, job)
    assert state is JobState.FAILED and "GPU 0 on n1 failed" in reason and "no retries left" in reason


def test_the_servers_waker_fires_the_scheduler_trigger_and_notifies_the_node() -> None:
    fired: list[str] = []

    class Trigger:
        def fire(self) -> None:
            fired.append("scheduler")

    class Notifier:
        def notify(self, node: str) -> None:
            fired.append(f"agent {node}")

    SchedulerAndAgentWaker(Trigger(), Notifier()).capacity_changed("n7")
    assert fired == ["scheduler", "agent n7"]


def test_the_failure_is_recorded_before_the_requeue_it_caused(node: SqlStore) -> None:
    job = running_job(node, [1])
    service(node, FakeWaker()).receive("n1", batch(T0 + 1, gpus=3, xid_on=1))
    kinds = [e.kind for e in node.list_events(job.id)]
    assert kinds.index("gpu_failed") < kinds.index("requeued"), kinds


def test_alerts_and_health_name_the_fault_in_words(node: SqlStore) -> None:
    health = service(node, FakeWaker())
    health.receive("n1", batch(T0 + 1, gpus=3, xid_on=1))
    assert health.unhealthy() == {"n1": {1: "Xid 79"}}

"""GPU health with several processes on one database (replicas, CORRAL_WORKERS): the process that receives a node's
telemetry holds its GPUs' health in memory; an admin's enable through another process reaches only the store. A GPU
enabled that way that faults again is taken out again (found by a hostile review: it stayed in the pool, faulting,
and the job on it kept running)."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.core.health import HealthPolicy
from corral.core.models import JobSpec
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.core.telemetry import GpuEvent, GpuEventKind, GpuSample, TelemetryBatch
from corral.server.health import TelemetryService
from corral.store.sql import SqlStore

T0 = 1_767_268_800.0


def _batch(ts: float, xid_on: int | None = None) -> TelemetryBatch:
    samples = tuple(GpuSample(ts=ts, index=i, uuid=f"GPU-n1-{i}", utilization_percent=50.0) for i in range(2))
    events = () if xid_on is None else (GpuEvent(ts=ts, kind=GpuEventKind.XID, gpu_index=xid_on, xid=79),)
    return TelemetryBatch(node="n1", ts=ts, host=None, gpus=samples, events=events, gpu_count=2)


def _healthy(store: SqlStore) -> dict[int, bool]:
    node = store.get_node("n1")
    assert node is not None
    return {s.index: s.healthy for s in node.gpu_status}


def test_a_gpu_enabled_through_another_process_is_taken_out_again_when_it_faults(store: SqlStore) -> None:
    gpus = [GpuInfo(index=i, uuid=f"GPU-n1-{i}", model="H100-80GB", memory_mib=81920) for i in range(2)]
    store.upsert_node("n1", "n1", "simulated", 8000, 65536, {}, gpus, datetime.fromtimestamp(T0, UTC))

    def service() -> TelemetryService:
        return TelemetryService(store, HealthPolicy(recovery_checks=2), backoff_s=0, clock=lambda: T0)

    agents, people = service(), service()  # the node's agent sends to `agents`; the admin talks to `people`
    assert agents.receive("n1", _batch(T0 + 1, xid_on=1)).transitions == 1
    assert _healthy(store)[1] is False
    # `corral gpus enable n1 1` through the other process (routers/nodes.py enable_gpu)
    store.set_gpu_disabled("n1", 1, False)
    store.set_gpu_health("n1", 1, True, "")
    people.admin_enable("n1", 1)
    job = store.create_job(JobSpec(command=("train",), gpus=1), datetime.fromtimestamp(T0, UTC))
    store.assign_job(job.id, "n1", [1], datetime.fromtimestamp(T0 + 2, UTC))
    assert agents.receive("n1", _batch(T0 + 3, xid_on=1)).transitions == 1  # the same fault again: out again
    assert _healthy(store)[1] is False
    requeued = store.get_job(job.id)
    assert requeued is not None and requeued.state is JobState.PENDING  # the job left the faulting GPU
    # and a GPU still out in the store stays out: nothing is enabled that no one enabled
    assert agents.receive("n1", _batch(T0 + 4)).transitions == 0
    assert _healthy(store)[1] is False


def test_the_people_process_refuses_to_enable_a_gpu_whose_last_batch_through_a_worker_still_faults(
    store: SqlStore,
) -> None:
    """CORRAL_WORKERS: the worker hands each batch to the starter (BatchChannel -> remember); the starter's check
    before an enable judges that batch although its own health memory never saw the node."""
    gpus = [GpuInfo(index=i, uuid=f"GPU-n1-{i}", model="H100-80GB", memory_mib=81920) for i in range(2)]
    store.upsert_node("n1", "n1", "simulated", 8000, 65536, {}, gpus, datetime.fromtimestamp(T0, UTC))
    people = TelemetryService(store, HealthPolicy(recovery_checks=2), backoff_s=0, clock=lambda: T0)
    assert people.standing_failure("n1", 1) is None  # nothing heard of n1
    people.remember(_batch(T0 + 1, xid_on=1), 18)
    assert "79" in (people.standing_failure("n1", 1) or "")
    assert people.standing_failure("n1", 0) is None
    people.remember(_batch(T0 + 2), 18)  # the fault is gone from the newest batch
    assert people.standing_failure("n1", 1) is None
    people.remember(_batch(T0 + 1, xid_on=1), 18)  # an older batch arriving late does not replace it
    assert people.standing_failure("n1", 1) is None
    assert people.telemetry.samples_ingested == 54

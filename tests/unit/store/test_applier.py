"""apply_plan over a MemoryStore: admissions commit in plan order (a conflict is rejected, the job stays PENDING),
preemptions become flags with the reason the server always wrote, and load_snapshot feeds the cycle full requests."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.core.resources import GpuInfo, Placement
from corral.core.states import JobState
from corral.scheduler.plan import Admit, Plan, compute_plan
from corral.scheduler.queueing.preemption import Preemption
from corral.store.applier import apply_plan
from corral.store.memory import MemoryStore
from corral.store.records import JobSpec
from corral.store.snapshot import load_snapshot

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _store(gpus: int = 2) -> MemoryStore:
    store = MemoryStore()
    store.create_tenant("default", T0)
    store.upsert_node(
        "n1",
        "n1",
        "simulated",
        8000,
        65536,
        {},
        [GpuInfo(index=i, uuid=f"G{i}", model="H100-80GB", memory_mib=81920) for i in range(gpus)],
        T0,
    )
    return store


def _admit(job_id: int, *gpus: int) -> Admit:
    return Admit(str(job_id), "H100-80GB", (Placement(node="n1", gpu_indices=tuple(gpus)),))


def test_a_conflicting_admission_is_rejected_and_stays_pending() -> None:
    store = _store()
    a, b = (store.create_job(JobSpec(command=("x",), gpus=1), T0).id for _ in range(2))
    applied = apply_plan(store, Plan(admit=(_admit(a, 0), _admit(b, 0)), preempt=(), nominate=(), pending={}), T0)
    assert (applied.started, applied.rejected) == ([str(a)], [str(b)])
    got = store.get_job(b)
    assert got is not None and got.state is JobState.PENDING and got.placed_parts == ()


def test_preemptions_flag_the_victims_and_name_their_nodes() -> None:
    store = _store()
    victim = store.create_job(JobSpec(command=("x",), gpus=1), T0).id
    assert store.assign_job_parts(victim, [("n1", (0,))], T0)
    plan = Plan(
        admit=(),
        preempt=(Preemption(str(victim), "9", "reclaim"), Preemption("404", "9", "rank")),
        nominate=(),
        pending={},
    )
    applied = apply_plan(store, plan, T0)
    assert (applied.preempted, applied.preempted_nodes) == ([str(victim)], ["n1"])
    got = store.get_job(victim)
    assert got is not None and got.preempt_requested and got.preempted_for == 9
    assert got.reason == "preempted for job 9: reclaiming its tenant's guarantee"
    # The next cycle's snapshot knows whose GPUs these are (node_room counts them for job 9 only), and the
    # job forgets it once it is back in the queue.
    snap = load_snapshot(store, T0, grace_s=10.0, nominated={}, usage_gpu_s={})
    assert [(r.job.id, r.preempted_for) for r in snap.queue.running] == [(str(victim), "9")]
    assert store.requeue_job(victim, "preempted", T0, preempted=True)
    requeued = store.get_job(victim)
    assert requeued is not None and requeued.preempted_for is None


def test_load_snapshot_then_plan_then_apply_starts_what_fits() -> None:
    store = _store(gpus=1)
    big = store.create_job(JobSpec(command=("x",), gpus=1, cpu_milli=6000), T0).id
    small = store.create_job(JobSpec(command=("x",), gpus=1, gpu_milli=500, cpu_milli=4000), T0).id
    snapshot = load_snapshot(store, T0, grace_s=10.0, nominated={}, usage_gpu_s={})
    assert [q.request for q in snapshot.queue.pending] == [
        store.get_job(big).spec.request,  # type: ignore[union-attr]
        store.get_job(small).spec.request,
    ]  # type: ignore[union-attr]
    applied = apply_plan(store, compute_plan(snapshot, T0.timestamp()), T0)
    # both fit the GPU's share only in part: the host has 8000 CPU milli, so only one of them can start
    assert len(applied.started) == 1 and applied.rejected == []

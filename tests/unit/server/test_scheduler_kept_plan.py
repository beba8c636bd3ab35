"""A scheduling pass that finds the same work as the last plan's, when that plan started, preempted and nominated
nothing, keeps the plan instead of computing it again (Scheduler.recheck_s): a queue that fits nowhere cost the
server half its interpreter. What a user relies on: any change that could start a job (a submit, a job ending, a
node joining or uncordoned, a GPU healthy again, a quota raised, a retry due) is planned on the very next pass, and
why each job waits reads exactly as a pass that computes every time says (SQLite and PostgreSQL)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.server.background.scheduling import Scheduler
from corral.server.services.notify import NodeNotifier
from corral.store.records import JobSpec, Quota
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NEVER = 1e9  # recheck_s: only a change of work makes a pass compute


def _node(store: SqlStore, name: str, model: str = "H100-80GB", gpus: int = 2, memory_mib: int = 512_000) -> None:
    devices = [GpuInfo(index=i, uuid=f"GPU-{name}-{i}", model=model, memory_mib=81920) for i in range(gpus)]
    store.upsert_node(name, name, "simulated", 64_000, memory_mib, {}, devices, T0)


def _state(store: SqlStore, job_id: int) -> JobState:
    job = store.get_job(job_id)
    assert job is not None
    return job.state


def test_a_queue_that_fits_nowhere_is_planned_once_and_again_after_recheck_s(store: SqlStore) -> None:
    _node(store, "n1")
    sched = Scheduler(store, NodeNotifier(), "corral", 1.0, recheck_s=10.0)
    big = [store.create_job(JobSpec(command=("x",), gpus=4), T0) for _ in range(3)]
    assert sched.run_once(T0) == []
    reasons = dict(sched.pending_reasons)
    assert set(reasons) == {j.id for j in big} and sched.passes_kept == 0
    store.touch_node("n1", T0 + timedelta(seconds=1))  # a heartbeat changes nothing a plan reads
    assert sched.run_once(T0 + timedelta(seconds=1)) == []
    assert sched.passes_kept == 1 and sched.pending_reasons == reasons
    assert sched.run_once(T0 + timedelta(seconds=11)) == []  # recheck_s after the plan: computed again
    assert sched.passes_kept == 1 and sched.pending_reasons == reasons
    for job in big:  # the queue empties: what the passes kept of its jobs is let go
        store.request_cancel(job.id, T0)
    assert sched.run_once(T0 + timedelta(seconds=12)) == [] and sched.pending_reasons == {}
    assert not sched._kept.pending._kept and not sched.predictions._answers  # none of those jobs is held any more


def test_each_change_that_could_start_a_job_is_planned_on_the_next_pass(store: SqlStore) -> None:
    _node(store, "n1", gpus=2)
    tenant = store.create_tenant("vision", T0).id
    sched = Scheduler(store, NodeNotifier(), "corral", 1.0, recheck_s=NEVER)
    at = iter(T0 + timedelta(seconds=s) for s in range(1, 1000))

    def keeps() -> None:
        """A pass that keeps the plan: nothing changed since the last one."""
        kept = sched.passes_kept
        assert sched.run_once(next(at)) == []
        assert sched.passes_kept == kept + 1

    def job(gpus: int) -> int:
        return store.create_job(JobSpec(command=("x",), gpus=gpus, tenant_id=tenant), T0).id

    too_big = job(4)  # bigger than any node: it waits, and every pass after the first keeps the plan
    assert sched.run_once(next(at)) == []
    keeps()
    fits = job(2)  # a job submitted that fits
    assert sched.run_once(next(at)) == [fits]
    waits = job(2)  # the node is full
    assert sched.run_once(next(at)) == []
    keeps()
    assert store.finish_job(fits, JobState.SUCCEEDED, 0, "", next(at))  # a job ending frees it
    assert sched.run_once(next(at)) == [waits]
    third = job(2)
    assert sched.run_once(next(at)) == []
    keeps()
    _node(store, "n2", gpus=2)  # a node joining
    assert sched.run_once(next(at)) == [third]
    _node(store, "n3", gpus=4)
    assert store.set_node_cordoned("n3", True)
    assert sched.run_once(next(at)) == []
    keeps()
    assert store.set_node_cordoned("n3", False)  # a node uncordoned
    assert sched.run_once(next(at)) == [too_big]
    _node(store, "n4", gpus=1)
    assert store.set_gpu_health("n4", 0, False, "XID 79")
    one = job(1)
    assert sched.run_once(next(at)) == []
    keeps()
    assert store.set_gpu_health("n4", 0, True, "")  # a GPU healthy again
    assert sched.run_once(next(at)) == [one]
    _node(store, "n5", gpus=1)
    store.set_quota(Quota(tenant_id=tenant, gpu_model="", guaranteed_gpus=0, max_gpus=9))  # it holds 9
    capped = job(1)
    assert sched.run_once(next(at)) == []
    assert sched.pending_codes[capped] == "quota"
    keeps()
    store.set_quota(Quota(tenant_id=tenant, gpu_model="", guaranteed_gpus=0, max_gpus=10))  # a quota raised
    assert sched.run_once(next(at)) == [capped]
    # a job sent back to the queue after a failure waits out its backoff (kept passes meanwhile), then starts
    failed_at = next(at)
    assert store.requeue_job(one, "GPU 0 on n4 failed", failed_at, not_before=failed_at + timedelta(seconds=30))
    assert _state(store, one) is JobState.PENDING
    assert sched.run_once(next(at)) == []
    assert sched.pending_codes[one] == "retry-backoff"
    keeps()
    assert sched.run_once(failed_at + timedelta(seconds=31)) == [one]
    # a node registering again with more host memory than a job asks for
    _node(store, "n6", gpus=1)
    roomy = store.create_job(JobSpec(command=("x",), gpus=1, memory_mib=600_000), T0).id
    assert sched.run_once(next(at)) == []
    keeps()
    _node(store, "n6", gpus=1, memory_mib=1_024_000)
    assert sched.run_once(next(at)) == [roomy]


def test_a_change_that_moves_only_why_or_when_a_job_waits_is_published_on_the_next_pass(store: SqlStore) -> None:
    _node(store, "n1", gpus=2)
    tenant = store.create_tenant("vision", T0).id
    sched = Scheduler(store, NodeNotifier(), "corral", 1.0, recheck_s=NEVER, cancel_grace_s=10.0)
    at = iter(T0 + timedelta(seconds=s) for s in range(1, 1000))
    holder = store.create_job(JobSpec(command=("x",), gpus=2, time_limit_s=3600, tenant_id=tenant), T0).id
    assert sched.run_once(next(at)) == [holder]
    waits = store.create_job(JobSpec(command=("x",), gpus=2, tenant_id=tenant), T0).id
    assert sched.run_once(next(at)) == []
    _, eta = sched.pending_info[waits]
    assert eta is not None and eta > T0 + timedelta(seconds=3000)  # the holder's time limit
    now = next(at)
    assert sched.run_once(now) == [] and sched.passes_kept == 1
    assert store.request_cancel(holder, now)  # the holder is told to stop: the GPUs are free within the grace
    now = next(at)
    assert sched.run_once(now) == []
    _, eta = sched.pending_info[waits]
    assert eta is not None and eta <= now + timedelta(seconds=10), eta
    kept = sched.passes_kept  # while it stops (its deadline moves with time alone) the plan is kept
    assert sched.run_once(next(at)) == [] and sched.passes_kept == kept + 1
    assert store.finish_job(holder, JobState.CANCELLED, None, "cancelled", now)
    assert sched.run_once(next(at)) == [waits]


def test_a_strict_queue_made_best_effort_starts_the_job_behind_its_blocked_head(store: SqlStore) -> None:
    _node(store, "n1", gpus=1)
    tenant = store.create_tenant("vision", T0).id
    store.upsert_queue(tenant, "default", "strict", 0)
    sched = Scheduler(store, NodeNotifier(), "corral", 1.0, queueing="sjf", recheck_s=NEVER)  # sjf: no backfill
    at = iter(T0 + timedelta(seconds=s) for s in range(1, 1000))
    head = store.create_job(JobSpec(command=("x",), gpus=2, time_limit_s=60, tenant_id=tenant), T0).id
    small = store.create_job(JobSpec(command=("x",), gpus=1, time_limit_s=600, tenant_id=tenant), T0).id
    _node(store, "n2", gpus=2)
    busy = store.create_job(JobSpec(command=("x",), gpus=2, tenant_id=None), T0).id
    assert store.assign_job(busy, "n2", [0, 1], T0)  # the head fits on n2 once this ends
    assert sched.run_once(next(at)) == []
    assert head in sched.pending_codes and small in sched.pending_codes  # behind its head
    kept = sched.passes_kept
    assert sched.run_once(next(at)) == [] and sched.passes_kept == kept + 1
    store.upsert_queue(tenant, "default", "best-effort", 0)
    assert sched.run_once(next(at)) == [small]


def test_published_reasons_match_a_scheduler_that_plans_every_pass(store: SqlStore) -> None:
    """Two replicas that do not lead read the same store after each random change: one keeps quiet plans, the other
    computes every pass. Both publish the same reasons, codes, positions and ETAs, and plan the same starts."""
    rng = random.Random(7)
    tenants = [store.create_tenant(f"t{i}", T0).id for i in range(2)]
    _node(store, "n0", gpus=4)
    keeps = Scheduler(store, NodeNotifier(), "corral", 1.0, leading=lambda: False, recheck_s=NEVER)
    computes = Scheduler(store, NodeNotifier(), "corral", 1.0, leading=lambda: False, recheck_s=0.0)
    nodes = ["n0"]
    now = T0 + timedelta(seconds=5)  # one instant: what time alone moves is the difference the kept plan accepts
    for step in range(200):
        move = rng.random()
        pending = [j.id for j in store.list_jobs(states=[JobState.PENDING])]
        running = [j.id for j in store.list_jobs(states=[JobState.RUNNING])]
        if move < 0.25:
            gpus, model = rng.choice((1, 2, 4, 8)), rng.choice(((), ("H100",), ("B200",)))
            tenant = rng.choice(tenants)
            limit = rng.choice((None, 600, 3600))
            spec = JobSpec(command=("x",), gpus=gpus, gpu_models=model, tenant_id=tenant, time_limit_s=limit)
            if rng.random() < 0.3 and pending:  # one leaves the queue as another joins it: the same count
                store.request_cancel(rng.choice(pending), T0)
            store.create_job(spec, T0)
        elif move < 0.4 and computes.last_cycle is not None:  # the leader applied the plan
            for admit in computes.last_cycle[1].admit:
                store.assign_job_parts(int(admit.job_id), [(p.node, p.gpu_indices) for p in admit.placements], T0)
        elif move < 0.47 and running:
            store.finish_job(rng.choice(running), JobState.SUCCEEDED, 0, "", T0)
        elif move < 0.5 and (pending or running):
            store.request_cancel(rng.choice(pending or running), T0)  # a running job stops within the grace
        elif move < 0.55:
            nodes.append(f"n{len(nodes)}")
            _node(store, nodes[-1], gpus=rng.choice((1, 2, 4)))
        elif move < 0.6:
            store.set_node_cordoned(rng.choice(nodes), rng.random() < 0.5)
        elif move < 0.65:
            store.set_gpu_health(rng.choice(nodes), 0, rng.random() < 0.6, "XID 79")
        elif move < 0.7:
            limit = rng.choice((None, 1, 4, 16))
            store.set_quota(Quota(tenant_id=rng.choice(tenants), gpu_model="", guaranteed_gpus=0, max_gpus=limit))
        elif move < 0.75:
            store.set_tenant_weight(rng.choice(tenants), rng.choice((0.5, 1.0, 2.0)))
        else:  # a heartbeat: no change a plan reads
            store.touch_node(rng.choice(nodes), now)
        kept_before = keeps.passes_kept
        keeps.run_once(now)
        computes.run_once(now)
        assert computes.passes_kept == 0
        kept = keeps.passes_kept > kept_before
        if kept:  # a kept plan starts nothing: computing it would have started nothing either
            assert computes.last_cycle is not None and not computes.last_cycle[1].admit, step
        else:
            assert keeps.last_cycle is not None or computes.last_cycle is None, step
            if keeps.last_cycle is not None and computes.last_cycle is not None:
                assert keeps.last_cycle[1].admit == computes.last_cycle[1].admit, step
        assert keeps.pending_reasons == computes.pending_reasons, step
        assert keeps.pending_codes == computes.pending_codes, step
        assert keeps.pending_info == computes.pending_info, step
    assert keeps.passes_kept > 20  # the walk kept plans often: the comparison above was about them


def test_why_a_job_waits_outside_the_plan_comes_first_and_a_pool_note_replaces_the_plans_reason(
    store: SqlStore,
) -> None:
    """What each pass publishes, kept plan or not: a retry's backoff and a tenant's spent budget come ahead of the
    plan's reason; a cloud pool's note replaces the plan's reason (never a retry's); new notes are published on the
    next pass even while the plan is kept."""
    _node(store, "n0", gpus=2)
    broke = store.create_tenant("broke", T0).id
    sched = Scheduler(store, NodeNotifier(), "corral", 1.0, recheck_s=NEVER)
    fits_nowhere = store.create_job(JobSpec(command=("x",), gpus=8), T0).id
    noted = store.create_job(JobSpec(command=("x",), gpus=8), T0).id
    held = store.create_job(JobSpec(command=("x",), gpus=1, tenant_id=broke), T0).id
    retrying = store.create_job(JobSpec(command=("x",), gpus=1), T0).id
    assert store.assign_job_parts(retrying, [("n0", [0])], T0)
    assert store.requeue_job(retrying, "GPU 0 on n9 failed", T0, not_before=T0 + timedelta(hours=1))
    sched.held_tenants = lambda: {broke: "the tenant's budget is used up"}
    sched.set_pool_notes({noted: ("scaling_up", "a node is starting in pool p"), retrying: ("scaling_up", "no")})
    now = T0 + timedelta(seconds=1)
    for kept in (False, True):
        sched.run_once(now)
        assert (sched.passes_kept > 0) is kept
        codes, reasons = sched.pending_codes, sched.pending_reasons
        assert (
            codes[fits_nowhere] not in ("scaling_up", "budget", "retry-backoff") and fits_nowhere in sched.pending_info
        )
        assert (codes[noted], reasons[noted]) == ("scaling_up", "a node is starting in pool p")
        assert (codes[held], reasons[held]) == ("budget", "the tenant's budget is used up")
        assert codes[retrying] == "retry-backoff" and reasons[retrying].startswith(
            "waiting to retry at 13:00:00 UTC after:"
        )
    sched.set_pool_notes({fits_nowhere: ("scaling_up", "a node is starting in pool q")})
    sched.run_once(now)
    assert sched.passes_kept == 2  # the plan is kept; the notes are new
    assert (sched.pending_codes[fits_nowhere], sched.pending_reasons[fits_nowhere]) == (
        "scaling_up",
        "a node is starting in pool q",
    )
    assert sched.pending_codes[noted] != "scaling_up"

"""The scheduling cycle (plan.py): fair share divides the engine's pool, and `explain=False` skips reasons."""

from __future__ import annotations

import random

from sched_builders import make_node

from corral.core.requests import ResourceRequest
from corral.scheduler.cluster import REASON_GANG_SHORT, Cluster
from corral.scheduler.framework import REASON_CPU
from corral.scheduler.plan import UNRANKED, Snapshot, compute_plan
from corral.scheduler.queueing import QueuedJob, QueueingPolicy, QueueState, RunningJob, reasons

FAIR = QueueingPolicy("fair", "corral", fair_share=True)  # the corral order ranks by fair-share tier
FIFO = QueueingPolicy("skip", "fifo")


def _job(id: str, tenant: str, submit: float, gpus: int = 1) -> QueuedJob:
    req = ResourceRequest(gpus=gpus)
    return QueuedJob(id, tenant, gpus=gpus, gpu_milli=req.gpu_milli, submit_s=submit, request=req)


def _jobs() -> list[QueuedJob]:
    return [_job("a1", "a", 0.0), _job("a2", "a", 1.0), _job("b1", "b", 2.0)]


def test_fair_share_divides_the_pool_of_the_nodes_when_the_queue_names_none() -> None:
    nodes = [make_node("n").gpus(2).build()]
    plan = compute_plan(Snapshot(nodes, QueueState(_jobs(), [])), 0.0, "bestfit", FAIR)
    # Two GPUs, two tenants: each is owed one, so b1 (within b's share) passes a2 (a's borrowed second GPU).
    assert sorted(a.job_id for a in plan.admit) == ["a1", "b1"]
    assert set(plan.pending) == {"a2"}
    fifo = compute_plan(Snapshot(nodes, QueueState(_jobs(), [])), 0.0, "bestfit", FIFO)
    assert sorted(a.job_id for a in fifo.admit) == ["a1", "a2"]


def test_fair_share_uses_the_pool_the_queue_names() -> None:
    nodes = [make_node("n").gpus(2).build()]
    queue = QueueState(_jobs(), [], pool_milli={"A100-80GB": 4000})
    plan = compute_plan(Snapshot(nodes, queue), 0.0, "bestfit", FAIR)
    # A pool of four GPUs owes `a` two: both of its jobs are within its share and go first, oldest first.
    assert sorted(a.job_id for a in plan.admit) == ["a1", "a2"]


def test_without_explain_waiting_gpu_jobs_carry_no_reason() -> None:
    nodes = [make_node("n").gpus(1).build()]
    jobs = [_job("first", "a", 0.0), _job("second", "a", 1.0)]
    explained = compute_plan(Snapshot(nodes, QueueState(jobs, [])), 0.0, "bestfit", FIFO)
    assert [a.job_id for a in explained.admit] == ["first"]
    assert set(explained.pending) == {"second"}
    quiet = compute_plan(Snapshot(nodes, QueueState(jobs, [])), 0.0, "bestfit", FIFO, explain=False)
    assert [a.job_id for a in quiet.admit] == ["first"]
    assert "second" not in quiet.pending


def test_a_live_cluster_holds_what_the_plan_admits() -> None:
    nodes = [make_node("n").gpus(2).build()]
    engine = Cluster.from_states(nodes, "bestfit")
    plan = compute_plan(Snapshot([], QueueState(_jobs(), [])), 0.0, "bestfit", FIFO, cluster=engine)
    assert sorted(a.job_id for a in plan.admit) == ["a1", "a2"]
    assert engine.node_states()[0].gpu_used_milli == (1000, 1000)


def _cpu_job(id: str, submit: float, cpu_milli: int, nodes: int = 1) -> QueuedJob:
    return QueuedJob(
        id, "t", gpus=0, nodes=nodes, submit_s=submit, request=ResourceRequest(cpu_milli=cpu_milli, memory_mib=64)
    )


def test_jobs_without_gpus_go_first_oldest_first_and_wait_with_a_capacity_reason() -> None:
    nodes = [make_node("n").gpus(1).host(4000, 1024).build()]
    jobs = [_job("gpu", "t", 0.0), _cpu_job("late", 5.0, 3000), _cpu_job("early", 1.0, 3000)]
    plan = compute_plan(Snapshot(nodes, QueueState(jobs, [])), 0.0, "bestfit", FIFO)
    assert [a.job_id for a in plan.admit] == ["early", "gpu"]
    early, gpu = plan.admit
    assert early.model == "" and [(p.node, p.cpu_milli, p.memory_mib) for p in early.placements] == [("n", 3000, 64)]
    assert gpu.model == "A100-80GB" and [(p.node, p.gpu_indices) for p in gpu.placements] == [("n", (0,))]
    status = plan.pending["late"]
    assert (status.reason, status.detail, status.position) == (reasons.CAPACITY, f"1 node: {REASON_CPU}", UNRANKED)


def test_a_multi_node_job_without_gpus_takes_one_part_per_node() -> None:
    nodes = [make_node(f"n{i}").host(4000, 1024).build() for i in range(3)]
    jobs = [_cpu_job("pair", 0.0, 3000, nodes=2), _cpu_job("trio", 1.0, 3000, nodes=3)]
    plan = compute_plan(Snapshot(nodes, QueueState(jobs, [])), 0.0, "bestfit", FIFO)
    assert [a.job_id for a in plan.admit] == ["pair"]
    assert len({p.node for p in plan.admit[0].placements}) == 2
    assert plan.pending["trio"].reason == reasons.CAPACITY
    assert REASON_GANG_SHORT in plan.pending["trio"].detail


def test_the_rng_seeds_the_placement_ties() -> None:
    nodes = [make_node(f"n{i:02d}").gpus(8).build() for i in range(12)]
    chosen = set()
    for seed in range(8):
        plan = compute_plan(
            Snapshot(nodes, QueueState([_job("j", "t", 0.0)], [])), 0.0, "random", FIFO, rng=random.Random(seed)
        )
        chosen.add(plan.admit[0].placements[0].node)
    assert len(chosen) > 1


def test_queueing_by_name_and_an_empty_plan_lists() -> None:
    nodes = [make_node("n").gpus(2).used(1000).build()]
    running = [RunningJob(_job("old", "t", 0.0), 0.0, "A100-80GB", parts=(("n", (0,)),))]
    jobs = [_job("big", "t", 1.0, gpus=2), _job("small", "t", 2.0)]
    plan = compute_plan(Snapshot(nodes, QueueState(jobs, running)), 10.0, "bestfit", "fifo")
    assert plan.admit == ()  # classic FIFO: the blocked head blocks the job behind it
    assert set(plan.pending) == {"big", "small"}
    assert plan.preempt == () and plan.nominate == ()


def test_running_jobs_hold_their_gpus_in_the_corral_queue() -> None:
    nodes = [make_node("n").gpus(2).used(1000).build()]
    running = [RunningJob(_job("old", "t", 0.0), 0.0, "A100-80GB", parts=(("n", (0,)),))]
    plan = compute_plan(Snapshot(nodes, QueueState([_job("new", "u", 50.0)], running)), 100.0, "bestfit", "corral")
    assert [(a.job_id, [p.gpu_indices for p in a.placements]) for a in plan.admit] == [("new", [(1,)])]

"""Invariants of compute_plan (Hypothesis), for every placement policy: every placement fits its request
and its node, no GPU is over-committed, gang parts are on distinct nodes, the same seed gives the same plan,
and a batch of jobs gets the allocations that placing them one at a time on the engine gives."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.requests import ResourceRequest, model_matches
from corral.core.resources import GpuInfo, NodeInfo, NodeState, Placement
from corral.scheduler.choices import Unschedulable
from corral.scheduler.cluster import Cluster
from corral.scheduler.plan import Plan, Snapshot, compute_plan
from corral.scheduler.plugins import policy_names
from corral.scheduler.queueing import QueuedJob, QueueingPolicy, QueueState

MODELS = (("A100-80GB", 81920), ("T4-16GB", 16384))
BEST_EFFORT = QueueingPolicy("best-effort", "fifo")


@st.composite
def node_st(draw: st.DrawFn, i: int) -> NodeState:
    model, mem = draw(st.sampled_from(MODELS))
    count = draw(st.integers(0, 8))
    gpus = tuple(GpuInfo(g, f"n{i}-{g}", model, mem, healthy=draw(st.booleans()) or g > 0) for g in range(count))
    info = NodeInfo(f"n{i}", gpus, draw(st.integers(1, 64)) * 1000, draw(st.sampled_from([65536, 262144])))
    used = tuple(draw(st.sampled_from([0, 0, 0, 250, 500, 1000])) for _ in gpus)
    cpu_used = draw(st.integers(0, info.cpu_milli // 2))
    return NodeState(info, used, cpu_used, 0, draw(st.sampled_from([True, True, True, False])))


nodes_st = st.integers(1, 8).flatmap(lambda n: st.tuples(*(node_st(i) for i in range(n)))).map(list)


@st.composite
def job_st(draw: st.DrawFn, i: int) -> QueuedJob:
    share = draw(st.booleans())
    gpus = 1 if share else draw(st.sampled_from([0, 1, 2, 4, 8]))
    req = ResourceRequest(
        gpus=gpus,
        gpu_milli=draw(st.sampled_from([100, 250, 500, 700])) if share else 1000,
        gpu_models=draw(st.sampled_from([(), ("A100",), ("T4",), ("A100", "T4")])),
        min_gpu_memory_mib=draw(st.sampled_from([0, 0, 20000])),
        cpu_milli=draw(st.sampled_from([0, 1000, 8000, 48000])),
        memory_mib=draw(st.sampled_from([0, 4096, 131072])),
    )
    pinned: dict[tuple[str, ...], str] = {("A100",): "A100-80GB", ("T4",): "T4-16GB"}
    model = pinned.get(req.gpu_models, "")
    nodes = 1 if share else draw(st.sampled_from([1, 1, 1, 2, 3]))
    return QueuedJob(
        f"j{i}",
        draw(st.sampled_from(["t1", "t2", "t3"])),
        gpus=req.gpus,
        gpu_milli=req.gpu_milli,
        model=model,
        nodes=nodes,
        submit_s=float(i),
        request=req,
    )


jobs_st = st.integers(0, 25).flatmap(lambda n: st.tuples(*(job_st(i) for i in range(n)))).map(list)
policy_st = st.sampled_from(policy_names())


def _plan(
    nodes: list[NodeState], jobs: list[QueuedJob], policy: str, seed: int, queueing: QueueingPolicy | str = "corral"
) -> Plan:
    return compute_plan(Snapshot(nodes, QueueState(jobs)), 100.0, policy, queueing, rng=random.Random(seed))


def _check_fits(nodes: list[NodeState], jobs: list[QueuedJob], plan: Plan) -> None:
    by_name = {n.info.name: n for n in nodes}
    by_id = {j.id: j for j in jobs}
    gpu_used = {(n.info.name, p): u for n in nodes for p, u in enumerate(n.gpu_used_milli)}
    cpu_used = {n.info.name: n.cpu_used_milli for n in nodes}
    mem_used = {n.info.name: n.memory_used_mib for n in nodes}
    for admit in plan.admit:
        job = by_id[admit.job_id]
        req = job.request
        assert req is not None
        assert len(admit.placements) == job.nodes
        assert len({p.node for p in admit.placements}) == job.nodes  # gang parts on distinct nodes
        for p in admit.placements:
            node = by_name[p.node]
            assert node.schedulable
            assert len(set(p.gpu_indices)) == len(p.gpu_indices) == req.gpus
            assert (p.gpu_milli, p.cpu_milli, p.memory_mib) == (req.gpu_milli, req.cpu_milli, req.memory_mib)
            for idx in p.gpu_indices:
                pos = next(k for k, g in enumerate(node.info.gpus) if g.index == idx)
                gpu = node.info.gpus[pos]
                assert gpu.healthy and model_matches(gpu.model, req.gpu_models) and gpu.model == admit.model
                assert gpu.memory_mib >= req.min_gpu_memory_mib
                gpu_used[(p.node, pos)] += p.gpu_milli
            cpu_used[p.node] += p.cpu_milli
            mem_used[p.node] += p.memory_mib
    assert all(u <= 1000 for u in gpu_used.values())
    assert all(cpu_used[n] <= by_name[n].info.cpu_milli for n in cpu_used)
    assert all(mem_used[n] <= by_name[n].info.memory_mib for n in mem_used)
    assert set(plan.pending) | {a.job_id for a in plan.admit} == set(by_id)


@settings(max_examples=150, deadline=None)
@given(nodes_st, jobs_st, policy_st, st.integers(0, 2**31))
def test_every_placement_fits_its_request_and_node(
    nodes: list[NodeState], jobs: list[QueuedJob], policy: str, seed: int
) -> None:
    _check_fits(nodes, jobs, _plan(nodes, jobs, policy, seed))


@settings(max_examples=50, deadline=None)
@given(nodes_st, jobs_st, policy_st, st.integers(0, 2**31))
def test_same_seed_same_plan(nodes: list[NodeState], jobs: list[QueuedJob], policy: str, seed: int) -> None:
    assert _plan(nodes, jobs, policy, seed) == _plan(nodes, jobs, policy, seed)


@settings(max_examples=150, deadline=None)
@given(nodes_st, jobs_st, policy_st, st.integers(0, 2**31))
def test_a_batch_is_placed_as_one_at_a_time(
    nodes: list[NodeState], jobs: list[QueuedJob], policy: str, seed: int
) -> None:
    """Under best-effort queueing without quotas a cycle admits exactly what placing each job in turn on
    the engine would (GPU jobs in submit order after the jobs without GPUs): no job that could start is
    skipped by a short cut, and none waits behind one that cannot."""
    plan = _plan(nodes, jobs, policy, seed, BEST_EFFORT)
    cluster = Cluster.from_states(nodes, policy, rng=random.Random(seed))
    expected: dict[str, list[Placement]] = {}
    for job in sorted(jobs, key=lambda j: (j.gpus > 0, j.submit_s)):
        req = job.to_request()
        got = cluster.place(req) if job.nodes == 1 else _place_gang_on_one_model(cluster, req, job.nodes)
        if not isinstance(got, Unschedulable):
            expected[job.id] = got if isinstance(got, list) else [got]
    assert {a.job_id: list(a.placements) for a in plan.admit} == expected


def _place_gang_on_one_model(cluster: Cluster, req: ResourceRequest, count: int) -> list[Placement] | Unschedulable:
    """A gang runs on one GPU model: where the engine would spread one over several, it goes on its first part's
    model, else on the first other model (in the engine's order) it fits on. Found first, then applied (as the
    ledger does: a seeded policy draws once per search)."""
    found = cluster.find_gang(req, count)
    if not isinstance(found, Unschedulable) and len({cluster.model_of(p) for p in found}) > 1:
        first = cluster.model_of(found[0])
        for model in [first, *(m for m in cluster.gpu_models() if m != first and model_matches(m, req.gpu_models))]:
            found = cluster.find_gang(replace(req, gpu_models=(model,)), count)
            if not isinstance(found, Unschedulable):
                break
    if not isinstance(found, Unschedulable):
        for p in found:
            cluster.apply(p)
    return found


def test_full_requests_change_what_admission_decides() -> None:
    """With the old short cut (same tenant and GPU demand at least as large = skip), `light` would wait."""
    node = NodeState(
        NodeInfo("a", (GpuInfo(0, "g", "A100-80GB", 81920), GpuInfo(1, "h", "A100-80GB", 81920)), 8000, 65536)
    )
    heavy = ResourceRequest(gpus=1, cpu_milli=64000)
    light = ResourceRequest(gpus=1, cpu_milli=1000)
    jobs = [QueuedJob("heavy", "t", request=heavy), QueuedJob("light", "t", submit_s=1, request=light)]
    plan = _plan([node], jobs, "bestfit", 0, BEST_EFFORT)
    assert [a.job_id for a in plan.admit] == ["light"]
    assert defaultdict(str, {j: s.reason for j, s in plan.pending.items()})["heavy"] == "capacity"

"""Invariants of the indexed Cluster (Hypothesis): no over-commit, shares <= 1000, seeded determinism,
and agreement with the plain compute_placement path."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo, NodeInfo, Placement
from corral.scheduler.cluster import Cluster
from corral.scheduler.cycle import Unschedulable, apply_placement, compute_placement
from corral.scheduler.framework import REASON_GPUS_BUSY, ScoreContext
from corral.scheduler.plugins import policy_names
from corral.scheduler.workload import compute_workload_profile

MODELS = ("A100-80GB", "T4-16GB")

nodes_st = st.lists(
    st.tuples(st.integers(0, 8), st.sampled_from(MODELS), st.integers(1, 64)), min_size=1, max_size=12
).map(
    lambda specs: [
        NodeInfo(f"n{i}", tuple(GpuInfo(g, f"n{i}-{g}", model, 16384) for g in range(count)), cpu * 1000, 262144)
        for i, (count, model, cpu) in enumerate(specs)
    ]
)
request_st = st.one_of(
    st.builds(
        lambda m, c: ResourceRequest(gpus=1, gpu_milli=m, cpu_milli=c), st.integers(1, 999), st.integers(0, 8000)
    ),
    st.builds(
        lambda g, c, mdl: ResourceRequest(gpus=g, cpu_milli=c, gpu_models=mdl),
        st.sampled_from([0, 1, 2, 4, 8]),
        st.integers(0, 16000),
        st.sampled_from([(), ("A100",), ("T4",)]),
    ),
)
policy_st = st.sampled_from([p for p in policy_names() if p != "lru"])


def _run(nodes: list[NodeInfo], requests: list[ResourceRequest], policy: str, seed: int) -> list[object]:
    ctx = ScoreContext(workload=compute_workload_profile(requests))
    cluster = Cluster(nodes, policy, ctx, random.Random(seed))
    out = [cluster.place(r) for r in requests]
    for state in cluster.node_states():
        assert all(0 <= u <= 1000 for u in state.gpu_used_milli), state
        assert state.cpu_used_milli <= state.info.cpu_milli
        assert state.memory_used_mib <= state.info.memory_mib
    assert cluster.gpu_allocated_milli == sum(p.gpu_milli * len(p.gpu_indices) for p in out if isinstance(p, Placement))
    return out


@settings(max_examples=60, deadline=None)
@given(nodes_st, st.lists(request_st, max_size=40), policy_st, st.integers(0, 2**31))
def test_never_overcommits(nodes: list[NodeInfo], requests: list[ResourceRequest], policy: str, seed: int) -> None:
    _run(nodes, requests, policy, seed)


@settings(max_examples=30, deadline=None)
@given(nodes_st, st.lists(request_st, max_size=30), policy_st, st.integers(0, 2**31))
def test_same_seed_same_decisions(
    nodes: list[NodeInfo], requests: list[ResourceRequest], policy: str, seed: int
) -> None:
    assert _run(nodes, requests, policy, seed) == _run(nodes, requests, policy, seed)


@settings(max_examples=40, deadline=None)
@given(nodes_st, st.lists(request_st, max_size=30))
def test_cluster_places_whenever_the_snapshot_path_can(nodes: list[NodeInfo], requests: list[ResourceRequest]) -> None:
    """Cluster and compute_placement agree on feasibility, step by step, from the same state."""
    cluster = Cluster(nodes, "bestfit")
    for r in requests:
        snapshot = cluster.node_states()
        expected = compute_placement(r, snapshot, "bestfit")
        got = cluster.place(r)
        assert isinstance(got, Unschedulable) == isinstance(expected, Unschedulable)
        if isinstance(got, Unschedulable):
            assert isinstance(expected, Unschedulable)
            assert got.explanation.as_dict() == expected.explanation.as_dict()
        else:
            apply_placement(snapshot, got)  # the Cluster's choice is valid for the snapshot path too
            assert all(u <= 1000 for s in snapshot for u in s.gpu_used_milli)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 999), min_size=1, max_size=60), st.integers(0, 2**31))
def test_shares_on_one_gpu_never_exceed_1000(shares: list[int], seed: int) -> None:
    node = NodeInfo("n", (GpuInfo(0, "g0", "A100", 81920),), 10**9, 10**9)
    cluster = Cluster([node], "corral", rng=random.Random(seed))
    placed = 0
    for s in shares:
        result = cluster.place(ResourceRequest(gpus=1, gpu_milli=s))
        if isinstance(result, Placement):
            placed += s
        else:
            assert result.explanation.as_dict() == {REASON_GPUS_BUSY: 1}
            assert placed + s > 1000
    assert cluster.gpu_allocated_milli == placed <= 1000


def test_release_frees_capacity() -> None:
    node = NodeInfo("n", tuple(GpuInfo(i, f"g{i}", "A100", 81920) for i in range(2)), 8000, 8192)
    cluster = Cluster([node], "corral")
    p = cluster.place(ResourceRequest(gpus=2, cpu_milli=8000))
    assert isinstance(p, Placement)
    assert isinstance(cluster.place(ResourceRequest(gpus=1)), Unschedulable)
    cluster.release(p)
    assert cluster.gpu_allocated_milli == 0
    assert isinstance(cluster.place(ResourceRequest(gpus=1)), Placement)


def test_first_free_takes_the_first_node_even_with_an_rng() -> None:
    nodes = [NodeInfo(f"n{i}", (GpuInfo(0, f"g{i}", "A100", 81920),), 8000, 8192) for i in range(5)]
    cluster = Cluster(nodes, "first-free", rng=random.Random(3))
    placed = [cluster.place(ResourceRequest(gpus=1)) for _ in range(3)]
    assert [p.node for p in placed if isinstance(p, Placement)] == ["n0", "n1", "n2"]


mixed_nodes_st = st.lists(
    st.tuples(st.integers(0, 4), st.integers(0, 3), st.booleans(), st.sampled_from(MODELS)), min_size=1, max_size=8
).map(
    lambda specs: [
        NodeInfo(
            f"n{i}",
            tuple(GpuInfo(g, f"n{i}-{g}", model, 16384, ecc_enabled=ecc and g % 2 == 0) for g in range(whole))
            + tuple(GpuInfo(whole + k, f"n{i}-m{k}", model, 10240, mig_profile="1g.10gb") for k in range(mig)),
            64_000,
            262_144,
        )
        for i, (whole, mig, ecc, model) in enumerate(specs)
    ]
)
constrained_st = st.builds(
    lambda g, share, ecc, mig, models: ResourceRequest(
        gpus=g,
        gpu_milli=share if g == 1 and not mig else 1000,
        ecc=ecc,
        mig_profile="1g.10gb" if mig else "",
        gpu_models=models,
    ),
    st.integers(1, 3),
    st.integers(1, 1000),
    st.booleans(),
    st.booleans(),
    st.sampled_from([(), ("A100",), ("T4",)]),
)


@settings(max_examples=60, deadline=None)
@given(mixed_nodes_st, st.lists(constrained_st, max_size=25), st.sampled_from(["corral", "fgd", "bestfit", "random"]))
def test_placements_honour_mig_ecc_and_model_constraints(
    nodes: list[NodeInfo], requests: list[ResourceRequest], policy: str
) -> None:
    cluster = Cluster(nodes, policy, rng=random.Random(0))
    by_name = {n.name: n for n in nodes}
    for r in requests:
        placed = cluster.place(r)
        if not isinstance(placed, Placement):
            continue
        gpus = [g for g in by_name[placed.node].gpus if g.index in placed.gpu_indices]
        assert len(gpus) == r.gpus
        assert all(g.mig_profile == r.mig_profile for g in gpus)
        assert all(g.ecc_enabled for g in gpus) or not r.ecc
        assert all(not r.gpu_models or any(m in g.model for m in r.gpu_models) for g in gpus)

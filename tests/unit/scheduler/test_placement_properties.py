"""Every placement of every policy, checked against the request and the node by an oracle written here (not the
scheduler's own filters): the GPUs exist, are healthy, of an allowed model, with enough memory and room for the
share; CPU and memory fit; no GPU ends above 1000 milli; and "unschedulable" only when nothing fits."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo, NodeInfo, NodeState, Placement
from corral.scheduler.cluster import Cluster
from corral.scheduler.cycle import Unschedulable, apply_placement, compute_placement
from corral.scheduler.framework import REASON_GPUS_BUSY, ScoreContext
from corral.scheduler.plugins import policy_names
from corral.scheduler.workload import compute_workload_profile

MODELS = ("A100-80GB", "T4-16GB", "H100-80GB")
USED_MILLI = (0, 0, 0, 250, 499, 500, 501, 999, 1000)  # the boundaries of a 500 share, on purpose


@dataclass(frozen=True)
class GpuGen:
    model: str
    memory_mib: int
    healthy: bool
    used: int


gpu_st = st.builds(
    GpuGen,
    st.sampled_from(MODELS),
    st.sampled_from([16384, 40960, 81920]),
    st.sampled_from([True, True, True, False]),
    st.sampled_from(USED_MILLI),
)
node_st = st.tuples(
    st.lists(gpu_st, max_size=6), st.integers(0, 64), st.integers(0, 64), st.integers(0, 256), st.integers(0, 256)
)


def _node(i: int, spec: tuple[list[GpuGen], int, int, int, int]) -> NodeState:
    gpus, cpu, cpu_used, mem_gib, mem_used_gib = spec
    info = NodeInfo(
        f"n{i}",
        tuple(GpuInfo(k, f"n{i}-{k}", g.model, g.memory_mib, healthy=g.healthy) for k, g in enumerate(gpus)),
        cpu * 1000,
        mem_gib * 1024,
    )
    return NodeState(info, tuple(g.used for g in gpus), min(cpu_used, cpu) * 1000, min(mem_used_gib, mem_gib) * 1024)


nodes_st = st.lists(node_st, min_size=1, max_size=5).map(lambda specs: [_node(i, s) for i, s in enumerate(specs)])
request_st = st.one_of(
    st.builds(
        lambda m, c, mdl: ResourceRequest(gpus=1, gpu_milli=m, cpu_milli=c, gpu_models=mdl),
        st.sampled_from([1, 250, 499, 500, 501, 999, 1000]),
        st.integers(0, 16).map(lambda c: c * 1000),
        st.sampled_from([(), ("A100",), ("T4",), ("H100", "A100")]),
    ),
    st.builds(
        lambda g, c, m, mdl, gm: ResourceRequest(
            gpus=g, cpu_milli=c, memory_mib=m, gpu_models=mdl, min_gpu_memory_mib=gm
        ),
        st.integers(0, 4),
        st.integers(0, 32).map(lambda c: c * 1000),
        st.integers(0, 64).map(lambda m: m * 1024),
        st.sampled_from([(), ("A100",), ("T4",), ("H100",)]),
        st.sampled_from([0, 20000, 81920]),
    ),
)


def _allowed(model: str, wanted: tuple[str, ...]) -> bool:
    return not wanted or model.split("-")[0] in wanted


def _gpu_fits(node: NodeState, pos: int, r: ResourceRequest) -> bool:
    g = node.info.gpus[pos]
    return (
        g.healthy
        and _allowed(g.model, r.gpu_models)
        and g.memory_mib >= r.min_gpu_memory_mib
        and node.gpu_used_milli[pos] + r.gpu_milli <= 1000
    )


def _host_fits(node: NodeState, r: ResourceRequest) -> bool:
    return (
        node.cpu_used_milli + r.cpu_milli <= node.info.cpu_milli
        and node.memory_used_mib + r.memory_mib <= node.info.memory_mib
    )


def _fits(node: NodeState, r: ResourceRequest) -> bool:
    """The oracle: the request fits this node now (no topology constraints are generated)."""
    return _host_fits(node, r) and sum(_gpu_fits(node, p, r) for p in range(len(node.info.gpus))) >= r.gpus


def check_placement(nodes: list[NodeState], r: ResourceRequest, placed: Placement | Unschedulable) -> None:
    """`placed` is right for `r` on the snapshot `nodes`; a Placement is then applied to `nodes`."""
    if isinstance(placed, Unschedulable):
        assert not any(_fits(n, r) for n in nodes), f"{r} fits on a node but came back unschedulable"
        return
    node = next(n for n in nodes if n.info.name == placed.node)
    positions = [p for p, g in enumerate(node.info.gpus) if g.index in placed.gpu_indices]
    assert len(positions) == len(placed.gpu_indices) == len(set(placed.gpu_indices)) == r.gpus, (r, placed)
    assert all(_gpu_fits(node, p, r) for p in positions), (r, placed, node)
    assert _host_fits(node, r), (r, placed, node)
    assert (placed.gpu_milli, placed.cpu_milli, placed.memory_mib) == (r.gpu_milli, r.cpu_milli, r.memory_mib)
    apply_placement(nodes, placed)
    after = next(n for n in nodes if n.info.name == placed.node)
    assert all(0 <= u <= 1000 for u in after.gpu_used_milli), after
    assert after.cpu_used_milli <= after.info.cpu_milli and after.memory_used_mib <= after.info.memory_mib


@pytest.mark.parametrize("policy", sorted(policy_names()))
@settings(max_examples=40, deadline=None)
@given(nodes=nodes_st, requests=st.lists(request_st, min_size=1, max_size=12), seed=st.integers(0, 2**16))
def test_every_placement_fits_its_request_and_node(
    policy: str, nodes: list[NodeState], requests: list[ResourceRequest], seed: int
) -> None:
    ctx = ScoreContext(workload=compute_workload_profile(requests))
    rng = random.Random(seed)
    for r in requests:
        check_placement(nodes, r, compute_placement(r, list(nodes), policy, rng=rng, ctx=ctx))


@pytest.mark.parametrize("policy", sorted(set(policy_names()) - {"lru"}))
@settings(max_examples=25, deadline=None)
@given(nodes=nodes_st, requests=st.lists(request_st, min_size=1, max_size=12), seed=st.integers(0, 2**16))
def test_every_cluster_placement_fits_its_request_and_node(
    policy: str, nodes: list[NodeState], requests: list[ResourceRequest], seed: int
) -> None:
    """The indexed Cluster (simulator, bench) starts empty: the same checks from idle nodes."""
    infos = [n.info for n in nodes]
    cluster = Cluster(infos, policy, ScoreContext(workload=compute_workload_profile(requests)), random.Random(seed))
    for r in requests:
        snapshot = cluster.node_states()
        check_placement(snapshot, r, cluster.place(r))
        assert cluster.node_states() == snapshot  # the Cluster holds exactly what was applied


@pytest.mark.parametrize("policy", sorted(policy_names()))
@pytest.mark.parametrize(("used", "fits"), [(499, True), (500, True), (501, False), (1000, False)])
def test_a_share_never_gets_one_milli_more_than_is_free(policy: str, used: int, fits: bool) -> None:
    """A 500 share on a GPU with `used` milli taken (the node's other GPU is full): a double booking would show
    as a placement here, not only as a crash later."""
    info = NodeInfo("n", (GpuInfo(0, "g0", "A100-80GB", 81920), GpuInfo(1, "g1", "A100-80GB", 81920)), 8000, 8192)
    nodes = [NodeState(info, (used, 1000))]
    placed = compute_placement(ResourceRequest(gpus=1, gpu_milli=500), nodes, policy, rng=random.Random(0))
    if fits:
        assert isinstance(placed, Placement) and placed.gpu_indices == (0,)
        apply_placement(nodes, placed)
        assert nodes[0].gpu_used_milli == (used + 500, 1000)
    else:
        assert isinstance(placed, Unschedulable) and placed.explanation.as_dict() == {REASON_GPUS_BUSY: 1}


@pytest.mark.parametrize("policy", sorted(set(policy_names()) - {"lru"}))
@pytest.mark.parametrize(("first", "fits"), [(499, True), (500, True), (501, False)])
def test_the_cluster_refuses_the_share_that_would_overfill_a_gpu(policy: str, first: int, fits: bool) -> None:
    cluster = Cluster(
        [NodeInfo("n", (GpuInfo(0, "g0", "A100-80GB", 81920),), 8000, 8192)], policy, rng=random.Random(0)
    )
    assert isinstance(cluster.place(ResourceRequest(gpus=1, gpu_milli=first)), Placement)
    second = cluster.place(ResourceRequest(gpus=1, gpu_milli=500))
    assert isinstance(second, Placement) is fits
    assert cluster.node_states()[0].gpu_used_milli == ((first + 500,) if fits else (first,))

"""compute_placement / compute_cluster / apply_placement (cycle.py), gang placement (gang.py) and the GPU
choices a policy scores (choices.py): what a user relies on when one snapshot is scheduled."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from sched_builders import make_node

from corral.core.errors import ValidationError
from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState, Placement
from corral.scheduler.cluster import REASON_GANG_SHORT
from corral.scheduler.cycle import (
    Unschedulable,
    apply_placement,
    compute_cluster,
    compute_gpu_choices,
    compute_placement,
    explain,
    score_choices,
)
from corral.scheduler.framework import DEFAULT_CONTEXT, REASON_GPUS_BUSY, ScoreContext
from corral.scheduler.gang import compute_gang_placement
from corral.scheduler.plugins.topology_aware import TopologyAware


def _same_nodes(count: int, gpus: int = 8) -> list[NodeState]:
    return [make_node(f"n{i:02d}").gpus(gpus).build() for i in range(count)]


@pytest.mark.parametrize("policy", ["corral", "spread", "packing", "bestfit", "topology", "fgd"])
def test_ties_go_to_the_earliest_node_without_rng(policy: str) -> None:
    nodes = _same_nodes(12)
    got = compute_placement(ResourceRequest(gpus=1), nodes, policy)
    assert isinstance(got, Placement)
    assert got.node == "n00"
    # Even when an rng is passed, only the randomized policy uses it.
    again = compute_placement(ResourceRequest(gpus=1), nodes, policy, rng=random.Random(7))
    assert isinstance(again, Placement) and again.node == "n00"


def _random_nodes(cluster_nodes: Sequence[NodeState], rng: random.Random | None) -> set[str]:
    cluster = compute_cluster(cluster_nodes, "random", rng)
    chosen = set()
    for _ in range(8):
        got = cluster.place(ResourceRequest(gpus=1))
        assert isinstance(got, Placement)
        chosen.add(got.node)
    return chosen


def test_random_policy_draws_among_the_feasible_nodes() -> None:
    nodes = _same_nodes(12)
    # Eight 1-GPU jobs could all go to the first node; drawing spreads them (seeded, so replayable).
    assert len(_random_nodes(nodes, random.Random(3))) > 1
    assert len(_random_nodes(nodes, None)) > 1  # without rng, a Random(0) draws
    assert _random_nodes(nodes, None) == _random_nodes(nodes, random.Random(0))
    assert _random_nodes(nodes, random.Random(5)) == _random_nodes(nodes, random.Random(5))


def test_random_policy_only_draws_feasible_nodes() -> None:
    nodes = [make_node("full").gpus(2).used(1000, 1000).build(), make_node("free").gpus(2).build()]
    for seed in range(5):
        got = compute_placement(ResourceRequest(gpus=2), nodes, "random", rng=random.Random(seed))
        assert isinstance(got, Placement) and got.node == "free"


def test_apply_placement_adds_the_use_and_keeps_the_rest() -> None:
    nodes = [
        make_node("a").gpus(2).build(),
        NodeState(make_node("b").gpus(4).info(), (0, 300, 0, 0), 1000, 2048, schedulable=False),
    ]
    apply_placement(nodes, Placement("b", (1, 3), 500, 2000, 1024))
    assert nodes[1] == NodeState(nodes[1].info, (0, 800, 0, 500), 3000, 3072, schedulable=False)
    assert nodes[0] == make_node("a").gpus(2).build()
    apply_placement(nodes, Placement("a", (0,), 1000, 0, 0))
    assert nodes[0].gpu_used_milli == (1000, 0) and nodes[0].schedulable is True
    with pytest.raises(KeyError) as missing:
        apply_placement(nodes, Placement("zz", (0,), 1000, 0, 0))
    assert missing.value.args == ("zz",)


@pytest.mark.parametrize("count", [0, -1])
def test_gang_of_fewer_than_one_node_is_rejected_with_its_count(count: int) -> None:
    nodes = _same_nodes(2)
    with pytest.raises(ValidationError) as raised:
        compute_gang_placement(ResourceRequest(gpus=1), count, nodes)
    assert raised.value.field == "nodes"
    assert raised.value.problem == f"must be >= 1, got {count}"
    cluster = compute_cluster(nodes)
    with pytest.raises(ValidationError) as raised:
        cluster.place_gang(ResourceRequest(gpus=1), count)
    assert raised.value.field == "nodes"
    assert raised.value.problem == f"must be >= 1, got {count}"


def test_gang_of_one_node_is_one_placement() -> None:
    nodes = [make_node("busy").gpus(2).used(1000).build(), make_node("free").gpus(2).build()]
    got = compute_gang_placement(ResourceRequest(gpus=2), 1, nodes)
    assert isinstance(got, list) and [p.node for p in got] == ["free"]
    assert compute_cluster(nodes).find_gang(ResourceRequest(gpus=2), 1) == got


def test_gang_is_all_or_nothing_and_says_how_many_parts_are_short() -> None:
    nodes = [make_node("a").gpus(4).build(), make_node("b").gpus(4).build(), make_node("c").gpus(4).used(1000).build()]
    cluster = compute_cluster(nodes)
    got = cluster.place_gang(ResourceRequest(gpus=4), 3)
    assert isinstance(got, Unschedulable)
    assert got.explanation.reasons == {REASON_GPUS_BUSY: 1, REASON_GANG_SHORT: 1}
    # Nothing stays placed: the whole cluster is free again for a smaller gang.
    assert [s.gpu_used_milli for s in cluster.node_states()] == [(0,) * 4, (0,) * 4, (1000, 0, 0, 0)]
    ok = cluster.place_gang(ResourceRequest(gpus=4), 2)
    assert isinstance(ok, list) and sorted(p.node for p in ok) == ["a", "b"]


class _Constant:
    """A GPU-aware policy that scores every choice the same."""

    name = "constant"
    gpu_aware = True

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        return 1.0


class _PrefersLowestGpu(_Constant):
    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        return -float(positions[0])


class _PrefersTheContextsGpu(_Constant):
    """Scores the GPU the context names (in `last_used`, keyed by position) highest."""

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        return float(ctx.last_used.get(str(positions[0]), 0))


def test_gpu_choices_one_per_load_level_only_for_gpu_aware_policies() -> None:
    node = make_node("a").gpus(4).used(0, 300, 600, 300).build()
    share = ResourceRequest(gpus=1, gpu_milli=300)
    aware = compute_gpu_choices(node, share, True)
    assert len(aware) == 3 and len(set(aware)) == 3  # loads 600, 300 and 0 (the topology choice first)
    assert aware[0] == (2,)  # a share packs onto the fullest GPU with room
    assert compute_gpu_choices(node, share, False) == [aware[0]]
    assert compute_gpu_choices(node, ResourceRequest(), False) == [()]


def test_score_choices_earlier_choice_wins_a_tie() -> None:
    node = make_node("a").gpus(4).used(0, 300, 600, 300).build()
    share = ResourceRequest(gpus=1, gpu_milli=300)
    first = compute_gpu_choices(node, share, True)[0]
    assert score_choices(node, share, _Constant(), DEFAULT_CONTEXT) == (1.0, first)
    assert first != (0,)
    assert score_choices(node, share, _PrefersLowestGpu(), DEFAULT_CONTEXT) == (-0.0, (0,))
    ctx = ScoreContext(last_used={"0": 5})
    assert score_choices(node, share, _PrefersTheContextsGpu(), ctx) == (5.0, (0,))


def test_nvlink_request_takes_gpus_of_one_island() -> None:
    node = make_node("a").gpus(8).nvlink_islands(4).used(1000, 0, 0, 0, 1000, 1000, 0, 0).build()
    got = compute_placement(ResourceRequest(gpus=3, nvlink="required"), [node])
    assert isinstance(got, Placement) and got.gpu_indices == (1, 2, 3)
    two = compute_placement(ResourceRequest(gpus=2, nvlink="preferred"), [node])
    assert isinstance(two, Placement) and two.gpu_indices == (6, 7)  # the island with fewer free GPUs left


def test_an_nvlink_preference_leaves_a_single_gpu_share_packed() -> None:
    node = make_node("a").gpus(4).nvlink_islands(2).used(0, 0, 500, 0).build()
    share = ResourceRequest(gpus=1, gpu_milli=300, nvlink="preferred")
    assert compute_gpu_choices(node, share, False) == [(2,)]  # one GPU needs no island: the fullest with room
    got = compute_placement(share, [node])
    assert isinstance(got, Placement) and got.gpu_indices == (2,)


def test_a_preferred_nvlink_island_is_only_a_preference() -> None:
    node = make_node("a").gpus(4).build()  # no NVLink at all
    got = compute_placement(ResourceRequest(gpus=2, nvlink="preferred"), [node])
    assert isinstance(got, Placement) and len(got.gpu_indices) == 2


def test_placement_carries_the_request_and_the_gpus_numa_node() -> None:
    node = make_node("a").gpus(4).numa(2).build()
    request = ResourceRequest(gpus=2, cpu_milli=3000, memory_mib=4096)
    got = compute_placement(request, [node])
    assert got == Placement("a", (0, 1), 1000, 3000, 4096)
    assert isinstance(got, Placement) and got.extra == {"cpu_numa_node": "0"}
    spread = make_node("b").gpus(4).numa(2).used(1000, 0, 1000, 0).build()
    across = compute_placement(request, [spread])
    assert across == Placement("b", (1, 3), 1000, 3000, 4096)
    assert isinstance(across, Placement) and across.extra == {}  # GPUs on two NUMA nodes: no CPU hint
    share = compute_placement(ResourceRequest(gpus=1, gpu_milli=250), [make_node("c").gpus(2).numa(1).build()])
    assert isinstance(share, Placement) and share.gpu_milli == 250 and share.extra == {"cpu_numa_node": "0"}


def test_the_rng_and_context_reach_the_engine() -> None:
    nodes = _same_nodes(12)
    drawn = {compute_placement(ResourceRequest(gpus=1), nodes, "random", rng=random.Random(s)) for s in range(8)}
    assert len({p.node for p in drawn if isinstance(p, Placement)}) > 1
    ctx = ScoreContext(last_used={"n00": 9, "n01": 3})  # lru: the node never used first, then the oldest use
    got = compute_placement(ResourceRequest(gpus=1), nodes[:2], "lru", ctx=ctx)
    assert isinstance(got, Placement) and got.node == "n01"
    gang = compute_gang_placement(ResourceRequest(gpus=1), 2, nodes[:3], "lru", ctx=ScoreContext(last_used={"n00": 1}))
    assert isinstance(gang, list) and sorted(p.node for p in gang) == ["n01", "n02"]
    gangs = {
        tuple(p.node for p in got)
        for s in range(8)
        if isinstance(
            got := compute_gang_placement(ResourceRequest(gpus=8), 2, nodes, "random", random.Random(s)), list
        )
    }
    assert len(gangs) > 1


def test_a_policy_object_is_used_as_given() -> None:
    nodes = [make_node("a").gpus(4).build(), make_node("b").gpus(4).nvlink_islands(4).build()]
    got = compute_placement(ResourceRequest(gpus=2), nodes, TopologyAware())
    assert isinstance(got, Placement) and got.node == "b"


def test_explain_counts_only_the_nodes_that_reject() -> None:
    nodes = [make_node("free").gpus(4).build(), make_node("busy").gpus(4).used(1000, 1000, 1000).build()]
    assert explain(ResourceRequest(gpus=2), nodes).reasons == {REASON_GPUS_BUSY: 1}

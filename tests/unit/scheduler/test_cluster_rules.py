"""The placement engine (cluster.py): ties, holds, gangs, explanations and the pool, as the module docstring
and docs/scheduling.md describe them."""

from __future__ import annotations

import random

import pytest
from sched_builders import make_node

from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo, NodeInfo, NodeState, Placement
from corral.scheduler.choices import Unschedulable
from corral.scheduler.cluster import REASON_GANG_SHORT, Cluster
from corral.scheduler.framework import (
    REASON_GPUS_BUSY,
    REASON_HELD,
    REASON_MODEL,
    REASON_TOO_FEW_GPUS,
    REASON_UNSCHEDULABLE_NODE,
    ScoreContext,
)
from corral.scheduler.plugins import get_policy

ONE = ResourceRequest(gpus=1)


def _infos(count: int, two_kinds: bool = False) -> list[NodeInfo]:
    """Identical 8-GPU nodes; with `two_kinds`, every other node has a label (another node class, same score)."""
    out = []
    for i in range(count):
        b = make_node(f"n{i:02d}").gpus(8)
        if two_kinds and i % 2:
            b = b.labels(rack="r1")
        out.append(b.info())
    return out


def _first_node(cluster: Cluster, request: ResourceRequest = ONE) -> str:
    got = cluster.find(request)
    assert isinstance(got, Placement)
    return got.node


def test_without_rng_ties_go_to_the_node_first_in_the_order_given() -> None:
    for policy in ("bestfit", "spread", "corral", "first-free"):
        assert _first_node(Cluster(_infos(10, two_kinds=True), policy)) == "n00"
        assert _first_node(Cluster(_infos(10), policy)) == "n00"


def test_without_rng_the_order_given_survives_a_node_leaving_and_coming_back() -> None:
    cluster = Cluster(_infos(3), "spread")
    placed = cluster.place(ResourceRequest(gpus=8))
    assert isinstance(placed, Placement) and placed.node == "n00"
    cluster.release(placed)  # n00 is back in the class of idle nodes, behind the others that never left
    assert _first_node(cluster) == "n00"


def test_seeded_ties_follow_one_shuffled_order_of_all_nodes() -> None:
    winners = set()
    for seed in range(10):
        infos = _infos(16)
        one_class = _first_node(Cluster(infos, "spread", rng=random.Random(seed)))
        # Node classes do not matter: the tie goes to the first node of the seeded order of all nodes.
        two_classes = _first_node(Cluster(_infos(16, two_kinds=True), "spread", rng=random.Random(seed)))
        assert two_classes == one_class
        states = [NodeState(i) for i in infos]
        assert _first_node(Cluster.from_states(states, "spread", rng=random.Random(seed))) == one_class
        winners.add(one_class)
    assert len(winners) > 1  # the seed decides, not the order given


def test_seeded_order_keeps_landing_on_the_same_node() -> None:
    cluster = Cluster(_infos(16), "spread", rng=random.Random(4))
    first = _first_node(cluster)
    for _ in range(3):
        placed = cluster.place(ResourceRequest(gpus=8))
        assert isinstance(placed, Placement) and placed.node == first
        cluster.release(placed)


def test_first_free_takes_the_first_node_given_even_with_rng() -> None:
    for seed in range(5):
        assert _first_node(Cluster(_infos(10, two_kinds=True), "first-free", rng=random.Random(seed))) == "n00"


def test_unseeded_order_draws_ties_uniformly() -> None:
    drawn = {_first_node(Cluster(_infos(16), "spread", rng=random.Random(s), seeded_order=False)) for s in range(10)}
    assert len(drawn) > 1
    cluster = Cluster(_infos(16), "spread", rng=random.Random(1), seeded_order=False)
    again = set()
    for _ in range(10):
        placed = cluster.place(ResourceRequest(gpus=8))
        assert isinstance(placed, Placement)
        again.add(placed.node)
        cluster.release(placed)
    assert len(again) > 1  # drawn each time, not kept


def test_random_policy_draws_nodes_and_the_gpu_a_share_goes_on() -> None:
    cluster = Cluster(_infos(12), "random", rng=random.Random(2))
    nodes = set()
    for _ in range(8):
        placed = cluster.place(ONE)
        assert isinstance(placed, Placement)
        nodes.add(placed.node)
    assert len(nodes) > 1
    one = Cluster(_infos(1), "random", rng=random.Random(2))
    gpus = set()
    for _ in range(8):
        placed = one.place(ResourceRequest(gpus=1, gpu_milli=100))
        assert isinstance(placed, Placement)
        gpus.add(placed.gpu_indices)
    assert len(gpus) > 1


def test_unschedulable_nodes_are_kept_for_explanations_never_chosen() -> None:
    infos = _infos(3)
    states = [NodeState(infos[0], schedulable=False), NodeState(infos[1]), NodeState(infos[2], schedulable=False)]
    cluster = Cluster.from_states(states)
    assert _first_node(cluster) == "n01"
    assert [s.schedulable for s in cluster.node_states()] == [False, True, False]
    got = cluster.find(ResourceRequest(gpus=8, gpu_models=("H100",)))
    assert isinstance(got, Unschedulable)
    assert got.explanation.reasons == {REASON_UNSCHEDULABLE_NODE: 2, REASON_MODEL: 1}


def test_node_states_reports_the_load_in_the_order_given() -> None:
    infos = _infos(2)
    states = [NodeState(infos[0], (0,) * 8, 500, 64, schedulable=False), NodeState(infos[1])]
    cluster = Cluster.from_states(states)
    placed = cluster.place(ResourceRequest(gpus=2, cpu_milli=1000, memory_mib=128))
    assert isinstance(placed, Placement) and placed.node == "n01"
    assert cluster.node_states() == [
        NodeState(infos[0], (0,) * 8, 500, 64, schedulable=False),
        NodeState(infos[1], (1000, 1000, 0, 0, 0, 0, 0, 0), 1000, 128, schedulable=True),
    ]


def test_pool_counts_healthy_gpus_of_schedulable_nodes_only() -> None:
    sick = NodeInfo("sick", (GpuInfo(0, "s0", "H100", 81920), GpuInfo(1, "s1", "H100", 81920, healthy=False)))
    closed = make_node("closed").gpus(4, "L4").info()
    open_ = make_node("open").gpus(2, "A100").info()
    states = [NodeState(sick), NodeState(closed, schedulable=False), NodeState(open_, (400, 0))]
    cluster = Cluster.from_states(states)
    assert cluster.pool_milli() == {"H100": 1000, "A100": 2000}
    assert cluster.free_milli("A100") == 1600
    assert cluster.free_milli("H100") == 1000
    assert cluster.free_milli("L4") == 0
    assert cluster.gpu_models() == ["A100", "H100"]


def test_hold_keeps_a_node_for_one_waiting_job_until_unhold() -> None:
    cluster = Cluster(_infos(2))
    cluster.hold("n00")
    assert _first_node(cluster) == "n01"
    cluster.place(ResourceRequest(gpus=8))
    got = cluster.find(ONE)
    assert isinstance(got, Unschedulable)
    assert got.explanation.reasons == {REASON_HELD: 1, REASON_GPUS_BUSY: 1}
    cluster.unhold("n01")  # not held: nothing changes
    assert isinstance(cluster.find(ONE), Unschedulable)
    cluster.unhold("n00")
    assert _first_node(cluster) == "n00"
    cluster.hold("n00")
    cluster.release_holds()
    assert _first_node(cluster) == "n00"


def test_explanation_follows_the_cluster_as_it_changes() -> None:
    cluster = Cluster(_infos(2))
    big = ResourceRequest(gpus=8)
    a = cluster.place(big)
    b = cluster.place(big)
    assert isinstance(a, Placement) and isinstance(b, Placement)
    assert cluster.explain(big).reasons == {REASON_GPUS_BUSY: 2}
    assert cluster.explain(big).reasons == {REASON_GPUS_BUSY: 2}  # asked again: the same answer
    cluster.release(a)
    assert cluster.explain(big).reasons == {REASON_GPUS_BUSY: 1}
    assert cluster.explain(ResourceRequest(gpus=9)).reasons == {REASON_TOO_FEW_GPUS: 2}


def test_whole_gpu_requests_see_every_node_with_enough_free_gpus() -> None:
    infos = _infos(3)
    states = [NodeState(infos[0], (1000,) * 7 + (0,)), NodeState(infos[1], (500,) * 8), NodeState(infos[2], (0,) * 8)]
    cluster = Cluster.from_states(states, "bestfit")
    assert _first_node(cluster, ResourceRequest(gpus=1)) == "n00"  # best fit: the fullest node with a free GPU
    assert _first_node(cluster, ResourceRequest(gpus=2)) == "n02"
    assert _first_node(cluster, ResourceRequest(gpus=1, gpu_milli=500)) == "n00"  # half of n00's last GPU
    assert isinstance(cluster.find(ResourceRequest(gpus=1, gpu_milli=600)), Placement)


def test_whole_free_lists_nodes_most_free_first() -> None:
    infos = _infos(3)
    states = [NodeState(infos[0], (1000,) * 6 + (0, 0)), NodeState(infos[1]), NodeState(infos[2], (300,) + (0,) * 7)]
    cluster = Cluster.from_states(states)
    assert cluster.whole_free("A100-80GB", 2) == [("n01", 8), ("n02", 7), ("n00", 2)]
    placed = cluster.place(ResourceRequest(gpus=4))
    assert isinstance(placed, Placement)
    # Recounted from the snapshot after the change (the memo is not stale).
    free = [(s.info.name, sum(1 for u in s.gpu_used_milli if u == 0)) for s in cluster.node_states()]
    assert cluster.whole_free("A100-80GB", 2) == sorted(free, key=lambda nf: -nf[1])
    assert cluster.whole_free("H100", 1) == []
    assert cluster.whole_free_on("n00", "A100-80GB") == 2


def test_node_names_must_be_unique() -> None:
    infos = [make_node("a").gpus(1).info(), make_node("a").gpus(2).info()]
    with pytest.raises(ValueError, match="^node names must be unique$"):
        Cluster(infos)


def test_a_cluster_built_from_nodes_starts_empty() -> None:
    info = make_node("a").gpus(2).host(8000, 4096).info()
    cluster = Cluster([info])
    assert cluster.node_states() == [NodeState(info, (0, 0), 0, 0, True)]
    whole_host = ResourceRequest(gpus=2, cpu_milli=8000, memory_mib=4096)  # all of it, nothing to spare
    assert isinstance(cluster.find(whole_host), Placement)


def test_identical_nodes_share_a_class_unless_the_policy_scores_per_node() -> None:
    infos = _infos(4)
    assert Cluster(infos, "corral").class_count == 1
    # Without topology, which GPUs are in use does not matter: the same load is the same class.
    states = [NodeState(infos[0], (1000,) + (0,) * 7), NodeState(infos[1], (0,) * 7 + (1000,))]
    assert Cluster.from_states(states).class_count == 1
    assert Cluster(infos, "lru").class_count == 4


def test_lru_sees_each_node_by_name() -> None:
    ctx = ScoreContext(last_used={"n00": 7, "n01": 2})  # n02 and n03 never used
    got = Cluster(_infos(4), "lru", ctx).find(ONE)
    assert isinstance(got, Placement) and got.node == "n02"
    used = ScoreContext(last_used={"n00": 7, "n01": 2, "n02": 9, "n03": 8})
    again = Cluster(_infos(4), "lru", used).find(ONE)
    assert isinstance(again, Placement) and again.node == "n01"  # the oldest use


def test_a_weighted_mix_keeps_what_its_parts_say_of_nodes_and_ties() -> None:
    # lru in a mix still sees each node by name (its identical nodes are not one class with one score)
    assert Cluster(_infos(4), "lru:1+bestfit:1").class_count == 4
    ctx = ScoreContext(last_used={"n00": 7, "n01": 2})
    got = Cluster(_infos(4), "lru:1+bestfit:1", ctx).find(ONE)
    assert isinstance(got, Placement) and got.node == "n02"  # as lru alone: bestfit scores the empty nodes alike
    used = ScoreContext(last_used={"n00": 7, "n01": 2, "n02": 9, "n03": 8})
    again = Cluster(_infos(4), "bestfit:1+lru:1", used).find(ONE)
    assert isinstance(again, Placement) and again.node == "n01"
    # first-free in a mix: ties still go to the first node, never to the seeded shuffle
    mix = get_policy("first-free:1+spread:1")
    assert getattr(mix, "first_wins", False) and not getattr(get_policy("spread:1+bestfit:1"), "first_wins", False)
    picks = {_first_node(Cluster(_infos(4), mix, rng=random.Random(seed))) for seed in range(8)}
    assert picks == {"n00"}


def test_gpu_supply_comes_from_the_nodes_unless_given() -> None:
    infos = [*_infos(2), make_node("h").gpus(4, "H100").info()]
    assert Cluster(infos).ctx.gpu_supply == {"A100-80GB": 16, "H100": 4}
    given = ScoreContext(gpu_supply={"H100": 64})
    assert Cluster(infos, ctx=given).ctx.gpu_supply == {"H100": 64}


def test_a_node_without_room_is_skipped_not_the_end_of_the_search() -> None:
    low_cpu = make_node("low").gpus(4).host(2000, 262_144).info()
    roomy = make_node("roomy").gpus(4).info()
    cluster = Cluster([low_cpu, roomy], "bestfit")
    got = cluster.find(ResourceRequest(gpus=1, cpu_milli=4000))
    assert isinstance(got, Placement) and got.node == "roomy"


def test_random_draws_reach_every_tied_node() -> None:
    for two_kinds in (False, True):
        drawn = set()
        for seed in range(16):
            cluster = Cluster(_infos(2, two_kinds=two_kinds), "random", rng=random.Random(seed))
            drawn.add(_first_node(cluster))
        assert drawn == {"n00", "n01"}


def test_only_random_draws_the_gpu_of_a_share() -> None:
    info = make_node("a").gpus(4).info()
    state = [NodeState(info, (500, 0, 0, 0))]
    for seed in range(6):
        for policy in ("bestfit", "corral", "spread"):
            got = Cluster.from_states(state, policy, rng=random.Random(seed)).find(
                ResourceRequest(gpus=1, gpu_milli=300)
            )
            assert isinstance(got, Placement) and got.gpu_indices == (0,)  # packed onto the used GPU
        whole = Cluster.from_states(state, "random", rng=random.Random(seed)).find(ONE)
        assert isinstance(whole, Placement) and whole.gpu_indices == (1,)  # a whole GPU: the first free one
    plain = Cluster([info], "random").find(ResourceRequest(gpus=1, gpu_milli=300))
    assert isinstance(plain, Placement) and plain.node == "a"


def test_gang_short_counts_each_node_and_each_missing_part() -> None:
    infos = _infos(5)
    states = [NodeState(i) for i in infos[:2]] + [NodeState(i, (1000,) * 8) for i in infos[2:]]
    cluster = Cluster.from_states(states)
    got = cluster.place_gang(ResourceRequest(gpus=8), 4)
    assert isinstance(got, Unschedulable)
    assert got.explanation.reasons == {REASON_GPUS_BUSY: 3, REASON_GANG_SHORT: 2}


def test_find_gang_leaves_the_cluster_as_it_was() -> None:
    cluster = Cluster(_infos(3))
    before = cluster.node_states()
    got = cluster.find_gang(ResourceRequest(gpus=8), 3)
    assert isinstance(got, list) and sorted(p.node for p in got) == ["n00", "n01", "n02"]
    assert cluster.node_states() == before
    assert isinstance(cluster.find_gang(ResourceRequest(gpus=8), 4), Unschedulable)
    assert cluster.node_states() == before


def test_release_gives_back_gpu_cpu_and_memory() -> None:
    cluster = Cluster(_infos(2))
    before = cluster.node_states()
    placed = cluster.place(ResourceRequest(gpus=2, gpu_milli=1000, cpu_milli=3000, memory_mib=512))
    assert isinstance(placed, Placement)
    state = cluster.node_states()[0]
    assert (state.cpu_used_milli, state.memory_used_mib) == (3000, 512)
    again = cluster.place(ResourceRequest(gpus=1, cpu_milli=1000, memory_mib=100))
    assert isinstance(again, Placement) and again.node == placed.node
    assert cluster.node_states()[0].cpu_used_milli == 4000 and cluster.node_states()[0].memory_used_mib == 612
    cluster.release(again)
    cluster.release(placed)
    assert cluster.node_states() == before
    assert cluster.free_milli("A100-80GB") == 16_000


def test_no_gpu_is_ever_over_capacity() -> None:
    cluster = Cluster(_infos(1))
    cluster.apply(Placement("n00", (0,), 700, 0, 0))
    with pytest.raises(ValueError, match="^GPU 0 of n00 would hold 1400 milli$"):
        cluster.apply(Placement("n00", (0,), 700, 0, 0))


def test_free_milli_counts_only_schedulable_healthy_gpus_as_work_lands() -> None:
    sick = NodeInfo("sick", (GpuInfo(0, "s0", "H100", 81920, healthy=False), GpuInfo(1, "s1", "H100", 81920)))
    closed = make_node("closed").gpus(2, "H100").info()
    cluster = Cluster.from_states([NodeState(sick), NodeState(closed, schedulable=False)])
    assert cluster.free_milli("H100") == 1000
    cluster.apply(Placement("closed", (0,), 1000, 0, 0))  # a running job the store holds on a closed node
    assert cluster.free_milli("H100") == 1000
    cluster.apply(Placement("sick", (0,), 400, 0, 0))
    assert cluster.free_milli("H100") == 1000
    cluster.apply(Placement("sick", (1,), 400, 0, 0))
    assert cluster.free_milli("H100") == 600
    cluster.apply(Placement("sick", (1,), 100, 0, 0))
    assert cluster.free_milli("H100") == 500


def test_model_of_a_placement() -> None:
    infos = [make_node("h").gpus(2, "H100").info(), make_node("c").info()]
    cluster = Cluster(infos)
    gpu = cluster.place(ResourceRequest(gpus=1))
    cpu = cluster.place(ResourceRequest(cpu_milli=100))
    assert isinstance(gpu, Placement) and isinstance(cpu, Placement)
    assert cluster.model_of(gpu) == "H100"
    assert cluster.model_of(cpu) == ""


def test_a_share_finds_the_used_gpu_with_room() -> None:
    infos = _infos(2)
    # n00: every GPU holds 900 (100 free each), n01: every GPU holds 500 (500 free each).
    states = [NodeState(infos[0], (900,) * 8), NodeState(infos[1], (500,) * 8)]
    cluster = Cluster.from_states(states, "bestfit")
    assert _first_node(cluster, ResourceRequest(gpus=1, gpu_milli=100)) == "n00"
    assert _first_node(cluster, ResourceRequest(gpus=1, gpu_milli=500)) == "n01"
    assert _first_node(cluster, ResourceRequest(gpus=1, gpu_milli=450)) == "n01"
    assert isinstance(cluster.find(ResourceRequest(gpus=1, gpu_milli=600)), Unschedulable)
    barely = [NodeState(infos[0], (1,) + (1000,) * 7)]  # one GPU holds a single milli
    assert isinstance(Cluster.from_states(barely).find(ResourceRequest(gpus=1, gpu_milli=900)), Placement)
    one = [NodeState(infos[0], (999,) + (1000,) * 7)]
    assert isinstance(Cluster.from_states(one).find(ResourceRequest(gpus=1, gpu_milli=1)), Placement)
    assert isinstance(Cluster.from_states(one).find(ResourceRequest(gpus=1, gpu_milli=2)), Unschedulable)


def test_explanation_counts_every_node_once_per_reason() -> None:
    infos = [*_infos(3), make_node("h").gpus(8, "H100").info()]
    states = [
        NodeState(infos[0], (1000,) * 8),
        NodeState(infos[1], (1000,) * 8),
        NodeState(infos[2]),
        NodeState(infos[3]),
    ]
    cluster = Cluster.from_states(states)
    request = ResourceRequest(gpus=8, gpu_models=("A100-80GB",))
    placed = cluster.place(request)
    assert isinstance(placed, Placement) and placed.node == "n02"
    got = cluster.find(request)
    assert isinstance(got, Unschedulable)
    assert got.explanation.reasons == {REASON_GPUS_BUSY: 3, REASON_MODEL: 1}
    assert cluster.explain(request).reasons == {REASON_GPUS_BUSY: 3, REASON_MODEL: 1}


def test_whole_free_skips_other_models_closed_and_small_nodes() -> None:
    mixed = NodeInfo(
        "mixed",
        (
            GpuInfo(0, "m0", "H100", 1),
            GpuInfo(1, "m1", "L4", 1),
            GpuInfo(2, "m2", "H100", 1),
            GpuInfo(3, "m3", "L4", 1),
        ),
    )
    sick = NodeInfo("sick", tuple(GpuInfo(i, f"s{i}", "H100", 1, healthy=i != 0) for i in range(3)))
    small = make_node("small").gpus(1, "H100").info()
    closed = make_node("closed").gpus(8, "H100").info()
    l4 = make_node("l4").gpus(8, "L4").info()
    states = [
        NodeState(small),
        NodeState(mixed, (0, 0, 1000, 0)),
        NodeState(sick),
        NodeState(closed, schedulable=False),
        NodeState(l4),
    ]
    cluster = Cluster.from_states(states)
    assert cluster.whole_free("H100", 2) == [("sick", 2), ("mixed", 1)]
    assert cluster.whole_free("H100", 2) == [("sick", 2), ("mixed", 1)]  # asked again, unchanged
    assert cluster.whole_free("H100", 1) == [("sick", 2), ("small", 1), ("mixed", 1)]  # ties: the order given
    assert cluster.whole_free("L4", 2) == [("l4", 8), ("mixed", 2)]
    assert cluster.whole_free("H100", 3) == []
    cluster.hold("sick")
    assert cluster.whole_free("H100", 2) == [("mixed", 1)]
    assert cluster.whole_free_on("mixed", "L4") == 2


def test_unseeded_order_from_states_draws_ties_too() -> None:
    states = [NodeState(i) for i in _infos(16)]
    cluster = Cluster.from_states(states, "spread", rng=random.Random(1), seeded_order=False)
    drawn = set()
    for _ in range(10):
        placed = cluster.place(ResourceRequest(gpus=8))
        assert isinstance(placed, Placement)
        drawn.add(placed.node)
        cluster.release(placed)
    assert len(drawn) > 1  # drawn each time, not kept as a seeded order would


def test_random_takes_the_first_free_whole_gpu_on_a_node_with_topology() -> None:
    state = [make_node("a").gpus(4).numa(2).used(1000).build()]
    for seed in range(6):
        got = Cluster.from_states(state, "random", rng=random.Random(seed)).find(ONE)
        assert isinstance(got, Placement) and got.gpu_indices == (1,)

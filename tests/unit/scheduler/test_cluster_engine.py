"""The one placement engine's entry points: from_states, find vs place, gangs all or none, O(1) free GPUs."""

from __future__ import annotations

import random

from hypothesis import example, given, settings
from hypothesis import strategies as st
from sched_builders import make_node

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState, Placement
from corral.scheduler.choices import Unschedulable
from corral.scheduler.cluster import REASON_GANG_SHORT, Cluster
from corral.scheduler.framework import REASON_GPUS_BUSY, REASON_UNSCHEDULABLE_NODE


def test_from_states_keeps_loads_and_never_chooses_a_node_not_schedulable() -> None:
    off = NodeState(make_node("off").gpus(8).info(), schedulable=False)
    busy = make_node("busy").gpus(2).used(1000, 500).build()
    cluster = Cluster.from_states([off, busy], "bestfit")
    assert cluster.free_milli("A100-80GB") == 500  # the node not schedulable counts for nothing
    got = cluster.place(ResourceRequest(gpus=1))
    assert isinstance(got, Unschedulable)
    assert got.explanation.as_dict() == {REASON_UNSCHEDULABLE_NODE: 1, REASON_GPUS_BUSY: 1}
    share = cluster.place(ResourceRequest(gpus=1, gpu_milli=500))
    assert isinstance(share, Placement) and (share.node, share.gpu_indices) == ("busy", (1,))


def test_ties_without_rng_go_to_the_first_node_given() -> None:
    nodes = [make_node(n).gpus(2).build() for n in ("c", "a", "b")]
    cluster = Cluster.from_states(nodes, "spread")
    got = [cluster.place(ResourceRequest(gpus=2)) for _ in range(3)]
    assert [p.node for p in got if isinstance(p, Placement)] == ["c", "a", "b"]


def test_find_does_not_apply_and_apply_commits_the_same_choice() -> None:
    cluster = Cluster.from_states([make_node("a").gpus(2).build()], "bestfit")
    found = cluster.find(ResourceRequest(gpus=2))
    assert isinstance(found, Placement) and cluster.free_milli("A100-80GB") == 2000
    cluster.apply(found)
    assert cluster.free_milli("A100-80GB") == 0
    assert isinstance(cluster.find(ResourceRequest(gpus=1)), Unschedulable)


def test_a_gang_is_all_or_none_and_says_how_many_parts_were_short() -> None:
    nodes = [make_node("a").gpus(4).build(), make_node("b").gpus(4).build(), make_node("c").gpus(4).used(1000).build()]
    cluster = Cluster.from_states(nodes, "bestfit")
    got = cluster.place_gang(ResourceRequest(gpus=4), 3)
    assert isinstance(got, Unschedulable)
    assert got.explanation.as_dict() == {REASON_GPUS_BUSY: 1, REASON_GANG_SHORT: 1}
    assert cluster.free_milli("A100-80GB") == 11000  # the two parts placed were undone (c has 3 free)
    parts = cluster.place_gang(ResourceRequest(gpus=4), 2)
    assert isinstance(parts, list) and sorted(p.node for p in parts) == ["a", "b"]
    assert cluster.free_milli("A100-80GB") == 3000


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([250, 1000]), st.booleans()), max_size=40),
    st.integers(0, 2**31),
)
def test_free_milli_is_kept_exact(steps: list[tuple[int, int, bool]], seed: int) -> None:
    nodes = [make_node(f"n{i}").gpus(4, "H100-80GB" if i % 2 else "A100-80GB").build() for i in range(4)]
    cluster = Cluster.from_states(nodes, "corral", rng=random.Random(seed))
    placed: list[Placement] = []
    for gpus, milli, release in steps:
        if release and placed:
            cluster.release(placed.pop(0))
        got = cluster.place(ResourceRequest(gpus=1 if milli < 1000 else gpus, gpu_milli=milli))
        if isinstance(got, Placement):
            placed.append(got)
        for model in ("A100-80GB", "H100-80GB"):
            expected = sum(
                1000 - u
                for s in cluster.node_states()
                for g, u in zip(s.info.gpus, s.gpu_used_milli)
                if g.model == model
            )
            assert cluster.free_milli(model) == expected


# A few shapes, so the same request comes back after the load changed (what the memos are keyed on).
_REQUESTS = st.sampled_from(
    [
        ResourceRequest(gpus=2),
        ResourceRequest(gpus=2, gpu_models=("H100-80GB",)),
        ResourceRequest(gpus=1, cpu_milli=48_000),
        ResourceRequest(gpus=2, memory_mib=65_536),
        ResourceRequest(gpus=1, gpu_milli=500),
        ResourceRequest(gpus=1, gpu_milli=250, gpu_models=("A100-80GB",), cpu_milli=16_000),
    ]
)
_STEPS = st.lists(
    st.tuples(st.sampled_from(["place", "release", "hold", "unhold", "gang", "ask"]), _REQUESTS, st.integers(0, 2)),
    max_size=50,
)


@settings(max_examples=150, deadline=None)
@given(_STEPS)
@example([("place", ResourceRequest(gpus=2), 0)] * 4 + [("release", ResourceRequest(gpus=2), 0)])
@example([("hold", ResourceRequest(gpus=2), k) for k in range(3)] + [("unhold", ResourceRequest(gpus=2), 1)])
def test_a_long_lived_cluster_answers_as_a_fresh_one_over_the_same_load(steps: list) -> None:
    """The engine memoises per class, per hardware and per request (what fit nowhere stays unplaceable
    until something opens room): after any sequence of placements, releases, holds and gangs, each answer
    (the node and GPUs chosen, or every node's reason) is the one a cluster built afresh from the same load
    gives."""
    nodes = [
        make_node(f"n{i}").gpus(2, "H100-80GB" if i % 2 else "A100-80GB").host(64_000, 131_072).build()
        for i in range(3)
    ]
    cluster = Cluster.from_states(nodes, "corral")
    placed: list[Placement] = []
    held: set[str] = set()
    for op, request, k in steps:
        name = f"n{k}"
        if op == "place":
            got = cluster.place(request)
            if isinstance(got, Placement):
                placed.append(got)
        elif op == "release" and placed:
            cluster.release(placed.pop(k % len(placed)))
        elif op == "hold":
            cluster.hold(name)
            held.add(name)
        elif op == "unhold":
            cluster.unhold(name)
            held.discard(name)
        elif op == "gang":
            cluster.find_gang(request, 2)
        fresh = Cluster.from_states(cluster.node_states(), "corral")
        for h in sorted(held):
            fresh.hold(h)
        mine, theirs = cluster.compute(request), fresh.compute(request)
        if isinstance(theirs, Unschedulable):
            assert isinstance(mine, Unschedulable) and mine.explanation.as_dict() == theirs.explanation.as_dict()
        else:
            assert mine == theirs

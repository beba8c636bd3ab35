"""The one placement engine's entry points: from_states, find vs place, gangs all or none, O(1) free GPUs."""

from __future__ import annotations

import random

from hypothesis import given, settings
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

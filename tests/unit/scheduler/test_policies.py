"""Every policy: found by name, cites its source, places where it should; weights and bad names."""

from __future__ import annotations

import pytest
from sched_builders import make_node
from test_placement_properties import check_placement

from corral.core.errors import ValidationError
from corral.core.requests import ResourceRequest
from corral.core.resources import Placement
from corral.scheduler.cycle import compute_placement
from corral.scheduler.framework import ScoreContext
from corral.scheduler.plugins import get_policy, policy_names
from corral.scheduler.workload import Shape, profile_from_counts

EXPECTED = {
    "first-free",
    "lru",
    "bestfit",
    "packing",
    "spread",
    "clustering",
    "dotprod",
    "random",
    "topology",
    "fgd",
    "corral",
}


def test_all_policies_registered() -> None:
    assert set(policy_names()) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_policy_docstring_cites_source(name: str) -> None:
    module = __import__(type(get_policy(name)).__module__, fromlist=["x"])
    assert "Source:" in (module.__doc__ or "")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_policy_places_a_share_and_a_whole_gpu(name: str) -> None:
    """Not only "something came back": each placement fits its request and node (the oracle of
    test_placement_properties), and is applied before the next request is placed."""
    nodes = [make_node("a").gpus(4).used(500).build(), make_node("b").gpus(2).build()]
    for request in (
        ResourceRequest(gpus=1, gpu_milli=250),
        ResourceRequest(gpus=2),
        ResourceRequest(gpus=1, gpu_milli=750),
    ):
        placed = compute_placement(request, nodes, name)
        assert isinstance(placed, Placement)
        check_placement(nodes, request, placed)


def test_unknown_policy_names_field() -> None:
    with pytest.raises(ValidationError) as e:
        get_policy("nope")
    assert e.value.field == "policy" and "nope" in str(e.value)


@pytest.mark.parametrize("spec", ["fgd:x", "bestfit:1+nope:2", "random:1+fgd:1"])
def test_bad_weighted_specs(spec: str) -> None:
    with pytest.raises(ValidationError):
        get_policy(spec)


def test_weighted_mix_sums_scores() -> None:
    node = make_node("a").gpus(2).used(1000).build()
    req = ResourceRequest(gpus=1)
    mix = get_policy("bestfit:2+spread:1")
    expected = 2 * get_policy("bestfit").score_node(node, req, (1,)) + get_policy("spread").score_node(node, req, (1,))
    assert mix.score_node(node, req, (1,)) == pytest.approx(expected)


def test_lru_prefers_the_node_idle_longest() -> None:
    nodes = [make_node("a").gpus(1).build(), make_node("b").gpus(1).build()]
    ctx = ScoreContext(last_used={"a": 5, "b": 2})
    placement = compute_placement(ResourceRequest(gpus=1), nodes, "lru", ctx=ctx)
    assert isinstance(placement, Placement) and placement.node == "b"


def test_fgd_keeps_whole_gpus_for_a_whole_gpu_workload() -> None:
    # Workload of whole GPUs only: a share should go on the GPU that is already broken.
    ctx = ScoreContext(workload=profile_from_counts({Shape(0, 1000, 1): 1}))
    nodes = [make_node("a").gpus(2).build(), make_node("b").gpus(2).used(500).build()]
    placement = compute_placement(ResourceRequest(gpus=1, gpu_milli=500), nodes, "fgd", ctx=ctx)
    assert isinstance(placement, Placement) and (placement.node, placement.gpu_indices) == ("b", (0,))


def test_topology_prefers_an_intact_island() -> None:
    broken = make_node("a").gpus(8).nvlink_islands(4).used(1000, 0, 0, 0, 1000).build()
    intact = make_node("b").gpus(8).nvlink_islands(4).build()
    placement = compute_placement(ResourceRequest(gpus=4), [broken, intact], "topology")
    assert isinstance(placement, Placement) and placement.node == "b"


@pytest.mark.parametrize("gpus", [2, 3, 4])
def test_topology_places_gpus_spread_over_islands(gpus: int) -> None:
    """No NVLink: every GPU is its own island; 3 of them once divided by zero (found by the placement properties)."""
    nodes = [make_node("a").gpus(4).build()]
    request = ResourceRequest(gpus=gpus)
    placed = compute_placement(request, nodes, "topology")
    assert isinstance(placed, Placement) and len(placed.gpu_indices) == gpus
    check_placement(nodes, request, placed)

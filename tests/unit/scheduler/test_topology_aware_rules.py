"""`topology` policy (plugins/topology_aware.py): the fastest shared interconnect first (NVLink island, then
one PCIe switch, then one NUMA node), then the tightest island (best fit keeps whole islands free).

The score is 25 x (tier + 1 / (2 + GPUs left free in the chosen island)), so the tier is floor(score / 25)."""

from __future__ import annotations

import math
from dataclasses import replace

from sched_builders import make_node

from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo, NodeInfo, NodeState, Placement
from corral.scheduler.cycle import compute_placement
from corral.scheduler.plugins.topology_aware import TopologyAware

NVLINK, PCIE, NUMA, NONE = 3, 2, 1, 0


def _tier(score: float) -> int:
    return math.floor(score / 25.0)


def _score(node: NodeState, positions: tuple[int, ...]) -> float:
    return TopologyAware().score_node(node, ResourceRequest(gpus=len(positions)), positions)


def _with(node: NodeState, **per_gpu: tuple[object, ...]) -> NodeState:
    gpus = list(node.info.gpus)
    for field, values in per_gpu.items():
        gpus = [replace(g, **{field: v}) for g, v in zip(gpus, values)]
    return NodeState(replace(node.info, gpus=tuple(gpus)), node.gpu_used_milli)


def test_gpus_on_one_nvlink_island_rank_first() -> None:
    node = make_node("a").gpus(4).nvlink_islands(2).build()
    assert _tier(_score(node, (0, 1))) == NVLINK
    assert _tier(_score(node, (1, 2))) == NONE  # two islands, nothing else shared
    # Both GPUs fill their island: no GPU of it is left free.
    assert _score(node, (0, 1)) == 100.0 * (3 + 1 / 2) / 4


def test_an_nvlink_link_reported_by_one_side_still_joins_an_island() -> None:
    info = NodeInfo("a", (GpuInfo(0, "u0", "A100", 1, nvlink_peers=(1,)), GpuInfo(1, "u1", "A100", 1)))
    assert _tier(_score(NodeState(info), (0, 1))) == NVLINK


def test_one_gpu_shares_no_nvlink() -> None:
    node = make_node("a").gpus(4).nvlink_islands(4).build()
    assert _tier(_score(node, (2,))) == NONE
    on_switch = _with(node, pcie_switch=("s0",) * 4)
    assert _tier(_score(on_switch, (2,))) == PCIE


def test_then_one_pcie_switch_then_one_numa_node() -> None:
    node = make_node("a").gpus(4).build()
    switched = _with(node, pcie_switch=("s0", "s0", "s1", "s1"), numa_node=(0, 0, 0, 0))
    assert _tier(_score(switched, (0, 1))) == PCIE
    assert _tier(_score(switched, (1, 2))) == NUMA  # two switches, one NUMA node
    numa = _with(node, numa_node=(0, 0, 1, 1))
    assert _tier(_score(numa, (2, 3))) == NUMA
    assert _tier(_score(numa, (1, 2))) == NONE
    assert _tier(_score(node, (0, 1))) == NONE  # no topology known


def test_a_faster_tier_always_beats_a_tighter_fit() -> None:
    node = make_node("a").gpus(8).build()
    pcie = _with(node, pcie_switch=("s0",) * 8)
    numa = _with(node, numa_node=(0,) * 8)
    assert _score(pcie, (0, 1)) > _score(numa, (0, 1)) > _score(node, (0, 1))
    nvlink = make_node("b").gpus(8).nvlink_islands(8).build()
    assert _score(nvlink, (0, 1)) > _score(pcie, (0, 1))


def test_best_fit_inside_the_tier_prefers_the_island_with_fewer_free_gpus_left() -> None:
    idle = make_node("idle").gpus(4).nvlink_islands(4).build()
    busy = make_node("busy").gpus(4).nvlink_islands(4).used(1000, 500).build()
    # On `busy` GPUs 0 and 1 are taken (one only in part): taking 2 and 3 leaves none of the island free.
    assert _score(busy, (2, 3)) == 100.0 * (3 + 1 / 2) / 4
    assert _score(idle, (2, 3)) == 100.0 * (3 + 1 / 4) / 4
    got = compute_placement(ResourceRequest(gpus=2, nvlink="preferred"), [idle, busy], "topology")
    assert isinstance(got, Placement) and got.node == "busy" and got.gpu_indices == (2, 3)


def test_no_gpus_scores_zero() -> None:
    assert TopologyAware().score_node(make_node("a").gpus(2).build(), ResourceRequest(), ()) == 0.0

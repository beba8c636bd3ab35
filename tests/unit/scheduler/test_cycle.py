"""compute_placement over small snapshots: constraints, topology, packing of shares, explanations."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from sched_builders import make_node

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState, Placement
from corral.scheduler.cycle import Unschedulable, apply_placement, compute_placement, explain
from corral.scheduler.framework import (
    REASON_CPU,
    REASON_ECC,
    REASON_GPUS_BUSY,
    REASON_LABELS,
    REASON_MEMORY,
    REASON_MIG,
    REASON_MODEL,
    REASON_NVLINK,
    REASON_TAINT,
    REASON_TOO_FEW_GPUS,
)


@dataclass
class Case:
    name: str
    nodes: list[NodeState]
    request: ResourceRequest
    policy: str = "first-free"
    node: str | None = None  # expected node, None = unschedulable
    gpus: tuple[int, ...] | None = None
    reasons: dict[str, int] = field(default_factory=dict)


CASES = [
    Case(
        "whole GPU on first node",
        [make_node("a").gpus(2).build(), make_node("b").gpus(2).build()],
        ResourceRequest(gpus=1),
        node="a",
        gpus=(0,),
    ),
    Case(
        "share packs onto the shared GPU",
        [make_node("a").gpus(2).used(0, 500).build()],
        ResourceRequest(gpus=1, gpu_milli=300),
        node="a",
        gpus=(1,),
    ),
    Case(
        "share opens a fresh GPU when shared one is full",
        [make_node("a").gpus(2).used(0, 800).build()],
        ResourceRequest(gpus=1, gpu_milli=300),
        node="a",
        gpus=(0,),
    ),
    Case(
        "model constraint",
        [make_node("a").gpus(2, "T4-16GB").build(), make_node("b").gpus(2, "H100-80GB").build()],
        ResourceRequest(gpus=1, gpu_models=("A100", "H100")),
        node="b",
    ),
    Case(
        "minimum GPU memory",
        [make_node("a").gpus(2, "T4-16GB", 16384).build()],
        ResourceRequest(gpus=1, min_gpu_memory_mib=40000),
        reasons={REASON_MEMORY: 1},
    ),
    Case(
        "NVLink island chosen for 4 GPUs",
        [make_node("a").gpus(8).nvlink_islands(4).used(1000).build()],
        ResourceRequest(gpus=4),
        node="a",
        gpus=(4, 5, 6, 7),
    ),
    Case(
        "NVLink required and islands broken",
        [make_node("a").gpus(8).nvlink_islands(4).used(1000, 0, 0, 0, 1000).build()],
        ResourceRequest(gpus=4, nvlink="required"),
        reasons={REASON_NVLINK: 1},
    ),
    Case(
        "node selector",
        [make_node("a").gpus(1).labels(zone="x").build(), make_node("b").gpus(1).labels(zone="y").build()],
        ResourceRequest(gpus=1, node_selector=(("zone", "y"),)),
        node="b",
    ),
    Case(
        "taint not tolerated",
        [make_node("a").gpus(1).taints("dedicated").build()],
        ResourceRequest(gpus=1),
        reasons={REASON_TAINT: 1},
    ),
    Case(
        "taint tolerated",
        [make_node("a").gpus(1).taints("dedicated").build()],
        ResourceRequest(gpus=1, tolerations=("dedicated",)),
        node="a",
    ),
    Case(
        "CPU is a resource",
        [make_node("a").gpus(1).host(4000, 1024).build(), make_node("b").gpus(1).build()],
        ResourceRequest(gpus=1, cpu_milli=8000),
        node="b",
    ),
    Case(
        "reasons counted per node",
        [
            make_node("a").gpus(1).used(1000).build(),
            make_node("b").gpus(1).used(1000).build(),
            make_node("c").gpus(1, "T4-16GB").build(),
            make_node("d").gpus(1).host(1000, 1024).build(),
        ],
        ResourceRequest(gpus=1, gpu_models=("A100",), cpu_milli=2000),
        reasons={REASON_GPUS_BUSY: 2, REASON_MODEL: 1, REASON_CPU: 1},
    ),
    Case("too many GPUs", [make_node("a").gpus(2).build()], ResourceRequest(gpus=4), reasons={REASON_TOO_FEW_GPUS: 1}),
    Case(
        "labels rejected",
        [make_node("a").gpus(1).build()],
        ResourceRequest(gpus=1, node_selector=(("zone", "x"),)),
        reasons={REASON_LABELS: 1},
    ),
    Case(
        "bestfit picks the fuller node",
        [make_node("a").gpus(4).build(), make_node("b").gpus(4).used(1000, 1000).build()],
        ResourceRequest(gpus=1),
        policy="bestfit",
        node="b",
    ),
    Case(
        "MIG profile lands on a MIG instance",
        [make_node("a").gpus(2).build(), make_node("b").gpus(1).mig(3).build()],
        ResourceRequest(gpus=2, mig_profile="1g.10gb"),
        node="b",
        gpus=(1, 2),
    ),
    Case(
        "whole-GPU request never takes a MIG instance",
        [make_node("a").gpus(1).used(1000).mig(7).build()],
        ResourceRequest(gpus=1),
        reasons={REASON_GPUS_BUSY: 1},
    ),
    Case(
        "share never lands on a MIG instance",
        [make_node("a").mig(7).build()],
        ResourceRequest(gpus=1, gpu_milli=200),
        reasons={REASON_TOO_FEW_GPUS: 1},
    ),
    Case(
        "MIG profile missing",
        [make_node("a").mig(2, "3g.40gb").build(), make_node("b").gpus(8).build()],
        ResourceRequest(gpus=1, mig_profile="1g.10gb"),
        reasons={REASON_MIG: 2},
    ),
    Case(
        "ECC required",
        [make_node("a").gpus(4).ecc(0).build(), make_node("b").gpus(2).ecc().build()],
        ResourceRequest(gpus=2, ecc=True),
        node="b",
    ),
    Case(
        "ECC required, too few",
        [make_node("a").gpus(4).ecc(0).build()],
        ResourceRequest(gpus=2, ecc=True),
        reasons={REASON_ECC: 1},
    ),
    Case(
        "GPUs from one NUMA node",
        [make_node("a").gpus(4).numa(2).used(1000).build()],
        ResourceRequest(gpus=2),
        node="a",
        gpus=(2, 3),
    ),
    Case(
        "spread picks the emptier node",
        [make_node("a").gpus(4).used(1000).build(), make_node("b").gpus(4).build()],
        ResourceRequest(gpus=1),
        policy="spread",
        node="b",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_compute_placement(case: Case) -> None:
    result = compute_placement(case.request, case.nodes, case.policy)
    if case.node is None:
        assert isinstance(result, Unschedulable)
        assert result.explanation.as_dict() == case.reasons
        assert explain(case.request, case.nodes).as_dict() == case.reasons
    else:
        assert isinstance(result, Placement), result
        assert result.node == case.node
        if case.gpus is not None:
            assert result.gpu_indices == case.gpus


def test_resolvable_when_only_busy() -> None:
    result = compute_placement(ResourceRequest(gpus=1), [make_node("a").gpus(1).used(1000).build()])
    assert isinstance(result, Unschedulable) and result.resolvable
    assert "1 node: not enough free GPUs" in result.reason


def test_apply_placement_updates_snapshot() -> None:
    nodes = [make_node("a").gpus(2).build()]
    placement = compute_placement(ResourceRequest(gpus=1, gpu_milli=400, cpu_milli=1000), nodes, "corral")
    assert isinstance(placement, Placement)
    apply_placement(nodes, placement)
    assert sorted(nodes[0].gpu_used_milli) == [0, 400]
    assert nodes[0].cpu_used_milli == 1000


def test_server_default_policy_is_corral() -> None:
    import inspect

    assert inspect.signature(compute_placement).parameters["policy"].default == "corral"


def test_gang_places_on_distinct_nodes_or_nothing() -> None:
    from corral.scheduler.gang import REASON_GANG_SHORT, compute_gang_placement

    nodes = [make_node(n).gpus(8).nvlink_islands(8).build() for n in "abc"]
    placements = compute_gang_placement(ResourceRequest(gpus=8, nvlink="required"), 3, nodes)
    assert isinstance(placements, list) and sorted(p.node for p in placements) == ["a", "b", "c"]
    result = compute_gang_placement(ResourceRequest(gpus=8), 4, nodes)
    assert isinstance(result, Unschedulable) and REASON_GANG_SHORT in result.explanation.reasons


def test_cpus_come_from_the_gpus_numa_node() -> None:
    nodes = [make_node("a").gpus(4).numa(2).used(1000).build()]
    placement = compute_placement(ResourceRequest(gpus=2, cpu_milli=8000), nodes)
    assert isinstance(placement, Placement) and placement.extra == {"cpu_numa_node": "1"}
    spanning = compute_placement(ResourceRequest(gpus=3), nodes)
    assert isinstance(spanning, Placement) and spanning.extra == {}


def test_mig_request_must_take_whole_instances() -> None:
    from corral.core.errors import ValidationError

    with pytest.raises(ValidationError, match="mig_profile"):
        ResourceRequest(gpus=1, gpu_milli=500, mig_profile="1g.10gb")

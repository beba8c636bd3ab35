"""`corral` policy (plugins/corral.py): the documented score, in GPUs,
-Δ(expected fragmentation) - 2 x Δ(stranded GPUs) - 0.5 x contention(model) x GPUs taken + w x packing tier,
with w = 0.1 / (1 + 50 r), r the restricted share of demand."""

from __future__ import annotations

import pytest
from sched_builders import make_node

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.framework import ScoreContext
from corral.scheduler.plugins.corral import (
    Corral,
    compute_cpu_per_gpu,
    compute_packing_tier,
    compute_reserved_share,
    compute_strand_delta,
    compute_stranded_gpus,
)
from corral.scheduler.plugins.fgd import FragmentationMemo
from corral.scheduler.workload import WorkloadProfile, compute_model_contention, compute_workload_profile


def _documented(node: NodeState, request: ResourceRequest, positions: tuple[int, ...], ctx: ScoreContext) -> float:
    profile = ctx.workload
    assert profile is not None
    weight = 0.1 / (1 + 50 * compute_reserved_share(profile))
    # A model outside the known supply (or no supply at all) has no measured contention.
    supply = ctx.gpu_supply or {}
    contention = compute_model_contention(profile, supply).get(node.info.gpus[positions[0]].model, 0.0)
    return (
        -FragmentationMemo().delta(node, request, positions, profile) / 1000
        - 2.0 * compute_strand_delta(node, request, compute_cpu_per_gpu(profile))
        + weight * compute_packing_tier(node, request, positions)
        - 0.5 * contention * request.total_gpu_milli / 1000
    )


def _profiles() -> tuple[WorkloadProfile, WorkloadProfile]:
    open_ = compute_workload_profile([ResourceRequest(gpus=1, cpu_milli=4000), ResourceRequest(gpus=2)])
    restricted = compute_workload_profile(
        [
            ResourceRequest(gpus=1, gpu_models=("H100",)),
            ResourceRequest(gpus=1, cpu_milli=2000),
            ResourceRequest(gpus=2),
        ]
    )
    return open_, restricted


def test_restricted_demand_fades_packing_and_charges_contention() -> None:
    open_, restricted = _profiles()
    assert compute_reserved_share(open_) == 0.0
    assert compute_reserved_share(restricted) == pytest.approx(1 / 3)
    supply = {"H100": 8, "A100": 8}
    assert compute_model_contention(restricted, supply)["H100"] > 0.0
    assert compute_model_contention(restricted, supply)["A100"] == 0.0


def test_score_is_the_documented_sum_for_each_workload_in_turn() -> None:
    open_, restricted = _profiles()
    supply = {"H100": 8, "A100": 8}  # one mapping, as an engine passes it on every call
    node = make_node("h").gpus(8, "H100").used(1000, 0, 0, 0, 0, 0, 0, 0, cpu_milli=8000).build()
    request = ResourceRequest(gpus=1, cpu_milli=4000)
    policy = Corral()  # one instance scores against several workloads in turn
    for profile in (open_, restricted, open_, restricted):
        ctx = ScoreContext(workload=profile, gpu_supply=supply)
        for positions in ((1,), (7,)):
            assert policy.score_node(node, request, positions, ctx) == pytest.approx(
                _documented(node, request, positions, ctx)
            )


def test_a_scarce_model_restricted_demand_needs_is_kept() -> None:
    _, restricted = _profiles()
    ctx = ScoreContext(workload=restricted, gpu_supply={"H100": 8, "A100": 8})
    h100 = make_node("h").gpus(8, "H100").build()
    a100 = make_node("a").gpus(8, "A100").build()
    request = ResourceRequest(gpus=1)
    assert Corral().score_node(a100, request, (0,), ctx) > Corral().score_node(h100, request, (0,), ctx)


def test_packing_tier_orders_shared_gpu_then_used_node_then_idle_node() -> None:
    idle = make_node("a").gpus(4).build()
    assert compute_packing_tier(idle, ResourceRequest(gpus=1), (0,)) == pytest.approx(0.25)
    used = make_node("a").gpus(4).used(0, 1000).build()
    assert compute_packing_tier(used, ResourceRequest(gpus=1), (0,)) == pytest.approx(1.5)
    busy_cpu = make_node("a").gpus(4).used(cpu_milli=1000).build()
    assert compute_packing_tier(busy_cpu, ResourceRequest(gpus=1), (0,)) == pytest.approx(1.25)
    shared = make_node("a").gpus(4).used(500).build()
    assert compute_packing_tier(shared, ResourceRequest(gpus=1, gpu_milli=500), (0,)) == pytest.approx(2.25)
    assert compute_packing_tier(make_node("c").build(), ResourceRequest(cpu_milli=100), ()) == 0.0


def test_cpu_per_gpu_is_the_workloads_cpu_over_its_gpus() -> None:
    profile = compute_workload_profile(
        [ResourceRequest(gpus=1, cpu_milli=4000), ResourceRequest(gpus=2), ResourceRequest(gpus=1, gpu_milli=500)]
    )
    # Per request on average: (4000 + 0 + 0) / 3 CPU milli over (1 + 2 + 0.5) / 3 GPUs.
    assert compute_cpu_per_gpu(profile) == pytest.approx(4000 / 3.5)
    assert compute_cpu_per_gpu(compute_workload_profile([])) == 0.0


def test_stranded_gpus_are_the_free_gpus_free_cpu_cannot_back() -> None:
    assert compute_stranded_gpus(4000, 2000, 1000.0) == pytest.approx(2.0)
    assert compute_stranded_gpus(1000, 8000, 1000.0) == 0.0
    assert compute_stranded_gpus(4000, 0, 0.0) == 0.0
    node = make_node("a").gpus(4).host(8000, 65536).used(cpu_milli=4000).build()  # 4 GPUs, 4000 CPU free
    # At 2000 CPU per GPU, 4000 free CPU backs 2 of the 4 free GPUs: 2 are stranded before.
    assert compute_strand_delta(node, ResourceRequest(gpus=1, cpu_milli=2000), 2000.0) == pytest.approx(0.0)
    assert compute_strand_delta(node, ResourceRequest(gpus=1), 2000.0) == pytest.approx(-1.0)
    assert compute_strand_delta(node, ResourceRequest(cpu_milli=4000), 2000.0) == pytest.approx(2.0)


def test_score_is_the_documented_sum_where_every_term_counts() -> None:
    open_, restricted = _profiles()
    # 4 GPUs, half the host CPU taken: a share fragments a GPU, and the CPU it takes strands GPUs.
    node = make_node("h").gpus(4, "H100").host(8000, 65536).used(0, 1000, cpu_milli=4000).build()
    request = ResourceRequest(gpus=1, gpu_milli=500, cpu_milli=3000)
    ctx = ScoreContext(workload=restricted, gpu_supply={"H100": 4, "A100": 4})
    assert FragmentationMemo().delta(node, request, (0,), restricted) != 0
    assert compute_strand_delta(node, request, compute_cpu_per_gpu(restricted)) > 0
    policy = Corral()
    assert policy.score_node(node, request, (0,), ctx) == pytest.approx(_documented(node, request, (0,), ctx))
    for supply in ({"H100": 4, "A100": 4}, {"H100": 40, "A100": 4}, {"A100": 8}, None):
        ctx = ScoreContext(workload=restricted, gpu_supply=supply)  # same workload, another supply
        assert policy.score_node(node, request, (0,), ctx) == pytest.approx(_documented(node, request, (0,), ctx))


def test_packing_and_stranding_boundaries() -> None:
    barely = make_node("a").gpus(4).used(1).build()
    assert compute_packing_tier(barely, ResourceRequest(gpus=1, gpu_milli=500), (0,)) >= 2.0
    one_cpu = make_node("a").gpus(4).used(cpu_milli=1).build()
    assert compute_packing_tier(one_cpu, ResourceRequest(gpus=1), (0,)) >= 1.0
    assert compute_stranded_gpus(4000, 2, 1.0) == pytest.approx(2.0)

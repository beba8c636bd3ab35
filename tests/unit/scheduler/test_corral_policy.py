"""The corral policy's three terms beyond FGD: stranded GPUs, model contention, packing."""

from __future__ import annotations

import pytest
from sched_builders import make_node

from corral.core.requests import ResourceRequest
from corral.core.resources import Placement
from corral.scheduler.cycle import compute_placement
from corral.scheduler.framework import ScoreContext
from corral.scheduler.plugins.corral import compute_cpu_per_gpu, compute_strand_delta, compute_stranded_gpus
from corral.scheduler.workload import Shape, compute_gpu_supply, compute_model_contention, profile_from_counts


@pytest.mark.parametrize(
    "free_gpu, free_cpu, per_gpu, stranded",
    [(4000, 40_000, 10_000, 0.0), (4000, 20_000, 10_000, 2.0), (0, 0, 10_000, 0.0), (3000, 0, 0.0, 0.0)],
    ids=["enough CPU", "half backed", "nothing free", "no CPU demand"],
)
def test_stranded_gpus(free_gpu: int, free_cpu: int, per_gpu: float, stranded: float) -> None:
    assert compute_stranded_gpus(free_gpu, free_cpu, per_gpu) == pytest.approx(stranded)


def test_cpu_per_gpu_weighs_shapes_by_probability() -> None:
    profile = profile_from_counts({Shape(8000, 1000, 1): 1, Shape(4000, 500, 1): 1})
    assert compute_cpu_per_gpu(profile) == pytest.approx(6000 / 0.75)


def test_strand_delta_charges_cpu_taken_from_gpus_that_need_it() -> None:
    tight = make_node("a").gpus(4).host(40_000, 262_144).build()  # 10 cores per GPU
    rich = make_node("b").gpus(4).host(160_000, 262_144).build()
    cpu_only = ResourceRequest(cpu_milli=20_000)
    assert compute_strand_delta(tight, cpu_only, 10_000) == pytest.approx(2.0)
    assert compute_strand_delta(rich, cpu_only, 10_000) == 0.0


def test_corral_sends_cpu_heavy_work_where_cpu_is_spare() -> None:
    ctx = ScoreContext(workload=profile_from_counts({Shape(10_000, 1000, 1): 1}))
    nodes = [
        make_node("tight").gpus(4).host(40_000, 262_144).build(),
        make_node("rich").gpus(4).host(160_000, 262_144).build(),
    ]
    placement = compute_placement(ResourceRequest(cpu_milli=30_000), nodes, "corral", ctx=ctx)
    assert isinstance(placement, Placement) and placement.node == "rich"


def test_contention_is_the_restricted_share_of_a_models_demand() -> None:
    supply = {"G2": 8, "T4": 2}
    profile = profile_from_counts({Shape(0, 1000, 1): 1, Shape(0, 1000, 1, ("T4",)): 1})
    contention = compute_model_contention(profile, supply)
    # Unrestricted demand spreads 0.5 / 10 per GPU everywhere; the T4-only half adds 0.5 / 2 on T4.
    assert contention["G2"] == 0.0
    assert contention["T4"] == pytest.approx(0.25 / (0.25 + 0.05))


def test_contention_term_charges_only_contended_models() -> None:
    from corral.scheduler.plugins.corral import Corral

    t4, g2 = make_node("t4").gpus(2, "T4").build(), make_node("g2").gpus(2, "G2").build()
    profile = profile_from_counts({Shape(0, 1000, 1): 1, Shape(0, 1000, 1, ("T4",)): 3})
    ctx = ScoreContext(workload=profile, gpu_supply=compute_gpu_supply([t4.info, g2.info]))
    with_term, without = Corral(), Corral()
    without.contention_weight = 0.0
    request = ResourceRequest(gpus=2)
    charge = with_term.contention_weight * compute_model_contention(profile, ctx.gpu_supply or {})["T4"] * 2
    assert charge > 0
    assert with_term.score_node(t4, request, (0, 1), ctx) == pytest.approx(
        without.score_node(t4, request, (0, 1), ctx) - charge
    )
    assert with_term.score_node(g2, request, (0, 1), ctx) == pytest.approx(without.score_node(g2, request, (0, 1), ctx))


def test_engines_fill_the_gpu_supply_when_the_caller_does_not() -> None:
    from corral.scheduler.cluster import Cluster

    nodes = [make_node("a").gpus(2, "T4").info(), make_node("b").gpus(8, "G2").info()]
    assert Cluster(nodes).ctx.gpu_supply == {"G2": 8, "T4": 2}


def test_corral_puts_a_share_where_it_breaks_no_whole_gpu() -> None:
    """The fragmentation term's sign: for a whole-GPU workload, a half share goes on the GPU already half used
    (fragmentation falls by 0.5 GPU) rather than breaking an idle one (it would rise by 0.5 GPU)."""
    from corral.scheduler.plugins.corral import Corral

    ctx = ScoreContext(workload=profile_from_counts({Shape(0, 1000, 1): 1}))
    idle, broken = make_node("idle").gpus(2).build(), make_node("broken").gpus(2).used(500).build()
    half = ResourceRequest(gpus=1, gpu_milli=500)
    placement = compute_placement(half, [idle, broken], "corral", ctx=ctx)
    assert isinstance(placement, Placement) and (placement.node, placement.gpu_indices) == ("broken", (0,))
    # Without packing, the score is exactly minus the fragmentation delta: +0.5 GPU on the broken GPU, -0.5 on idle.
    frag_only = Corral()
    frag_only.packing_weight = 0.0
    assert frag_only.score_node(broken, half, (0,), ctx) == pytest.approx(0.5)
    assert frag_only.score_node(idle, half, (0,), ctx) == pytest.approx(-0.5)

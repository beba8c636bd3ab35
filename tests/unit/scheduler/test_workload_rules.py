"""The expected workload (workload.py): shape frequencies, CPU groups and the probability a CPU need fits."""

from __future__ import annotations

import pytest
from sched_builders import make_node

from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo, NodeInfo
from corral.scheduler.workload import (
    Shape,
    ShapeGroup,
    compute_gpu_supply,
    compute_model_contention,
    compute_workload_profile,
    profile_from_counts,
    shape_of,
)


def test_prob_cpu_fits_is_the_mass_of_shapes_needing_at_most_that_cpu() -> None:
    group = ShapeGroup(1000, 1, (), 1.0, (1000, 4000, 8000), (0.25, 0.75, 1.0))
    assert group.prob_cpu_fits(999) == 0.0
    assert group.prob_cpu_fits(1000) == 0.25
    assert group.prob_cpu_fits(3999) == 0.25
    assert group.prob_cpu_fits(4000) == 0.75
    assert group.prob_cpu_fits(8000) == 1.0
    assert group.prob_cpu_fits(100_000) == 1.0


def test_profile_counts_each_gpu_request_once_by_default() -> None:
    requests = [ResourceRequest(gpus=1), ResourceRequest(gpus=1), ResourceRequest(gpus=4), ResourceRequest()]
    shapes = dict(compute_workload_profile(requests).shapes)
    assert shapes == {Shape(0, 1000, 1): pytest.approx(2 / 3), Shape(0, 1000, 4): pytest.approx(1 / 3)}


def test_profile_weighted_by_gpu_counts_the_capacity_asked_for() -> None:
    requests = [ResourceRequest(gpus=1), ResourceRequest(gpus=1), ResourceRequest(gpus=4)]
    requests.append(ResourceRequest(gpus=1, gpu_milli=500))
    shapes = dict(compute_workload_profile(requests, weight_by_gpu=True).shapes)
    # 1 + 1 whole GPUs, 4 whole GPUs, half a GPU: 6.5 GPUs in all.
    assert shapes == {
        Shape(0, 1000, 1): pytest.approx(2 / 6.5),
        Shape(0, 1000, 4): pytest.approx(4 / 6.5),
        Shape(0, 500, 1): pytest.approx(0.5 / 6.5),
    }


def test_profile_order_does_not_depend_on_the_order_seen() -> None:
    a, b, c = Shape(1000, 1000, 1), Shape(2000, 500, 1), Shape(0, 1000, 2, ("H100",))
    forward = profile_from_counts({a: 1, b: 1, c: 2})
    backward = profile_from_counts({c: 2, b: 1, a: 1})
    assert forward == backward
    assert forward.shapes[0] == (c, 0.5)  # most frequent first


def test_shapes_differing_only_in_cpu_share_one_group() -> None:
    profile = profile_from_counts({Shape(8000, 1000, 1): 1, Shape(2000, 1000, 1): 2, Shape(4000, 500, 1): 1})
    groups = {(g.gpu_milli, g.gpus): g for g in profile.groups}
    whole = groups[(1000, 1)]
    assert whole.cpus == (2000, 8000)
    assert whole.cum_prob == pytest.approx((0.5, 0.75))
    assert whole.prob == pytest.approx(0.75)
    assert groups[(500, 1)].cpus == (4000,) and groups[(500, 1)].prob == pytest.approx(0.25)


def test_shape_of_keeps_what_decides_placement() -> None:
    assert shape_of(ResourceRequest(cpu_milli=1500)) == Shape(1500, 0, 0, ())
    got = shape_of(ResourceRequest(gpus=2, gpu_models=("H100",), cpu_milli=8000, memory_mib=4096))
    assert got == Shape(8000, 1000, 2, ("H100",))
    assert shape_of(ResourceRequest(gpus=1, gpu_milli=250)) == Shape(0, 250, 1, ())


def test_gpu_supply_counts_healthy_gpus_per_model() -> None:
    sick = NodeInfo("s", (GpuInfo(0, "s0", "H100", 1, healthy=False), GpuInfo(1, "s1", "H100", 1)))
    infos = [make_node("a").gpus(2, "L4").info(), sick, make_node("b").gpus(3, "H100").info()]
    supply = compute_gpu_supply(infos)
    assert supply == {"H100": 4, "L4": 2}
    assert list(supply) == ["H100", "L4"]


def test_model_contention_is_the_restricted_share_of_pressure_on_a_model() -> None:
    profile = profile_from_counts(
        {Shape(0, 1000, 1, ("H100",)): 1, Shape(0, 1000, 1): 1, Shape(0, 1000, 1, ("V100",)): 0}
    )
    supply = {"H100": 2, "A100": 2}
    # The open shape spreads 0.5 x 1 GPU over 4 GPUs (0.125 each); the H100 shape puts 0.5 / 2 = 0.25 on each
    # H100. V100 demand reaches no GPU here and is left out.
    got = compute_model_contention(profile, supply)
    assert got == {"H100": pytest.approx(0.25 / 0.375), "A100": 0.0}
    assert compute_model_contention(profile_from_counts({}), supply) == {"H100": 0.0, "A100": 0.0}
    two = profile_from_counts({Shape(0, 500, 1, ("H100",)): 1, Shape(0, 1000, 2, ("A100",)): 1})
    # Shares count by milli: 0.5 x 0.5 GPU on 2 H100s; 0.5 x 2 GPUs on 2 A100s. Both fully restricted.
    assert compute_model_contention(two, supply) == {"H100": 1.0, "A100": 1.0}


def test_model_contention_weighs_each_shape_by_the_gpus_it_asks_for() -> None:
    supply = {"H100": 2, "A100": 2}
    # Restricted: 0.5 x 1 GPU over 2 H100s = 0.25 each. Open: 0.5 x 2 GPUs over 4 GPUs = 0.25 each.
    whole = profile_from_counts({Shape(0, 1000, 1, ("H100",)): 1, Shape(0, 1000, 2): 1})
    assert compute_model_contention(whole, supply)["H100"] == pytest.approx(0.25 / 0.5)
    # Open: 0.5 x half a GPU over 4 GPUs = 0.0625 each.
    share = profile_from_counts({Shape(0, 1000, 1, ("H100",)): 1, Shape(0, 500, 1): 1})
    assert compute_model_contention(share, supply)["H100"] == pytest.approx(0.25 / 0.3125)
    # Two restricted shapes add up: 1/3 x 1 / 2 + 1/3 x 2 / 2 = 0.5 restricted, plus 1/3 x 1 / 4 open.
    two = profile_from_counts({Shape(0, 1000, 1, ("H100",)): 1, Shape(0, 1000, 2, ("H100",)): 1, Shape(0, 1000, 1): 1})
    assert compute_model_contention(two, supply)["H100"] == pytest.approx(0.5 / (0.5 + 1 / 12))

"""`corral simulate openb` runs the server's cycle in batches: it must give what placing one pod at a time gives."""

from __future__ import annotations

import random

import pytest

from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo, NodeInfo
from corral.sim.openb import TracePod
from corral.sim.placement import run_seed, run_seed_sequential

MODELS = ("T4", "V100M16", "G2")


def random_trace(seed: int) -> tuple[list[NodeInfo], list[TracePod]]:
    """Mixed nodes (1, 2, 4 or 8 GPUs of one model) and pods like openb's: shares, whole GPUs, multi-GPU,
    a model asked for or not, and CPU-only pods, with CPU and memory that sometimes bind."""
    rng = random.Random(seed)
    nodes = []
    for i in range(rng.randint(6, 14)):
        model = rng.choice(MODELS)
        devices = tuple(GpuInfo(k, f"n{i}-{k}", model, 16384) for k in range(rng.choice((1, 2, 4, 8))))
        nodes.append(NodeInfo(f"n{i:02d}", devices, rng.choice((32000, 64000, 96000)), rng.choice((131072, 262144))))
    pods = []
    for k in range(rng.randint(20, 60)):
        shape = rng.random()
        if shape < 0.15:
            gpus, milli = 0, 1000
        elif shape < 0.5:
            gpus, milli = 1, rng.choice((250, 300, 500, 700))
        elif shape < 0.85:
            gpus, milli = 1, 1000
        else:
            gpus, milli = rng.choice((2, 4, 8)), 1000
        models = (rng.choice(MODELS),) if gpus and rng.random() < 0.3 else ()
        req = ResourceRequest(
            gpus=gpus,
            gpu_milli=milli,
            gpu_models=models,
            cpu_milli=rng.choice((1000, 4000, 8000, 16000, 32000)),
            memory_mib=rng.choice((1024, 8192, 32768)),
        )
        pods.append(TracePod(f"p{k}", req, k + 2))
    return nodes, pods


@pytest.mark.parametrize("policy", ["corral", "fgd", "bestfit", "packing", "random", "first-free", "dotprod"])
@pytest.mark.parametrize("trace_seed", range(6))
def test_a_cycle_per_checkpoint_places_as_one_pod_at_a_time(policy: str, trace_seed: int) -> None:
    nodes, pods = random_trace(trace_seed)
    checkpoints = (30, 50, 70, 90, 100, 110, 120, 130)
    for seed in (42, 43):
        cycles: list[int] = []
        batched = run_seed(nodes, pods, policy, seed, checkpoints=checkpoints, cycles=cycles)
        sequential = run_seed_sequential(nodes, pods, policy, seed, checkpoints=checkpoints)
        assert batched == sequential
        assert max(cycles) > 1  # really batched: some cycle decided several pods at once

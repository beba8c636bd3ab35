"""A node's free GPUs as the scheduler sees them: healthy and with nothing allocated."""

from __future__ import annotations

import pytest

from corral.core.resources import GpuInfo, NodeInfo, NodeState


def _gpu(index: int, healthy: bool = True) -> GpuInfo:
    return GpuInfo(index=index, uuid=f"GPU-{index}", model="H100", memory_mib=81920, healthy=healthy)


def test_free_positions_are_healthy_and_unallocated() -> None:
    info = NodeInfo("n1", gpus=(_gpu(0), _gpu(1, healthy=False), _gpu(2), _gpu(3), _gpu(4), _gpu(5)))
    state = NodeState(info, gpu_used_milli=(0, 0, 500, 0, 1, 1000))
    assert state.free_gpu_positions() == [0, 3]


def test_positions_not_device_indices() -> None:
    info = NodeInfo("n1", gpus=(_gpu(7), _gpu(4)))
    assert NodeState(info).free_gpu_positions() == [0, 1]
    assert NodeState(info, gpu_used_milli=(1000, 0)).free_gpu_positions() == [1]


def test_a_node_without_gpus_has_none_free() -> None:
    assert NodeState(NodeInfo("cpu-only")).free_gpu_positions() == []


def test_usage_needs_one_entry_per_gpu() -> None:
    with pytest.raises(ValueError) as e:
        NodeState(NodeInfo("n1", gpus=(_gpu(0), _gpu(1))), gpu_used_milli=(0,))
    assert str(e.value) == "gpu_used_milli must have one entry per GPU"

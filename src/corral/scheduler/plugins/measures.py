"""Shared arithmetic for policies: what a node has left before and after a placement (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import FULL_GPU_MILLI, NodeState


def gpu_capacity_milli(node: NodeState) -> int:
    return sum(FULL_GPU_MILLI for g in node.info.gpus if g.healthy)


def gpu_free_milli(node: NodeState) -> int:
    return sum(FULL_GPU_MILLI - u for g, u in zip(node.info.gpus, node.gpu_used_milli) if g.healthy)


def free_after(node: NodeState, request: ResourceRequest) -> tuple[float, float, float]:
    """Fractions of (GPU, CPU, memory) left free on the node after placing `request` (1 when absent)."""
    cap = gpu_capacity_milli(node)
    gpu = (gpu_free_milli(node) - request.total_gpu_milli) / cap if cap else 1.0
    info = node.info
    cpu = (info.cpu_milli - node.cpu_used_milli - request.cpu_milli) / info.cpu_milli if info.cpu_milli else 1.0
    mem = (info.memory_mib - node.memory_used_mib - request.memory_mib) / info.memory_mib if info.memory_mib else 1.0
    return gpu, cpu, mem


def free_lists_after(
    node: NodeState, request: ResourceRequest, positions: Sequence[int]
) -> tuple[list[int], list[str], int]:
    """Free milli and model per healthy GPU after placing `request` on `positions`, and CPU left."""
    chosen = set(positions)
    free: list[int] = []
    models: list[str] = []
    for pos, (g, used) in enumerate(zip(node.info.gpus, node.gpu_used_milli)):
        if g.healthy:
            free.append(FULL_GPU_MILLI - used - (request.gpu_milli if pos in chosen else 0))
            models.append(g.model)
    return free, models, node.info.cpu_milli - node.cpu_used_milli - request.cpu_milli

"""What a plan's assignment must still satisfy when it is committed (pure): the applier's re-check of each node."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from corral.core.models import Node
from corral.core.requests import ResourceRequest
from corral.core.resources import FULL_GPU_MILLI

Parts = Sequence[tuple[str, Sequence[int]]]


@dataclass(slots=True)
class NodeUse:
    """What the RUNNING jobs hold on one node: milli-GPUs per GPU index, host CPU and memory."""

    gpu_milli: dict[int, int] = field(default_factory=dict)
    cpu_milli: int = 0
    memory_mib: int = 0


def compute_node_use(
    held: Iterable[tuple[Parts, int, int, int]], only: Iterable[str] | None = None
) -> dict[str, NodeUse]:
    """Node name -> NodeUse from the (parts, gpu_milli, cpu_milli, memory_mib per part) of RUNNING jobs;
    `only`: count those nodes only."""
    return add_node_use({}, held, only)


def add_node_use(
    use: dict[str, NodeUse], held: Iterable[tuple[Parts, int, int, int]], only: Iterable[str] | None = None
) -> dict[str, NodeUse]:
    """`use` (changed in place, and returned) with what `held` holds added, as compute_node_use counts it."""
    keep = set(only) if only is not None else None
    for parts, gpu_milli, cpu_milli, memory_mib in held:
        for node, gpus in parts:
            if keep is not None and node not in keep:
                continue
            u = use.setdefault(node, NodeUse())
            for idx in gpus:
                u.gpu_milli[idx] = u.gpu_milli.get(idx, 0) + gpu_milli
            u.cpu_milli += cpu_milli
            u.memory_mib += memory_mib
    return use


def compute_recheck(
    parts: Parts, request: ResourceRequest, nodes: Mapping[str, Node], use: Mapping[str, NodeUse]
) -> str | None:
    """None when every part of a job asking `request` per part still fits its node beside `use`; else why not.
    A node must be READY and not cordoned, each GPU present, healthy and enabled with room for the share, and the
    node's host CPU and memory must hold the request (checked only when it asks for them)."""
    if not parts:
        return "no parts"
    if len({n for n, _ in parts}) != len(parts):
        return "two parts on one node"
    for name, gpus in parts:
        why = _recheck_part(name, gpus, request, nodes.get(name), use.get(name) or NodeUse())
        if why is not None:
            return why
    return None


def _recheck_part(
    name: str, gpus: Sequence[int], request: ResourceRequest, node: Node | None, use: NodeUse
) -> str | None:
    if node is None:
        return f"node {name}: unknown"
    if node.state != "READY" or node.cordoned:
        return f"node {name}: {'cordoned' if node.cordoned else node.state}"
    if len(set(gpus)) != len(gpus):
        return f"node {name}: a GPU listed twice"
    by_index = {g.index: g for g in node.gpus}
    disabled = {s.index for s in node.gpu_status if s.disabled}
    for idx in gpus:
        gpu = by_index.get(idx)
        if gpu is None:
            return f"node {name}: no GPU {idx}"
        if not gpu.healthy or idx in disabled:
            return f"node {name}: GPU {idx} is {'disabled' if idx in disabled else 'unhealthy'}"
        if use.gpu_milli.get(idx, 0) + request.gpu_milli > FULL_GPU_MILLI:
            return f"node {name}: GPU {idx} has {FULL_GPU_MILLI - use.gpu_milli.get(idx, 0)} milli free"
    if request.cpu_milli and use.cpu_milli + request.cpu_milli > node.cpu_milli:
        return f"node {name}: {node.cpu_milli - use.cpu_milli} CPU milli free"
    if request.memory_mib and use.memory_mib + request.memory_mib > node.memory_mib:
        return f"node {name}: {node.memory_mib - use.memory_mib} MiB host memory free"
    return None

"""Feasibility: does a request fit on a node right now, and if not, why (pure).

Checks run cheapest and most permanent first, so the reason recorded is the most telling one.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest, model_matches
from corral.core.resources import FULL_GPU_MILLI, NodeInfo, NodeState
from corral.scheduler.framework import (
    REASON_CPU,
    REASON_ECC,
    REASON_GPUS_BUSY,
    REASON_LABELS,
    REASON_MEM_HOST,
    REASON_MEMORY,
    REASON_MIG,
    REASON_MODEL,
    REASON_NVLINK,
    REASON_RUNTIME,
    REASON_TAINT,
    REASON_TOO_FEW_GPUS,
    REASON_UNSCHEDULABLE_NODE,
    SUCCESS,
    Code,
    Status,
)
from corral.scheduler.topology import select_island


def eligible_positions(node: NodeState, request: ResourceRequest) -> list[int]:
    """GPU positions whose kind (whole GPU or MIG profile), model, memory, ECC and health suit the
    request (ignoring what is in use)."""
    return _eligible(node.info, request)


def _eligible(info: NodeInfo, request: ResourceRequest) -> list[int]:
    return [
        i
        for i, g in enumerate(info.gpus)
        if g.healthy
        and g.mig_profile == request.mig_profile
        and model_matches(g.model, request.gpu_models)
        and g.memory_mib >= request.min_gpu_memory_mib
        and (g.ecc_enabled or not request.ecc)
    ]


def _ineligible_reason(info: NodeInfo, request: ResourceRequest) -> str:
    """Which device property leaves too few GPUs: checked in the order a user would fix them."""
    gpus = [g for g in info.gpus if g.healthy and model_matches(g.model, request.gpu_models)]
    gpus = [g for g in gpus if g.mig_profile == request.mig_profile]
    if len(gpus) < request.gpus:
        return REASON_MIG if request.mig_profile else REASON_TOO_FEW_GPUS
    gpus = [g for g in gpus if g.memory_mib >= request.min_gpu_memory_mib]
    if len(gpus) < request.gpus:
        return REASON_MEMORY
    return REASON_ECC if request.ecc else REASON_TOO_FEW_GPUS


def available_positions(node: NodeState, request: ResourceRequest, eligible: Sequence[int] | None = None) -> list[int]:
    """Eligible GPU positions with room for the request's share now (`eligible`: those of `check_hardware`,
    when the caller keeps them)."""
    room = FULL_GPU_MILLI - request.gpu_milli
    used = node.gpu_used_milli
    return [i for i in (eligible_positions(node, request) if eligible is None else eligible) if used[i] <= room]


def label_matches(value: str | None, wanted: str) -> bool:
    """A node's label value against a selector's: equal, or one of a "|"-joined set (a label value never holds "|":
    a staged gang is pinned to its nodes this way)."""
    if value is None:
        return False
    return value == wanted or ("|" in wanted and bool(value) and value in wanted.split("|"))


def check_node_constraints(node: NodeState, request: ResourceRequest) -> Status:
    """Labels, taints and runtimes: permanent properties of the node, checked before any capacity."""
    if not node.schedulable:
        return Status(Code.UNRESOLVABLE, REASON_UNSCHEDULABLE_NODE)
    if request.node_selector:
        labels = dict(node.info.labels)
        if any(not label_matches(labels.get(k), v) for k, v in request.node_selector):
            return Status(Code.UNRESOLVABLE, REASON_LABELS)
    if node.info.taints and any(t not in request.tolerations for t in node.info.taints):
        return Status(Code.UNRESOLVABLE, REASON_TAINT)
    if request.runtime not in node.info.runtimes:  # an image job needs an agent with a container engine
        return Status(Code.UNRESOLVABLE, REASON_RUNTIME)
    return SUCCESS


def check_hardware(info: NodeInfo, request: ResourceRequest) -> tuple[Status, tuple[int, ...]]:
    """The GPU checks that depend on the node's hardware alone, whatever its load: (SUCCESS or the first
    reason its GPUs can never serve the request, the eligible GPU positions). Nodes of the same hardware share
    it, so the placement engine keeps it per hardware and request."""
    eligible = tuple(_eligible(info, request))
    if len(info.gpus) < request.gpus:
        return Status(Code.UNRESOLVABLE, REASON_TOO_FEW_GPUS), eligible
    if request.gpu_models and not any(model_matches(g.model, request.gpu_models) for g in info.gpus):
        return Status(Code.UNRESOLVABLE, REASON_MODEL), eligible
    if len(eligible) < request.gpus:
        return Status(Code.UNRESOLVABLE, _ineligible_reason(info, request)), eligible
    return SUCCESS, eligible


def check_fit(
    node: NodeState, request: ResourceRequest, hardware: tuple[Status, Sequence[int]] | None = None
) -> Status:
    """SUCCESS, or the first reason the request does not fit on this node (`hardware`: `check_hardware` of
    the node's info, when the caller keeps it)."""
    status = check_node_constraints(node, request)
    if not status.ok:
        return status
    info = node.info
    if request.cpu_milli and info.cpu_milli - node.cpu_used_milli < request.cpu_milli:
        code = Code.UNSCHEDULABLE if info.cpu_milli >= request.cpu_milli else Code.UNRESOLVABLE
        return Status(code, REASON_CPU)
    if request.memory_mib and info.memory_mib - node.memory_used_mib < request.memory_mib:
        code = Code.UNSCHEDULABLE if info.memory_mib >= request.memory_mib else Code.UNRESOLVABLE
        return Status(code, REASON_MEM_HOST)
    if request.gpus == 0:
        return SUCCESS
    status, eligible = check_hardware(info, request) if hardware is None else hardware
    if not status.ok:
        return status
    available = available_positions(node, request, eligible)
    if len(available) < request.gpus:
        return Status(Code.UNSCHEDULABLE, REASON_GPUS_BUSY)
    if request.nvlink == "required" and request.gpus > 1:
        if select_island(node, list(eligible), request.gpus) is None:
            return Status(Code.UNRESOLVABLE, REASON_NVLINK)
        if select_island(node, available, request.gpus) is None:
            return Status(Code.UNSCHEDULABLE, REASON_NVLINK)
    return SUCCESS

"""Build the scheduler's view of the cluster (NodeState list) from stored nodes and running jobs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from corral.core.resources import NodeInfo, NodeState
from corral.store.records import Job, Node, compute_placed_parts


def _usage(placed: Iterable[tuple[int, Sequence[tuple[str, Sequence[int]]], int]]
           ) -> dict[tuple[str, int], tuple[int, int]]:
    """(node, gpu index) -> (used milli, id of the last job seen on it), from (job id, parts, milli) each."""
    usage: dict[tuple[str, int], tuple[int, int]] = {}
    for job_id, parts, milli in placed:
        for node, gpus in parts:
            for idx in gpus:
                used, _ = usage.get((node, idx), (0, 0))
                usage[(node, idx)] = (used + milli, job_id)
    return usage


def compute_usage(jobs: Sequence[Job]) -> dict[tuple[str, int], tuple[int, int]]:
    """(node, gpu index) -> (used milli, job id of the last job seen on it) for RUNNING jobs."""
    return _usage((job.id, job.placed_parts, job.spec.gpu_milli) for job in jobs)


def compute_snapshot(nodes: Sequence[Node], running: Sequence[Job]) -> list[NodeState]:
    usage = compute_usage(running)
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    for job in running:
        for node, _ in job.placed_parts:
            cpu[node] = cpu.get(node, 0) + job.spec.cpu_milli
            mem[node] = mem.get(node, 0) + job.spec.memory_mib
    states = []
    for n in nodes:
        info = NodeInfo(name=n.name, gpus=n.gpus, cpu_milli=n.cpu_milli, memory_mib=n.memory_mib,
                        labels=tuple(sorted(n.labels.items())))
        used = tuple(min(1000, usage.get((n.name, g.index), (0, 0))[0]) for g in n.gpus)
        states.append(NodeState(info=info, gpu_used_milli=used, cpu_used_milli=cpu.get(n.name, 0),
                                memory_used_mib=mem.get(n.name, 0), schedulable=n.state == "READY" and not n.cordoned))
    return states


def compute_usage_from_holders(holders: Sequence[tuple[int, str | None, list[int], list[Any], int]]
                               ) -> dict[tuple[str, int], tuple[int, int]]:
    """compute_usage over the columns of SqlStore.list_gpu_holders (no full job records)."""
    return _usage((job_id, compute_placed_parts(node, gpus, parts), milli) for job_id, node, gpus, parts, milli in holders)

"""Builders for tests of room on whole nodes: nodes whose GPUs the given running jobs occupy, a plan over them,
and a quota book of total guarantees."""

from __future__ import annotations

import sys
from pathlib import Path

from corral.core.resources import NodeState
from corral.scheduler.plan import Plan, Snapshot, compute_plan
from corral.scheduler.queueing import TOTAL, QueuedJob, QueueState, QuotaBook, RunningJob, TenantQuota

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sched_builders import make_node  # noqa: E402

NOW = 10_000.0


def nodes_with(running: list[RunningJob], names: tuple[str, ...] = ("n0", "n1"), gpus: int = 4) -> list[NodeState]:
    """Nodes of `gpus` GPUs each; a GPU a running job's part names is fully used."""
    out = []
    for name in names:
        used = [0] * gpus
        for r in running:
            for node, idx in r.parts:
                if node == name:
                    for i in idx:
                        used[i] = 1000
        out.append(make_node(name).gpus(gpus).used(*used).build())
    return out


def plan(
    running: list[RunningJob],
    pending: list[QueuedJob],
    policy: str = "corral",
    quotas: QuotaBook | None = None,
    names: tuple[str, ...] = ("n0", "n1"),
) -> Plan:
    state = QueueState(pending, running, quotas=quotas or QuotaBook())
    return compute_plan(Snapshot(nodes_with(running, names), state), NOW, "bestfit", policy)


def book(**guaranteed: int) -> QuotaBook:
    """Total guarantees in GPUs per tenant, each with a maximum of 8."""
    return QuotaBook({t: TenantQuota(t, {TOTAL: g * 1000}, {TOTAL: 8000}) for t, g in guaranteed.items()})

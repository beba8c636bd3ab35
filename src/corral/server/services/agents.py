"""Agent use-cases: registration and the sync exchange (reports in, assignments and cancels out)."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.core.resources import GpuInfo
from corral.core.states import JobState, state_for_exit
from corral.server.schemas import AgentRegister, AgentSync, Assignment
from corral.store.base import StateStore
from corral.store.records import Job, Node


def register_node(store: StateStore, body: AgentRegister) -> Node:
    gpus = [GpuInfo(index=g.index, uuid=g.uuid, model=g.model, memory_mib=g.memory_mib, pci_bus_id=g.pci_bus_id,
                    numa_node=g.numa_node, nvlink_peers=tuple(g.nvlink_peers), pcie_switch=g.pcie_switch,
                    ecc_enabled=g.ecc_enabled, healthy=g.healthy) for g in body.gpus]
    return store.upsert_node(body.name, body.hostname or body.name, body.backend, body.cpu_milli, body.memory_mib,
                             body.labels, gpus, datetime.now(UTC))


def apply_reports(store: StateStore, node: str, body: AgentSync) -> tuple[list[int], bool]:
    """Reflect what the agent observed. Returns (exits acknowledged, whether capacity was freed).

    Reconciliation: a job the agent already received but now neither runs nor reports as exited
    was lost (e.g. the agent's state was wiped): it fails with a reason rather than hold GPUs forever.
    """
    now = datetime.now(UTC)
    freed = False
    acked: list[int] = []
    mine = {j.id: j for j in store.list_node_jobs(node)}
    for ex in body.exits:
        job = mine.get(ex.job_id) or store.get_job(ex.job_id)
        if job is not None and job.node == node and not job.state.terminal:
            state = state_for_exit(ex.exit_code, job.cancel_requested)
            freed |= store.finish_job(job.id, state, ex.exit_code, ex.reason, now)
        acked.append(ex.job_id)  # unknown or already final: nothing to keep, the agent may forget it
    seen = set(body.running) | {ex.job_id for ex in body.exits}
    store.mark_delivered([jid for jid in body.running if jid in mine])
    for job in mine.values():
        if job.delivered and job.id not in seen:
            freed |= store.finish_job(job.id, JobState.FAILED, None, "lost: the agent no longer runs it", now)
    return acked, freed


def compute_assignments(store: StateStore, node: Node, running: set[int]) -> tuple[list[Assignment], list[int]]:
    """RUNNING jobs on the node that the agent has not acknowledged yet, and jobs to cancel.

    A job the agent still runs that is no longer RUNNING on this node (cancelled or requeued while the
    node was lost, or finished in the store) is stopped: the store is the source of truth for placement.
    """
    uuids = {g.index: g.uuid for g in node.gpus}
    assignments, cancels = [], []
    mine = store.list_node_jobs(node.name)
    for job in mine:
        if job.cancel_requested:
            cancels.append(job.id)
        if job.id not in running and not job.delivered:
            assignments.append(_assignment(job, uuids))
    cancels.extend(sorted(running - {j.id for j in mine}))
    return assignments, cancels


def _assignment(job: Job, uuids: dict[int, str]) -> Assignment:
    s = job.spec
    return Assignment(job_id=job.id, command=list(s.command), env=dict(s.env), workdir=s.workdir,
                      gpu_indices=list(job.gpu_indices), gpu_uuids=[uuids.get(i, "") for i in job.gpu_indices])

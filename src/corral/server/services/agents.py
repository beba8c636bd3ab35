"""Agent use-cases: registration and the sync exchange (reports in, assignments and cancels out).

The agent reports runs (job id + attempt). Only a report about the job's current attempt on this node
changes the job; anything else is a stale run to stop (running) or to forget (exited).
"""

from __future__ import annotations

from datetime import UTC, datetime

from corral.core.resources import GpuInfo
from corral.core.states import JobState, state_for_exit
from corral.server.schemas import AgentRegister, AgentSync, Assignment, RunRef
from corral.store.base import StateStore
from corral.store.records import Job, Node

def register_node(store: StateStore, body: AgentRegister) -> Node:
    gpus = [GpuInfo(index=g.index, uuid=g.uuid, model=g.model, memory_mib=g.memory_mib, pci_bus_id=g.pci_bus_id,
                    numa_node=g.numa_node, nvlink_peers=tuple(g.nvlink_peers), pcie_switch=g.pcie_switch,
                    ecc_enabled=g.ecc_enabled, healthy=g.healthy) for g in body.gpus]
    return store.upsert_node(body.name, body.hostname or body.name, body.backend, body.cpu_milli, body.memory_mib,
                             body.labels, gpus, datetime.now(UTC), address=body.address)


def _current(job: Job | None, node: str, run: RunRef) -> bool:
    return job is not None and job.node == node and job.attempt == run.attempt and job.state is JobState.RUNNING


def apply_reports(store: StateStore, node: str, body: AgentSync) -> tuple[list[RunRef], bool]:
    """Reflect what the agent observed. Returns (exits acknowledged, whether capacity was freed).

    Reconciliation: a run the agent already received but now neither runs nor reports as exited
    was lost (e.g. the agent's state was wiped): it fails with a reason rather than hold GPUs forever.
    """
    now = datetime.now(UTC)
    freed = False
    acked: list[RunRef] = []
    mine = {j.id: j for j in store.list_node_jobs(node)}
    for ex in body.exits:
        job = mine.get(ex.job_id) or store.get_job(ex.job_id)
        if job is not None and _current(job, node, ex.run):
            if job.preempt_requested and not job.cancel_requested:  # stopped to make room: back to the queue
                freed |= store.requeue_job(job.id, job.reason or "preempted", now, preempted=True)
            else:
                state = state_for_exit(ex.exit_code, job.cancel_requested)
                freed |= store.finish_job(job.id, state, ex.exit_code, ex.reason, now)
        acked.append(ex.run)  # stale, unknown or already final: nothing to keep, the agent may forget it
    seen = {r for r in body.running} | {ex.run for ex in body.exits}
    store.mark_delivered([r.job_id for r in body.running if _current(mine.get(r.job_id), node, r)])
    for job in mine.values():
        if job.delivered and RunRef(job_id=job.id, attempt=max(job.attempt, 1)) not in seen:
            freed |= store.finish_job(job.id, JobState.FAILED, None, "lost: the agent no longer runs it", now)
    return acked, freed


def compute_assignments(store: StateStore, node: Node, running: set[RunRef]) -> tuple[list[Assignment], list[RunRef]]:
    """Runs the agent must start (RUNNING here, not yet acknowledged) and runs it must stop.

    A run the agent still has that is not the current attempt RUNNING on this node (cancelled, requeued
    after a failure or a drain, or finished in the store) is stopped: the store is the source of truth.
    """
    uuids = {g.index: g.uuid for g in node.gpus}
    assignments: list[Assignment] = []
    cancels: list[RunRef] = []
    current: set[RunRef] = set()
    for job in store.list_node_jobs(node.name):
        run = RunRef(job_id=job.id, attempt=max(job.attempt, 1))
        current.add(run)
        if job.cancel_requested or job.preempt_requested:
            cancels.append(run)
        if run not in running and not job.delivered:
            assignments.append(_assignment(job, uuids))
    cancels.extend(sorted(running - current, key=lambda r: (r.job_id, r.attempt)))
    return assignments, cancels


def _assignment(job: Job, uuids: dict[int, str]) -> Assignment:
    s = job.spec
    env = dict(s.env)
    env["CORRAL_ATTEMPT"] = str(job.attempt)
    if s.port:
        env["CORRAL_PORT"] = str(s.port)
        env["CORRAL_PROXY_PREFIX"] = f"/proxy/jobs/{job.id}/"  # serve under this path (e.g. Jupyter base_url)
    if job.attempt > 1:  # an earlier attempt was stopped (GPU failure, node lost, preemption, drain)
        env["CORRAL_PREEMPTED"] = "1"
    return Assignment(job_id=job.id, attempt=max(job.attempt, 1), command=list(s.command), env=env,
                      workdir=s.workdir, gpu_indices=list(job.gpu_indices),
                      gpu_uuids=[uuids.get(i, "") for i in job.gpu_indices])

"""Agent use-cases: registration and the sync exchange (reports in, assignments and cancels out).

The agent reports runs (job id + attempt). Only a report about the job's current attempt on this node
changes the job; anything else is a stale run to stop (running) or to forget (exited).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol

from corral import __version__
from corral.api.schemas import AgentRegister, AgentSync, Assignment, RegistryAuth, RunRef
from corral.core.containers import container_to_dict
from corral.core.errors import ValidationError
from corral.core.pools import CLUSTER_KINDS, POOL_LABEL, SOURCE_LABEL, cluster_pool_of
from corral.core.states import JobState, state_for_exit
from corral.core.unix_identity import DEFAULT_JOB_UIDS, JobIdentity, UidRange, compute_job_identity, parse_uid_range
from corral.core.webports import DEFAULT_JOB_PORTS, parse_port_range
from corral.server.keyring import Keyring
from corral.server.services.secrets import SecretUnavailable, resolve_registry_secret, resolve_secret_env
from corral.server.services.webports import assign_web_port, is_head
from corral.store.base import StateStore
from corral.store.protocols import NodeStore, PoolStore, ReplicaStore
from corral.store.records import Job, Node

log = logging.getLogger("corral.agents")


class PoolsAndNodes(NodeStore, PoolStore, Protocol):
    """What check_agent_name reads."""


DEFAULT_UID_RANGE = parse_uid_range(DEFAULT_JOB_UIDS)
DEFAULT_JOB_PORT_RANGE = parse_port_range(DEFAULT_JOB_PORTS)


# A node's heartbeat is written at most this often: a busy agent syncs several times a second (each exit is
# reported at once), and a node is lost only after node_lost_after_s (60 s) without one.
HEARTBEAT_WRITE_EVERY = timedelta(seconds=2)


def record_heartbeat(store: NodeStore, record: Node, now: datetime) -> bool:
    """The node was heard from at `now` (its sync): written unless a heartbeat of under HEARTBEAT_WRITE_EVERY ago
    is on record and the node is READY (a LOST node is READY again at once). False when the node is gone."""
    if record.state == "READY" and timedelta(0) <= now - record.last_heartbeat_at < HEARTBEAT_WRITE_EVERY:
        return True
    return store.touch_node(record.name, now)


def register_node(store: StateStore, body: AgentRegister) -> Node:
    if body.agent_version and body.agent_version != __version__:  # version skew: docs/operations.md
        log.warning("agent %s runs Corral %s, this server %s: agents may be older than the servers, never newer "
                    "(upgrade the servers first)", body.name, body.agent_version, __version__)  # fmt: skip
    check_agent_name(store, body.name)
    gpus = [g.to_info() for g in body.gpus]
    # A node's pool is the server's to say (a cloud pool started it), never its agent's.
    labels = {k: v for k, v in body.labels.items() if k not in (POOL_LABEL, SOURCE_LABEL)}  # the server's to say
    started = store.get_pool_node(body.name)
    if started is not None and started[0].live:
        labels[POOL_LABEL] = started[0].pool
    node = store.upsert_node(
        body.name,
        body.hostname or body.name,
        body.backend,
        body.cpu_milli,
        body.memory_mib,
        labels,
        gpus,
        datetime.now(UTC),
        address=body.address,
        isolation=body.isolation,
        runtimes=tuple(body.runtimes),
    )
    if body.images is not None and tuple(body.images) != node.images:
        store.set_node_images(node.name, body.images)
    return node


def check_agent_name(store: StateStore | PoolsAndNodes, node: str) -> None:
    """An agent never speaks for a node of a Slurm or Kubernetes pool (it would be handed that cluster's jobs,
    their secrets included): such a name is refused at join, renewal, registration and sync."""
    held = store.get_node(node)
    pool = cluster_pool_of(node, held.labels if held is not None else None,
                           [p.name for p in store.list_pools() if p.spec.kind in CLUSTER_KINDS])  # fmt: skip
    if pool is not None:
        raise ValidationError("name", f"{node} is a name of the {pool} pool's cluster: no agent takes it")


def compute_notice_s(store: StateStore, node: Node, now: datetime | None = None) -> float | None:
    """Seconds left of a spot interruption notice on a cloud pool's node (None: no notice, or not a pool node)."""
    if POOL_LABEL not in node.labels:
        return None
    got = store.get_pool_node(node.name)
    if got is None or got[0].notice_at_s is None:
        return None
    return max(got[0].notice_at_s - (now or datetime.now(UTC)).timestamp(), 0.0)


def _on(job: Job, node: str) -> bool:
    return any(n == node for n, _ in job.placed_parts)


def _run_of(job: Job, node: str) -> RunRef:
    return RunRef(job_id=job.id, attempt=max(job.attempt, 1), rank=job.rank_on(node))


def _current(job: Job | None, node: str, run: RunRef) -> bool:
    return (
        job is not None
        and job.state is JobState.RUNNING
        and _on(job, node)
        and job.attempt == run.attempt
        and job.rank_on(node) == run.rank
    )


def _apply_exit(
    store: StateStore, job: Job, node: str, exit_code: int, reason: str, now: datetime
) -> tuple[int, JobState, int | None, str] | bool:
    """One part ended. A single-node job ends with it; a gang ends when a part fails (the other parts are then
    stopped) or when every part has exited 0. Returns the finish it leads to (job id, state, exit code, reason),
    for the caller to write with the report's others, or, when it wrote something else itself (a preempted job
    requeued, a gang's part recorded), whether GPUs were freed."""
    if job.preempt_requested and not job.cancel_requested:  # stopped to make room: back to the queue
        return store.requeue_job(job.id, job.reason or "preempted", now, preempted=True)
    if job.spec.nodes > 1 and exit_code == 0 and not job.cancel_requested:
        exits = store.record_part_exit(job.id, node, exit_code)
        if len(exits) < len(job.placed_parts):
            return False
    state = state_for_exit(exit_code, job.cancel_requested)
    if job.spec.nodes > 1 and exit_code != 0 and not job.cancel_requested:
        reason = reason or f"part on {node} (rank {job.rank_on(node)}) exited with {exit_code}"
    return (job.id, state, exit_code, reason)


class ReportOrder:
    """Per node, the newest agent report applied. An agent has two syncs that may cross on the way (the long poll
    and the watch loop's report of an exit): a report whose snapshot is older than one already applied must not
    say that a run it had not launched yet is gone. Reports of one node are applied one at a time (`lock`);
    `is_fresh` tells, and records, whether a report is newer than every one before it (a new `boot` starts over;
    an agent that sends no `boot` is always fresh, as before)."""

    def __init__(self, store: ReplicaStore | None = None) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._last: dict[str, tuple[str, int]] = {}
        # With several replicas an agent that fails over reports to another one: the order is kept in the database
        # too (a report an older snapshot than one another replica applied counts for its exits only).
        self._store = store

    def lock(self, node: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(node, threading.Lock())

    def is_fresh(self, node: str, boot: str, seq: int) -> bool:
        """Call with `lock(node)` held."""
        if not boot:
            return True
        last = self._last.get(node)
        if last is not None and last[0] == boot and seq <= last[1]:
            return False
        if self._store is not None and not self._store.advance_report_order(node, boot, seq):
            return False
        self._last[node] = (boot, seq)
        return True


def apply_reports(
    store: StateStore, node: str, body: AgentSync, fresh: bool = True, jobs: Sequence[Job] | None = None
) -> tuple[list[RunRef], bool]:
    """Reflect what the agent observed. Returns (exits acknowledged, whether capacity was freed).

    Reconciliation: a run the agent already received but now neither runs nor reports as exited
    was lost (e.g. the agent's state was wiped): it fails with a reason rather than hold GPUs forever.
    A report that is not `fresh` (older than one applied already: ReportOrder) brings its exits only; what it
    says runs, or no longer runs, is out of date. `jobs`: the node's RUNNING jobs as list_node_jobs just read them,
    under the node's report lock (None: read here).
    """
    now = datetime.now(UTC)
    freed = False
    acked: list[RunRef] = []
    mine = {j.id: j for j in (store.list_node_jobs(node) if jobs is None else jobs)}
    _record_image_digests(store, node, body, mine)  # first: a run that ended at once ran an image too
    finishes: list[tuple[int, JobState, int | None, str]] = []
    runs: dict[int, int] = {}  # job -> the attempt each finish is the end of (checked current when read)
    for ex in body.exits:
        # Only a job RUNNING here can be current (`mine`): no read per exit, so a node that reports a long list of
        # other jobs' ids (a compromised one) makes no work of the database.
        job = mine.get(ex.job_id)
        if job is not None and _current(job, node, ex.run):
            outcome = _apply_exit(store, job, node, ex.exit_code, ex.reason, now)
            if isinstance(outcome, tuple):
                finishes.append(outcome)
                runs[job.id] = job.attempt
            else:
                freed |= outcome
        acked.append(ex.run)  # stale, unknown or already final: nothing to keep, the agent may forget it
    # The report's ends in one transaction, each only while its job still runs the attempt checked above: one
    # requeued or placed again since (elsewhere, say) is not ended by the exit of its old run.
    freed |= any(store.finish_jobs(finishes, now, runs))
    if not fresh:
        return acked, freed
    seen = {r for r in body.running} | {ex.run for ex in body.exits}
    # Only runs not yet noted as delivered to this node: usually none, and then no write at all.
    _record_phases(store, node, body, mine)
    if body.images is not None:
        _record_node_images(store, node, body.images)
    store.mark_delivered(
        [
            r.job_id
            for r in body.running
            if _current(mine.get(r.job_id), node, r) and node not in mine[r.job_id].delivered_to
        ],
        node,
    )
    lost = [
        job
        for job in mine.values()
        if node in job.delivered_to and node not in job.part_exits and _run_of(job, node) not in seen
    ]
    if lost:  # as read at the start of the report: ended only if still that run
        why = f"lost: the agent on {node} no longer runs it"
        ends = store.finish_jobs(
            [(j.id, JobState.FAILED, None, why) for j in lost], now, {j.id: j.attempt for j in lost}
        )
        freed |= any(ends)
    return acked, freed


def _record_image_digests(store: StateStore, node: str, body: AgentSync, mine: dict[int, Job]) -> None:
    """The image a running container job's current attempt runs, as its node's engine named it: written once
    (only a change is a write)."""
    for key, digest in body.image_digests.items():
        run = RunRef.from_key(key)
        job = mine.get(run.job_id)
        if _current(job, node, run) and job is not None and job.image_digest != digest:
            store.set_image_digest(job.id, job.attempt, digest)


def _record_phases(store: StateStore, node: str, body: AgentSync, mine: dict[int, Job]) -> None:
    """What each running run of this node does before its command starts ("pulling 43%"), and "" once it
    runs: only a change is a write. A gang's phase is its head's (rank 0)."""
    for job in mine.values():
        run = _run_of(job, node)
        if run.rank or not _current(job, node, run):
            continue
        phase = body.phases.get(run.key, "")
        if phase != job.phase and (phase or run in body.running or job.phase):
            store.set_job_phase(job.id, job.attempt, phase)


def _record_node_images(store: StateStore, node: str, images: list[str]) -> None:
    current = store.get_node(node)
    if current is not None and tuple(images) != current.images:
        store.set_node_images(node, images)


def compute_assignments(
    store: StateStore,
    node: Node,
    running: set[RunRef],
    keyring: Keyring | None = None,
    uids: UidRange = DEFAULT_UID_RANGE,
    job_ports: range = DEFAULT_JOB_PORT_RANGE,
    port_salt: int = 0,
    log_max_bytes: int = 0,
    jobs: Sequence[Job] | None = None,
) -> tuple[list[Assignment], list[RunRef]]:
    """Runs the agent must start (RUNNING here, not yet acknowledged) and runs it must stop.

    A run the agent still has that is not the current attempt RUNNING on this node (cancelled, requeued
    after a failure or a drain, or finished in the store) is stopped: the store is the source of truth.
    A job's secrets are opened here, only for the agent that starts it (`keyring`); a job whose secret is
    gone (or that has secrets and no keyring was given) fails, saying which secret, instead of starting.
    Each run carries the Unix identity it runs as (the owner's mapping, else a UID from `uids`), resolved here
    so that every node agrees; a job whose owner has none fails with the reason instead of starting.
    A job with a web UI gets its port from `job_ports` here, never one another job of this node holds.
    Each run's log is capped on the node at `log_max_bytes` (CORRAL_JOB_LOG_MAX_MB; 0: no limit).
    `jobs`: the node's RUNNING jobs as list_node_jobs just read them (None: read here).
    """
    uuids = {g.index: g.uuid for g in node.gpus}
    assignments: list[Assignment] = []
    cancels: list[RunRef] = []
    current: set[RunRef] = set()
    # only runs with a part here, whatever the read returns (a second line behind its match on node names)
    jobs = [j for j in (store.list_node_jobs(node.name) if jobs is None else jobs) if _on(j, node.name)]
    ports_by_job = {j.id: j.spec.port for j in jobs if j.spec.port and is_head(j, node.name)}
    for job in jobs:
        run = _run_of(job, node.name)
        current.add(run)
        if node.name in job.part_exits:  # this part is done; the gang's other parts still run
            continue
        if job.cancel_requested or job.preempt_requested:
            cancels.append(run)
        if run not in running and node.name not in job.delivered_to:
            try:
                secret_env = _open_secrets(store, keyring, job)
                registry_auth = _open_registry_auth(store, keyring, job)
                identity = load_job_identity(store, job, uids)
            except (SecretUnavailable, ValidationError) as e:
                store.finish_job(job.id, JobState.FAILED, None, f"cannot start: {e.message}", datetime.now(UTC))
                continue
            web_port = assign_web_port(store, job, node.name, ports_by_job, job_ports, port_salt)
            assignments.append(
                _assignment(job, node.name, uuids, store, web_port).model_copy(
                    update={
                        "secret_env": secret_env,
                        "registry_auth": registry_auth,
                        "uid": identity.uid,
                        "gid": identity.gid,
                        "unix_user": identity.user,
                        "log_max_bytes": log_max_bytes,
                    }
                )
            )
    cancels.extend(sorted(running - current, key=lambda r: (r.job_id, r.attempt)))
    return assignments, cancels


def load_job_identity(store: StateStore, job: Job, uids: UidRange) -> JobIdentity:
    """Whom the job runs as: its owner's (jobs of a schedule: the schedule's owner). Raises ValidationError."""
    owner = store.get_user(job.spec.user_id) if job.spec.user_id is not None else None
    if owner is None:
        return compute_job_identity(None, "", None, uids)
    mapped = None if owner.unix_uid is None else (owner.unix_uid, owner.unix_gid or owner.unix_uid)
    return compute_job_identity(owner.id, owner.name, mapped, uids)


def _open_secrets(store: StateStore, keyring: Keyring | None, job: Job) -> dict[str, str]:
    if not job.spec.secret_env:
        return {}
    if keyring is None:
        raise SecretUnavailable("the server handed the job out without its secrets keyring")
    return resolve_secret_env(store, keyring, job.spec.tenant_id, job.spec.secret_env)


def _open_registry_auth(store: StateStore, keyring: Keyring | None, job: Job) -> RegistryAuth | None:
    """The registry login a container job's image is pulled with, opened for its agent only."""
    c = job.spec.container
    if c is None or not c.registry_secret:
        return None
    if keyring is None:
        raise SecretUnavailable("the server handed the job out without its secrets keyring")
    host, username, password = resolve_registry_secret(store, keyring, job.spec.tenant_id, c.registry_secret)
    return RegistryAuth(host=host, username=username, password=password)


def _assignment(job: Job, node: str, uuids: dict[int, str], store: StateStore, web_port: int | None) -> Assignment:
    s = job.spec
    env = dict(s.env)
    env["CORRAL_ATTEMPT"] = str(job.attempt)
    gpus = job.gpus_on(node)
    rank = job.rank_on(node)
    if s.nodes > 1:  # what torchrun / NCCL need to find each other
        head = store.get_node(job.placed_parts[0][0])
        env.update(
            CORRAL_NODE_RANK=str(rank),
            CORRAL_NUM_NODES=str(len(job.placed_parts)),
            CORRAL_MASTER_ADDR=head.address if head else job.placed_parts[0][0],
            CORRAL_MASTER_PORT=str(29500 + job.id % 20000),
            CORRAL_NODES=",".join(n for n, _ in job.placed_parts),
        )
    if web_port is not None:  # the job's web UI listens here; the proxy reaches nothing else of the node
        env["CORRAL_JOB_PORT"] = env["PORT"] = str(web_port)
        env["CORRAL_PROXY_PREFIX"] = f"/proxy/jobs/{job.id}/"  # serve under this path (e.g. Jupyter base_url)
    if s.array_index is not None:  # a task of a job array (as SLURM_ARRAY_TASK_ID / SLURM_ARRAY_JOB_ID)
        env["CORRAL_ARRAY_INDEX"] = str(s.array_index)
        env["CORRAL_ARRAY_JOB_ID"] = str(s.array_id)
    if job.attempt > 1:  # an earlier attempt was stopped (GPU failure, node lost, preemption, drain)
        env["CORRAL_PREEMPTED"] = "1"
    return Assignment(
        job_id=job.id,
        attempt=max(job.attempt, 1),
        rank=rank,
        command=list(s.command),
        env=env,
        workdir=s.workdir,
        gpu_indices=list(gpus),
        gpu_uuids=[uuids.get(i, "") for i in gpus],
        container=container_to_dict(s.container) if s.container is not None else None,
        cpu_milli=s.cpu_milli,
        memory_mib=s.memory_mib,
        web_port=web_port,  # a container job publishes it (the env's CORRAL_JOB_PORT is the port inside)
        staged_in=bool(s.stage_in),
        stage_dir=bool(s.stage_in or s.stage_out),
    )

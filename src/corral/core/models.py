"""Domain models: a job (its spec carries its ResourceRequest), a node with its GPUs, tenants, quotas, queues."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from corral.core.containers import RUNTIME_DOCKER, RUNTIME_PROCESS, ContainerSpec
from corral.core.pools import CLUSTER_KINDS, KUBERNETES, NODE_LABEL, POOL_LABEL, SLURM
from corral.core.requests import ResourceRequest
from corral.core.resources import GpuInfo
from corral.core.staging import StageItem
from corral.core.states import JobState

__all__ = [
    "GpuInfo",
    "GpuStatus",
    "Job",
    "JobSpec",
    "Node",
    "Queue",
    "Quota",
    "Tenant",
    "compute_placed_parts",
    "compute_request",
]


@dataclass(frozen=True, slots=True)
class Tenant:
    id: int
    name: str
    parent_id: int | None  # a department above this team, for hierarchical quotas
    weight: float  # fair-share weight
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Quota:
    """GPUs a tenant is guaranteed and may reach by borrowing, for one GPU model ("" = all models)."""

    tenant_id: int
    gpu_model: str
    guaranteed_gpus: int
    max_gpus: int | None  # None = no limit beyond the pool


@dataclass(frozen=True, slots=True)
class Queue:
    id: int
    tenant_id: int
    name: str
    mode: str  # "best-effort" or "strict" (a blocked head blocks the queue)
    priority: int


@dataclass(frozen=True, slots=True)
class GpuStatus:
    """Health and admin state of one GPU: it is schedulable only when healthy and not disabled."""

    index: int
    healthy: bool = True
    reason: str = ""  # why it is unhealthy (xid, ecc_dbe, off_bus, ...)
    disabled: bool = False  # taken out by an admin (`corral gpus disable`), until enabled


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    hostname: str
    backend: str
    cpu_milli: int
    memory_mib: int
    state: str  # READY | LOST
    registered_at: datetime
    last_heartbeat_at: datetime
    gpus: tuple[GpuInfo, ...] = ()  # `healthy` there already folds in health and admin disable
    labels: dict[str, str] = field(default_factory=dict)
    cordoned: bool = False  # no new work is placed here
    address: str = ""  # host or IP the server uses to reach jobs on this node (their web UIs)
    gpu_status: tuple[GpuStatus, ...] = ()
    isolation: str = ""  # users | single-user: whether its agent runs jobs as their users (reported at register)
    runtimes: tuple[str, ...] = (RUNTIME_PROCESS,)  # how its agent can run jobs: process, docker (reported)
    images: tuple[str, ...] = ()  # container images cached on it, most recently used first (reported)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a user submitted: validated before it reaches the store.

    `request` (what one node must hold for one part of the job) is built once from the resource fields when
    the spec is made, so every reader (the submit checks, the scheduler, the applier) sees the same request;
    `dataclasses.replace` rebuilds it. A malformed request raises ValidationError naming the field.
    """

    command: tuple[str, ...]
    name: str = ""
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    gpus: int = 0
    gpu_milli: int = 1000
    gpu_models: tuple[str, ...] = ()
    min_gpu_memory_mib: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    priority: int = 0
    user_id: int | None = None
    tenant_id: int | None = None
    queue: str = "default"
    time_limit_s: int | None = None
    max_retries: int = 3  # requeues after a GPU or node failure before the job FAILS
    # A web UI opened through Corral's proxy. None: none; 0: asked for, no port yet; else the port Corral
    # assigned on the job's node (CORRAL_JOB_PORT), recorded when it is handed to the agent
    port: int | None = None
    nodes: int = 1  # a gang: `gpus` GPUs on each of `nodes` nodes, all started at once
    schedule_id: int | None = None  # the repeating-job schedule that started it
    secret_env: dict[str, str] = field(default_factory=dict)  # VAR -> tenant secret name (never a value)
    # A task of a job array (core/arrays.py): the array's id (its first task's job id, set by the store), this
    # task's index (CORRAL_ARRAY_INDEX), and how many of the array's tasks may run at once (None: no limit).
    array_id: int | None = None
    array_index: int | None = None
    array_limit: int | None = None
    container: ContainerSpec | None = None  # runs in a container of this image (else as a process): core/containers.py
    # A replica of a long-running service (core/services.py): the service and the revision it runs.
    service_id: int | None = None
    service_revision: int | None = None
    # Node taints it tolerates (core/pools.py: `spot` lets it run on spot nodes) and the pool it must run in ("" any).
    tolerations: tuple[str, ...] = ()
    pool: str = ""
    # Data staging (core/staging.py): input copied to its node before it starts, output shipped after it ends; the
    # tenant secret (kind s3) that opens S3. `pinned_node`: not submitted: its input is staged there, so it runs
    # there only (set when the store reads a job whose stage_state is staged; a gang's nodes joined by "|": one of).
    stage_in: tuple[StageItem, ...] = ()
    stage_out: tuple[StageItem, ...] = ()
    stage_secret: str = ""
    pinned_node: str = ""
    request: ResourceRequest = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "request", compute_request(self))


def compute_request(spec: JobSpec) -> ResourceRequest:
    """The per-node request of a spec (each of its `nodes` parts asks for this much)."""
    return ResourceRequest(
        gpus=spec.gpus,
        gpu_milli=spec.gpu_milli,
        gpu_models=tuple(spec.gpu_models),
        min_gpu_memory_mib=spec.min_gpu_memory_mib,
        cpu_milli=spec.cpu_milli,
        memory_mib=spec.memory_mib,
        runtime=RUNTIME_DOCKER if spec.container is not None else RUNTIME_PROCESS,
        image=spec.container.image if spec.container is not None else "",
        # a cluster kind is tolerated only as compute_cluster_tolerations says, never because a user asked for it
        tolerations=tuple(t for t in spec.tolerations if t not in CLUSTER_KINDS) + compute_cluster_tolerations(spec),
        node_selector=(((POOL_LABEL, spec.pool),) if spec.pool else ())
        + (((NODE_LABEL, spec.pinned_node),) if spec.pinned_node else ()),
    )


def compute_cluster_tolerations(spec: JobSpec) -> tuple[str, ...]:
    """The cluster pools a job can run in: a node of a slurm or kubernetes pool carries its kind as a taint
    (store/snapshot.py), tolerated only by the jobs that cluster can run. Slurm runs commands, not containers;
    Kubernetes runs containers, one Pod each (no multi-node jobs). Neither has a Corral agent on its nodes, so
    neither takes a job whose data Corral stages or whose web UI Corral's proxy reaches."""
    if spec.stage_in or spec.stage_out or spec.port is not None:
        return ()
    if spec.container is None:
        return (SLURM,)
    if spec.nodes == 1 and not spec.container.mounts and spec.container.port is None:
        return (KUBERNETES,)
    return ()


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    spec: JobSpec
    state: JobState
    created_at: datetime
    node: str | None = None
    gpu_indices: tuple[int, ...] = ()
    exit_code: int | None = None
    reason: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    cancel_requested: bool = False
    delivered: bool = False
    attempt: int = 0
    not_before: datetime | None = None  # retry backoff: not placed before this time
    failures: int = 0  # attempts ended by a GPU or node failure (what max_retries counts)
    preempt_requested: bool = False  # being preempted: the agent stops it, then it requeues
    preempted_for: int | None = None  # the waiting job it is preempted for (the GPUs it releases are that job's)
    preemptions: int = 0
    attained_gpu_s: float = 0.0  # GPU-seconds run by earlier attempts
    parts: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (node, GPU indices) per rank while placed
    delivered_to: frozenset[str] = frozenset()  # nodes whose agent holds its part
    part_exits: dict[str, int] = field(default_factory=dict)  # node -> exit code of its part (gangs)
    image_digest: str = ""  # a container job: the image its current attempt runs (reported by the agent)
    phase: str = ""  # a RUNNING job before its command starts: e.g. "pulling 43%" (reported by the agent)
    # Its input's staging (core/staging.py): "" none yet, staging (on stage_nodes now, stage_progress says how far;
    # stage_done: those that have it in), staged (on stage_nodes: it runs there; stage_node is the first of them).
    # Its output's: "" none, pending (to ship once it ends), running, done, failed, with the outcome in
    # stage_out_message.
    stage_state: str = ""
    stage_node: str | None = None
    stage_progress: str = ""
    stage_nodes: tuple[str, ...] = ()
    stage_done: tuple[str, ...] = ()
    stage_out_state: str = ""
    stage_out_message: str = ""

    @property
    def placed_parts(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Where the job runs: (node, GPU indices) per rank (stored jobs carry it built; see store.sql._job)."""
        return self.parts or compute_placed_parts(self.node, self.gpu_indices, ())

    def gpus_on(self, node: str) -> tuple[int, ...]:
        return next((g for n, g in self.placed_parts if n == node), ())

    def rank_on(self, node: str) -> int:
        return next((i for i, (n, _) in enumerate(self.placed_parts) if n == node), 0)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def request(self) -> ResourceRequest:
        """What each part of the job asks of its node (the spec's request)."""
        return self.spec.request


def compute_placed_parts(
    node: str | None, gpu_indices: Sequence[int], parts: Sequence[Sequence[Any]]
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """A job's (node, GPU indices) per rank from its stored columns: its parts, or its one node for a row
    written before gangs existed. Every reader of placements (records, reports, inventory) goes through here."""
    if parts:
        return tuple((str(n), tuple(int(i) for i in g)) for n, g in parts)
    return ((node, tuple(gpu_indices)),) if node else ()

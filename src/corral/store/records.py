"""Plain records the store returns: frozen dataclasses, no ORM objects leak out of the store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from corral.core.resources import GpuInfo
from corral.core.states import JobState


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
class User:
    id: int
    name: str
    role: str
    created_at: datetime
    tenant_id: int | None = None
    password_hash: str = field(default="", repr=False)
    directory: str = ""  # "" local; "ldap" or "oidc": a directory manages it (see corral.core.directory)
    disabled: bool = False  # no login, and every token of the user fails
    unix_uid: int | None = None  # the account an admin mapped the user to; None: a UID from CORRAL_JOB_UIDS
    unix_gid: int | None = None


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: int
    user_id: int | None
    kind: str  # "user" | "join"
    name: str
    created_at: datetime
    revoked: bool
    expires_at: datetime | None = None
    is_session: bool = False  # a login session: ends when its user's password changes
    parent_id: int | None = None  # the token a session was opened with: its revocation ends the session


@dataclass(frozen=True, slots=True)
class GpuStatus:
    """Health and admin state of one GPU: it is schedulable only when healthy and not disabled."""

    index: int
    healthy: bool = True
    reason: str = ""  # why it is unhealthy (xid, ecc_dbe, off_bus, ...)
    disabled: bool = False  # taken out by an admin (`corral gpus disable`), until enabled


@dataclass(frozen=True, slots=True)
class NodeEvent:
    node: str
    gpu_index: int | None
    at: datetime
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: datetime
    actor: str
    action: str
    target: str
    detail: str


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


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a user submitted: validated before it reaches the store."""

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
    preemptions: int = 0
    attained_gpu_s: float = 0.0  # GPU-seconds run by earlier attempts
    parts: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (node, GPU indices) per rank while placed
    delivered_to: frozenset[str] = frozenset()  # nodes whose agent holds its part
    part_exits: dict[str, int] = field(default_factory=dict)  # node -> exit code of its part (gangs)

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


def compute_placed_parts(node: str | None, gpu_indices: Sequence[int],
                         parts: Sequence[Sequence[Any]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """A job's (node, GPU indices) per rank from its stored columns: its parts, or its one node for a row
    written before gangs existed. Every reader of placements (records, reports, inventory) goes through here."""
    if parts:
        return tuple((str(n), tuple(int(i) for i in g)) for n, g in parts)
    return ((node, tuple(gpu_indices)),) if node else ()


@dataclass(frozen=True, slots=True)
class JobEvent:
    job_id: int
    at: datetime
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class Schedule:
    """A repeating job: `job` is the validated submission (JobSubmit fields) started at each firing."""

    id: int
    tenant_id: int
    name: str
    expr: str
    timezone: str
    concurrency: str
    paused: bool
    job: dict[str, Any]
    created_at: datetime
    next_run_at: datetime
    user_id: int | None = None
    last_run_at: datetime | None = None
    last_job_id: int | None = None
    runs: int = 0  # jobs started by firings (and by run-now)
    skipped: int = 0  # firings that started nothing (concurrency forbid, or the job was no longer valid)
    missed: int = 0  # firing times that passed while the server was down, folded into later firings
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class SecretRecord:
    """A stored secret. `sealed` (with `key_id`) is the encrypted value: only the server's keyring opens it."""

    id: int
    tenant_id: int
    name: str
    kind: str
    meta: dict[str, Any]
    created_by: str
    created_at: datetime
    updated_at: datetime
    key_id: str = field(repr=False, default="")
    sealed: str = field(repr=False, default="")

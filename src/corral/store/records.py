"""Plain records the store returns: frozen dataclasses, no ORM objects leak out of the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# The domain models live in core; they are re-exported here so every `from corral.store.records import Job`
# keeps working (the store returns them as its records).
from corral.core.models import GpuInfo, GpuStatus, Job, JobSpec, Node, Queue, Quota, Tenant, compute_placed_parts
from corral.core.pools import PoolSpec

__all__ = [
    "AuditEntry",
    "GpuInfo",
    "GpuStatus",
    "Job",
    "JobEvent",
    "Pool",
    "PoolEvent",
    "JobSpec",
    "Node",
    "NodeEvent",
    "NodeWork",
    "Queue",
    "Quota",
    "Schedule",
    "SecretRecord",
    "SubmitLists",
    "Tenant",
    "TokenRecord",
    "User",
    "compute_placed_parts",
]


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease of the server replicas: who holds it, its epoch (grows with each new holder), since when that holder
    has it, and until when (renewed by its holder, taken by another once past)."""

    name: str
    holder: str
    epoch: int
    since: datetime | None  # None: never held
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Replica:
    """A `corral server` process sharing the database: its heartbeat."""

    id: str
    host: str
    url: str
    version: str
    started_at: datetime
    last_seen_at: datetime
    schema_head: str = ""  # the newest migration its code knows (a rolling upgrade's progress)


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
class Service:
    """A long-running service (corral.core.services). `revisions` are the newest revisions, oldest first, each
    `{"revision", "template" (the JobSubmit body of a replica), "port", "health_path", "created_at"}`; `state` is the
    controller's: `rollout` {state, message, since}, `draining` {job id: since}, `crashes`, `restart_after`."""

    id: int
    tenant_id: int
    name: str
    settings: dict[str, Any]
    revisions: tuple[dict[str, Any], ...]
    revision: int
    stable_revision: int
    replicas: int
    state: dict[str, Any]
    events: tuple[dict[str, Any], ...]
    created_at: datetime
    updated_at: datetime
    user_id: int | None = None
    deleting: bool = False
    version: int = 1

    def revision_of(self, number: int) -> dict[str, Any] | None:
        return next((r for r in self.revisions if r["revision"] == number), None)

    @property
    def current(self) -> dict[str, Any]:
        found = self.revision_of(self.revision)
        assert found is not None, "a service always keeps its current revision"
        return found


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


@dataclass(frozen=True, slots=True)
class Pool:
    """A cloud pool as stored: its spec (corral.core.pools.PoolSpec) and who declared it when."""

    id: int
    spec: PoolSpec
    created_by: str
    created_at: datetime
    updated_at: datetime
    version: int = 1

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, slots=True)
class PoolEvent:
    id: int
    pool: str
    node: str
    at: datetime
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class NodeWork:
    """What an agent's sync hands over, read at once (StagingStore.read_node_work): the RUNNING jobs with a part on
    the node (list_node_jobs), the pending jobs whose input it stages (list_staging), and the ended jobs whose
    output it ships (list_stage_outs), each by id."""

    jobs: list[Job]
    staging: list[Job]
    stage_outs: list[Job]


@dataclass(frozen=True, slots=True)
class SubmitLists:
    """What checking a submission reads, at once (TenancyStore.read_submit_lists): the tenant's queues and quotas,
    the cloud pools and every node's shape (list_nodes, read again when a shape changes)."""

    queues: list[Queue]
    quotas: list[Quota]
    pools: list[Pool]
    nodes: list[Node]

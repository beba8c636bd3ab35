"""Pydantic models at the API edge, shared by the server, the SDK and the agent: requests and responses."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from corral.core.states import JobState

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class JobSubmit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(min_length=1, description="argv of the job; the first item is the program")
    name: str = Field("", max_length=255)
    gpus: int = Field(0, ge=0, le=1024, description="whole GPUs on one node")
    gpu_milli: int = Field(1000, ge=1, le=1000, description="share of one GPU in milli (1000 = whole)")
    gpu_model: str | None = Field(None, description="allowed GPU models, separated by |, e.g. A100|H100")
    min_gpu_memory_mib: int = Field(0, ge=0)
    cpu_milli: int = Field(0, ge=0)
    memory_mib: int = Field(0, ge=0)
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    priority: int = Field(0, ge=-1000, le=1000)
    queue: str = Field("default", min_length=1, max_length=64, description="one of the tenant's queues")
    time_limit_s: int | None = Field(None, ge=1, le=366 * 86400,
                                     description="the job is stopped after this long; lets small jobs backfill")
    port: int | None = Field(None, ge=1, le=65535, description="a web UI the job serves; opened at /proxy/jobs/ID/")
    nodes: int = Field(1, ge=1, le=256, description="a gang: `gpus` GPUs on each of this many nodes, started together")

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if not v[0].strip():
            raise ValueError("the program (first item) must not be empty")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _ENV_KEY.match(key):
                raise ValueError(f"invalid environment variable name {key!r}")
        return v

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError("must be an absolute path")
        return v

    @property
    def gpu_models(self) -> tuple[str, ...]:
        if not self.gpu_model:
            return ()
        return tuple(m.strip() for m in self.gpu_model.split("|") if m.strip())


class JobOut(BaseModel):
    id: int
    name: str
    state: JobState
    node: str | None
    gpus: list[int] = Field(description="GPU indices on the node (empty while pending)")
    gpu_count: int
    gpu_milli: int
    gpu_model: str | None
    command: list[str]
    env: dict[str, str]
    workdir: str | None
    priority: int
    exit_code: int | None
    reason: str
    pending_reason: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested: bool
    attempt: int
    tenant: str | None = None
    queue: str = "default"
    time_limit_s: int | None = None
    queue_position: int | None = Field(None, description="0-based rank among pending jobs (pending only)")
    eta: datetime | None = Field(None, description="estimated start from running jobs' time limits (pending only)")
    eta_s: float | None = Field(None, description="seconds from now until `eta`")
    port: int | None = None
    nodes: int = 1
    parts: list[dict[str, Any]] = Field(default_factory=list, description="[{node, gpus}] per rank of a placed job")
    web_url: str | None = Field(None, description="the job's own web UI through Corral's proxy, while it runs")
    preemptions: int = 0
    schedule_id: int | None = Field(None, description="the repeating-job schedule that started this job")


class ScheduleIn(BaseModel):
    """A repeating job: `job` (a job submission, validated like POST /jobs) started at every firing."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=255, description="unique in the tenant; defaults to the job's name")
    schedule: str = Field(min_length=1, max_length=255,
                          description="cron line ('0 2 * * *'), nickname ('@daily') or '@every 15m'")
    timezone: str = Field("UTC", min_length=1, max_length=64, description="IANA zone the cron line is read in")
    concurrency: str = Field("forbid", description="when the previous run is still active: allow, forbid or replace")
    paused: bool = False
    job: JobSubmit

    @field_validator("concurrency")
    @classmethod
    def _concurrency(cls, v: str) -> str:
        if v not in ("allow", "forbid", "replace"):
            raise ValueError("must be allow, forbid or replace")
        return v


class SchedulePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=255)
    schedule: str | None = Field(None, min_length=1, max_length=255)
    timezone: str | None = Field(None, min_length=1, max_length=64)
    concurrency: str | None = None
    paused: bool | None = None
    job: JobSubmit | None = None

    @field_validator("concurrency")
    @classmethod
    def _concurrency(cls, v: str | None) -> str | None:
        if v is not None and v not in ("allow", "forbid", "replace"):
            raise ValueError("must be allow, forbid or replace")
        return v


class ScheduleOut(BaseModel):
    id: int
    name: str
    tenant: str | None
    schedule: str
    timezone: str
    description: str = Field(description="the schedule in words")
    concurrency: str
    paused: bool
    job: dict[str, Any] = Field(description="the job submission started at each firing")
    created_at: datetime
    next_run_at: datetime | None = Field(description="the next firing (null while paused)")
    upcoming: list[datetime] = Field(default_factory=list, description="the next few firings")
    last_run_at: datetime | None
    last_job_id: int | None
    active_job_ids: list[int] = Field(default_factory=list, description="its pending or running jobs")
    runs: int
    skipped: int
    missed: int
    last_skip_reason: str = Field("", description="why its last firing started nothing (empty when it started a job)")


class GpuOut(BaseModel):
    node: str
    index: int
    uuid: str
    model: str
    memory_mib: int
    pci_bus_id: str
    numa_node: int | None
    nvlink_peers: list[int]
    healthy: bool = Field(description="schedulable: healthy and not disabled by an admin")
    job_id: int | None = Field(description="the job using this GPU, if any")
    used_milli: int
    health: str = Field("HEALTHY", description="HEALTHY, UNHEALTHY or DISABLED")
    health_reason: str = ""


class NodeOut(BaseModel):
    name: str
    hostname: str
    backend: str
    state: str
    cpu_milli: int
    memory_mib: int
    gpus_total: int
    gpus_free: int
    gpu_models: list[str]
    labels: dict[str, str]
    registered_at: datetime
    last_heartbeat_at: datetime
    cordoned: bool = False
    gpus_unhealthy: int = 0


class EventOut(BaseModel):
    at: datetime
    kind: str
    message: str
    gpu: int | None = None


class AuditOut(BaseModel):
    at: datetime
    actor: str
    action: str
    target: str
    detail: str


class GpuReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int = Field(ge=0)
    uuid: str = Field(min_length=1)
    model: str = Field(min_length=1)
    memory_mib: int = Field(ge=0)
    pci_bus_id: str = ""
    numa_node: int | None = None
    nvlink_peers: list[int] = Field(default_factory=list)
    pcie_switch: str | None = None
    ecc_enabled: bool = False
    healthy: bool = True


class AgentRegister(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    hostname: str = ""
    address: str = Field("", max_length=255, description="host or IP the server reaches this node at")
    backend: str = Field(min_length=1)
    cpu_milli: int = Field(0, ge=0)
    memory_mib: int = Field(0, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    gpus: list[GpuReport] = Field(default_factory=list)
    agent_version: str = ""


class RunRef(BaseModel):
    """One attempt of a job: a requeued job runs again as a new attempt, which the agent keeps apart."""

    model_config = ConfigDict(frozen=True)
    job_id: int = Field(ge=1)
    attempt: int = Field(ge=1)
    rank: int = Field(0, ge=0, description="which part of a multi-node job (0 for single-node jobs)")

    @property
    def key(self) -> str:
        """The executor's id for this run (also a safe file name)."""
        return f"{self.job_id}.{self.attempt}" + (f".{self.rank}" if self.rank else "")

    @classmethod
    def from_key(cls, key: str) -> RunRef:
        parts = key.split(".")
        return cls(job_id=int(parts[0]), attempt=int(parts[1]) if len(parts) > 1 else 1,
                   rank=int(parts[2]) if len(parts) > 2 else 0)


class ExitReport(BaseModel):
    job_id: int
    attempt: int = Field(1, ge=1)
    rank: int = Field(0, ge=0)
    exit_code: int
    reason: str = ""

    @property
    def run(self) -> RunRef:
        return RunRef(job_id=self.job_id, attempt=self.attempt, rank=self.rank)


class SimFaultCommand(BaseModel):
    """A fault to inject into a simulated GPU (`corral sim fault`), or clear."""

    gpu_index: int = Field(ge=0)
    xid: int | None = Field(None, ge=1)
    ecc: bool = False
    off_bus: bool = False
    temperature_c: float | None = Field(None, gt=0, lt=200)
    clear: bool = False


class AgentSync(BaseModel):
    model_config = ConfigDict(extra="forbid")
    running: list[RunRef] = Field(default_factory=list, description="runs alive on the node")
    exits: list[ExitReport] = Field(default_factory=list, description="finished runs not yet acknowledged")
    wait_s: float = Field(0.0, ge=0, le=60, description="long-poll: hold the reply up to this long for new work")


class Assignment(BaseModel):
    job_id: int
    attempt: int = 1
    rank: int = 0
    command: list[str]
    env: dict[str, str]
    workdir: str | None
    gpu_indices: list[int]
    gpu_uuids: list[str]

    @property
    def run(self) -> RunRef:
        return RunRef(job_id=self.job_id, attempt=self.attempt, rank=self.rank)


class AgentSyncReply(BaseModel):
    assignments: list[Assignment]
    cancels: list[RunRef]
    acked_exits: list[RunRef]
    cancel_grace_s: float
    faults: list[SimFaultCommand] = Field(default_factory=list)


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64)
    parent: str | None = Field(None, description="parent tenant (department) name")
    weight: float = Field(1.0, gt=0, le=1000, description="fair-share weight")


class TenantOut(BaseModel):
    id: int
    name: str
    parent: str | None
    weight: float
    created_at: datetime


class QuotaIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu_model: str = Field("", max_length=128, description="a GPU model such as H100, or empty for all models")
    guaranteed_gpus: int = Field(ge=0, le=1_000_000)
    max_gpus: int | None = Field(None, ge=0, le=1_000_000, description="borrowing limit; null = the whole pool")


class QuotaOut(BaseModel):
    tenant: str
    gpu_model: str
    guaranteed_gpus: int
    max_gpus: int | None


class QueueIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64)
    mode: str = Field("best-effort", pattern="^(best-effort|strict)$")
    priority: int = Field(0, ge=-1000, le=1000)


class QueueOut(BaseModel):
    tenant: str
    name: str
    mode: str
    priority: int


class UserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64)
    role: str = Field("member", description="admin, tenant-admin, member or viewer")
    tenant: str | None = Field(None, description="defaults to the caller's tenant")
    password: str | None = Field(None, min_length=8, max_length=1024)


class UserPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str | None = None
    password: str | None = Field(None, min_length=8, max_length=1024)


class UserOut(BaseModel):
    id: int
    name: str
    role: str
    tenant: str | None
    has_password: bool
    created_at: datetime


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field("", max_length=128)
    user: str | None = Field(None, description="whose token (admins and tenant admins); defaults to the caller")
    expires_in_s: int | None = Field(None, ge=60, le=10 * 366 * 86400)


class TokenOut(BaseModel):
    id: int
    name: str
    user: str | None
    created_at: datetime
    expires_at: datetime | None
    revoked: bool
    token: str | None = Field(None, description="the secret, shown once when the token is created")


class LoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    username: str = Field(min_length=1)
    password: str = Field(min_length=1)


class WhoAmI(BaseModel):
    user: str | None
    role: str
    tenant: str | None

"""The pools API's bodies (issue 19): declare a cloud pool, change it, and what `corral pools` shows."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from corral.core.pools import MAX_GPUS, MAX_LABELS, MAX_NODES, MAX_SETTINGS, MAX_TAINTS, MAX_TYPES

Short = Annotated[str, Field(max_length=64)]
Setting = Annotated[str, Field(max_length=4096)]


class InstanceTypeIn(BaseModel):
    """One kind of machine the pool can start. `gpu_model` like A100-80GB; `gpu_memory_mib` 0: from the model's
    name (A100-80GB) or a known model's; `cpus` / `memory_gib` 0: not declared (not checked against jobs)."""

    model_config = ConfigDict(extra="forbid")

    name: Short
    gpus: int = Field(ge=0, le=MAX_GPUS)
    gpu_model: Short = ""
    gpu_memory_mib: int = Field(0, ge=0, le=4 * 1024 * 1024)
    cpus: int = Field(0, ge=0, le=4096)
    memory_gib: int = Field(0, ge=0, le=65_536)
    price_per_hour: float = Field(0.0, ge=0, le=10_000, allow_inf_nan=False)
    spot: bool = False


class PoolIn(BaseModel):
    """A cloud pool. `policy`: a Python module importable by the server with `decide(state) -> actions`
    (docs/elastic.md); `settings`: the provider's own (aws: ami, subnet_id, security_group_ids, ...)."""

    model_config = ConfigDict(extra="forbid")

    name: Short
    provider: Short = ""  # a cloud pool's: local or aws (slurm and kubernetes pools have none)
    kind: Short = "cloud"  # cloud, slurm or kubernetes
    region: Short = ""
    instance_types: list[InstanceTypeIn] = Field(default_factory=list, max_length=MAX_TYPES)
    min_nodes: int = Field(0, ge=0, le=MAX_NODES)
    max_nodes: int = Field(1, ge=0, le=MAX_NODES)
    idle_s: float = Field(300.0, ge=0, le=30 * 86400, allow_inf_nan=False)
    join_timeout_s: float = Field(600.0, ge=5, le=3600, allow_inf_nan=False)
    labels: dict[Short, Short] = Field(default_factory=dict, max_length=MAX_LABELS)
    taints: list[Annotated[str, Field(max_length=128)]] = Field(default_factory=list, max_length=MAX_TAINTS)
    policy: Annotated[str, Field(max_length=255)] = ""
    settings: dict[Short, Setting] = Field(default_factory=dict, max_length=MAX_SETTINGS)
    paused: bool = False


class PoolPatch(BaseModel):
    """Change some of a pool's fields (the others stay). Its name and provider do not change."""

    model_config = ConfigDict(extra="forbid")

    region: Short | None = None
    instance_types: list[InstanceTypeIn] | None = Field(None, min_length=1, max_length=MAX_TYPES)
    min_nodes: int | None = Field(None, ge=0, le=MAX_NODES)
    max_nodes: int | None = Field(None, ge=0, le=MAX_NODES)
    idle_s: float | None = Field(None, ge=0, le=30 * 86400, allow_inf_nan=False)
    join_timeout_s: float | None = Field(None, ge=5, le=3600, allow_inf_nan=False)
    labels: dict[Short, Short] | None = Field(None, max_length=MAX_LABELS)
    taints: list[Annotated[str, Field(max_length=128)]] | None = Field(None, max_length=MAX_TAINTS)
    policy: Annotated[str, Field(max_length=255)] | None = None
    settings: dict[Short, Setting] | None = Field(None, max_length=MAX_SETTINGS)
    paused: bool | None = None


class InstanceTypeOut(BaseModel):
    name: str
    gpus: int
    gpu_model: str
    gpu_memory_mib: int
    cpus: int
    memory_gib: int
    price_per_hour: float
    spot: bool


class PoolNodeOut(BaseModel):
    """A node of the pool: `state` launching | running | draining | released | failed; `node_state` its
    inventory state (READY, LOST) once its agent registered."""

    name: str
    instance_type: str
    state: str
    spot: bool
    price_per_hour: float
    launched_at: datetime
    joined_at: datetime | None = None
    idle_since: datetime | None = None
    ended_at: datetime | None = None
    reason: str = ""
    jobs: int = 0
    gpus: int = 0
    node_state: str | None = None


class PoolEventOut(BaseModel):
    at: datetime
    node: str
    kind: str
    message: str


class PoolOut(BaseModel):
    """A pool, its nodes (live), pending demand (jobs waiting that would fit one of its types) and spend (what
    its nodes cost so far: price x hours from launch to release, for this month and in all)."""

    name: str
    kind: str  # static | cloud
    provider: str
    region: str = ""
    instance_types: list[InstanceTypeOut] = []
    min_nodes: int = 0
    max_nodes: int = 0
    idle_s: float = 0.0
    join_timeout_s: float = 0.0
    labels: dict[str, str] = {}
    taints: list[str] = []
    policy: str = ""
    settings: dict[str, str] | None = None  # admins only
    paused: bool = False
    nodes: list[PoolNodeOut] = []
    node_count: int = 0
    gpus: int = 0
    pending_jobs: int = 0  # waiting jobs a new node of this pool would serve (cloud) or waiting at all (static)
    pending_gpus: int = 0
    spend_month: float = 0.0
    spend_total: float = 0.0
    failed_launches: int = 0
    events: list[PoolEventOut] | None = None  # `show` only
    created_at: datetime | None = None
    version: int = 0


class BudgetIn(BaseModel):
    """A tenant's budget per period: GPU-hours, money (prices: cloud types' per GPU, owned GPUs' admin rate) or
    both; at 100% `policy` applies: notify (only), no-burst (no new cloud nodes for it), hold (its new jobs wait)."""

    model_config = ConfigDict(extra="forbid")

    period: Annotated[str, Field(pattern="^(month|week|day)$")] = "month"
    gpu_hours: float | None = Field(None, ge=0, le=1e12, allow_inf_nan=False)
    money: float | None = Field(None, ge=0, le=1e12, allow_inf_nan=False)
    policy: Annotated[str, Field(pattern="^(notify|no-burst|hold)$")] = "notify"


class BudgetOut(BaseModel):
    """A budget and what its tenant spent this period (`used_pct`: the higher of the two; state ok, warning at
    80%, exceeded at 100%; `enforced`: its policy acts now)."""

    tenant: str
    period: str
    gpu_hours: float | None
    money: float | None
    policy: str
    period_start: datetime
    period_end: datetime
    gpu_hours_used: float
    money_used: float
    used_pct: float
    state: str
    enforced: bool


__all__ = [
    "BudgetIn",
    "BudgetOut",
    "InstanceTypeIn",
    "InstanceTypeOut",
    "PoolEventOut",
    "PoolIn",
    "PoolNodeOut",
    "PoolOut",
    "PoolPatch",
]

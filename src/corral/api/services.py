"""The services API's bodies (issue 18): create, update, scale, and what `show` returns."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corral.api import bounds
from corral.core import containers
from corral.core.errors import ValidationError
from corral.core.services import MAX_QUEUE_LIMIT, MAX_REPLICAS, MAX_TARGET_RPS, check_health_path, check_service_name

# The replica's fields: what a JobSubmit of each replica carries (a service revision's template).
TEMPLATE_FIELDS = (
    "command",
    "image",
    "env",
    "secret_env",
    "workdir",
    "gpus",
    "gpu_milli",
    "gpu_model",
    "min_gpu_memory_mib",
    "cpu_milli",
    "memory_mib",
    "queue",
    "priority",
    "mounts",
    "shm_size_mib",
    "container_user",
    "registry_secret",
)
# The revision's own fields besides the template: a change of one rolls the replicas too.
REVISION_FIELDS = ("port", "health_path")
# The service's settings: a change applies at once, with no new revision.
SETTING_FIELDS = (
    "public",
    "min_replicas",
    "max_replicas",
    "target_rps",
    "max_surge",
    "max_unavailable",
    "queue_limit",
    "scale_down_delay_s",
    "idle_timeout_s",
    "progress_deadline_s",
    "unhealthy_after_s",
    "drain_timeout_s",
)

Arg = Annotated[str, Field(max_length=bounds.MAX_ARG_BYTES)]
EnvKey = Annotated[str, Field(max_length=bounds.MAX_ENV_KEY_CHARS)]
EnvValue = Annotated[str, Field(max_length=bounds.MAX_ENV_VALUE_BYTES)]


class _Template(BaseModel):
    """What each replica runs: the fields of a job submission (see JobSubmit), all optional here."""

    model_config = ConfigDict(extra="forbid")

    command: list[Arg] | None = Field(
        None, max_length=bounds.MAX_ARGS, description="argv of each replica (with an image: run in it)"
    )
    image: str | None = Field(None, max_length=containers.MAX_IMAGE_CHARS, description="run each replica in this image")
    env: dict[EnvKey, EnvValue] | None = Field(None, max_length=bounds.MAX_ENV_VARS)
    secret_env: dict[str, str] | None = Field(None, max_length=64, description="VAR -> tenant secret name")
    workdir: str | None = Field(None, max_length=bounds.MAX_PATH_CHARS)
    gpus: int | None = Field(None, ge=0, le=bounds.MAX_GPUS_PER_NODE, description="whole GPUs per replica")
    gpu_milli: int | None = Field(None, ge=1, le=1000, description="share of one GPU per replica, in milli")
    gpu_model: str | None = Field(None, max_length=255)
    min_gpu_memory_mib: int | None = Field(None, ge=0, le=bounds.MAX_MEMORY_MIB)
    cpu_milli: int | None = Field(None, ge=0, le=bounds.MAX_CPU_MILLI)
    memory_mib: int | None = Field(None, ge=0, le=bounds.MAX_MEMORY_MIB)
    queue: str | None = Field(None, min_length=1, max_length=64)
    priority: int | None = Field(None, ge=-1000, le=1000)
    mounts: list[Annotated[str, Field(max_length=bounds.MAX_PATH_CHARS * 2 + 4)]] | None = Field(
        None, max_length=containers.MAX_MOUNTS
    )
    shm_size_mib: int | None = Field(None, ge=1, le=containers.MAX_SHM_MIB)
    container_user: str | None = Field(None, max_length=21)
    registry_secret: str | None = Field(None, max_length=64)
    port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="the port each replica listens on: inside its container for an image; a command listens on "
        "$PORT, which Corral assigns per replica (this port when it is free on the node and in CORRAL_JOB_PORTS)",
    )
    health_path: str | None = Field(
        None, max_length=255, description="a replica takes traffic once GET on this path answers 2xx"
    )

    @field_validator("health_path")
    @classmethod
    def _health(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                check_health_path(v)
            except ValidationError as e:
                raise ValueError(e.problem) from None
        return v


class _Settings(BaseModel):
    public: bool | None = Field(None, description="the gateway serves it without a token")
    min_replicas: int | None = Field(None, ge=0, le=MAX_REPLICAS, description="autoscaling's floor (0: to zero)")
    max_replicas: int | None = Field(None, ge=1, le=MAX_REPLICAS, description="autoscaling's ceiling")
    target_rps: float | None = Field(
        None, gt=0, le=MAX_TARGET_RPS, description="requests per second per replica: autoscales on request rate"
    )
    max_surge: int | None = Field(None, ge=0, le=MAX_REPLICAS, description="a rollout's replicas beyond the count")
    max_unavailable: int | None = Field(
        None, ge=0, le=MAX_REPLICAS, description="a rollout's ready replicas below the count"
    )
    queue_limit: int | None = Field(
        None, ge=1, le=MAX_QUEUE_LIMIT, description="requests in flight at a gateway beyond which it answers 503"
    )
    scale_down_delay_s: float | None = Field(None, ge=0, le=86400, description="autoscaling's stabilisation window")
    idle_timeout_s: float | None = Field(None, ge=1, le=7 * 86400, description="min 0: idle this long scales to zero")
    progress_deadline_s: float | None = Field(
        None, ge=1, le=86400, description="a new replica not ready after this long stops the rollout"
    )
    unhealthy_after_s: float | None = Field(
        None, ge=1, le=86400, description="a ready replica whose health path fails this long is restarted"
    )
    drain_timeout_s: float | None = Field(
        None,
        ge=0,
        le=86400,
        description="a replica a rollout or a scale-down stops takes no new request, and is stopped once its "
        "requests in flight ended, or after this long",
    )

    @field_validator(*(f for f in SETTING_FIELDS if f != "target_rps"), mode="before")
    @classmethod
    def _not_null(cls, v: Any) -> Any:
        """An explicit null is refused (leave the field out to keep its value); target_rps: null turns autoscaling
        off."""
        if v is None:
            raise ValueError("may not be null (leave it out to keep the current value)")
        return v


SETTING_DEFAULTS: dict[str, Any] = {
    "public": False,
    "min_replicas": 1,
    "max_replicas": 1,
    "target_rps": None,
    "max_surge": 1,
    "max_unavailable": 0,
    "queue_limit": 100,
    "scale_down_delay_s": 60.0,
    "idle_timeout_s": 300.0,
    "progress_deadline_s": 300.0,
    "unhealthy_after_s": 10.0,
    "drain_timeout_s": 60.0,
}


class ServiceIn(_Template, _Settings):
    """POST /api/v1/services."""

    name: str = Field(max_length=63, description="unique in the cluster: the gateway serves it at /services/NAME/")
    command: list[Arg] | None = Field(
        min_length=1,
        max_length=bounds.MAX_ARGS,
        description="argv of each replica (with an image: run in it; left out, the image's own command runs)",
    )
    port: int = Field(ge=1, le=65535, description="the port each replica listens on (see PATCH's `port`)")
    replicas: int = Field(1, ge=0, le=MAX_REPLICAS, description="replicas to run (without autoscaling)")

    @model_validator(mode="before")
    @classmethod
    def _image_runs_its_own_command(cls, data: Any) -> Any:
        """With an image, the command may be left out (the image's own command runs); without one it is required:
        a missing or null command is then refused as missing, naming `command`."""
        if isinstance(data, dict) and data.get("command") is None:
            if data.get("image"):
                return {**data, "command": None}
            return {k: v for k, v in data.items() if k != "command"}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        try:
            return check_service_name(v)
        except ValidationError as e:
            raise ValueError(e.problem) from None


class ServicePatch(_Template, _Settings):
    """PATCH /api/v1/services/NAME: what is given changes; a change of what replicas run (command, image, env,
    resources, port, health path) is a new revision, rolled out replica by replica."""


class ServiceScale(BaseModel):
    model_config = ConfigDict(extra="forbid")
    replicas: int = Field(ge=0, le=MAX_REPLICAS)


class ReplicaOut(BaseModel):
    job_id: int
    revision: int
    state: str = Field(description="the job's state")
    ready: bool = Field(description="it answers its health path and takes traffic")
    node: str | None
    gpus: list[int]
    port: int | None
    attempt: int
    started_at: datetime | None
    draining: bool = Field(False, description="being stopped: it takes no new requests")
    health: str = Field("", description="the last health check's failure, in words")


class ServiceEventOut(BaseModel):
    at: datetime
    kind: str
    message: str


class RevisionOut(BaseModel):
    revision: int
    created_at: datetime
    port: int
    health_path: str
    template: dict[str, Any] = Field(description="what each replica runs (a job submission's fields)")


class RolloutOut(BaseModel):
    state: str = Field(description="complete, progressing or stalled")
    revision: int = Field(description="the revision being rolled out (or serving, once complete)")
    message: str


class TrafficOut(BaseModel):
    rps: float = Field(description="requests per second through the gateway, last few seconds")
    error_rate: float = Field(description="share of those answered 5xx or failed")
    p50_ms: float | None = None
    p99_ms: float | None = None
    in_flight: int = 0


class ServiceOut(BaseModel):
    id: int
    name: str
    tenant: str | None
    owner: str | None = Field(
        None, description="whom its replicas run as: the user who made its current revision (created or changed it)"
    )
    url: str = Field(description="the gateway's path for it: /services/NAME/")
    endpoint: str | None = Field(None, description="the full URL of the service through the gateway")
    public: bool
    revision: int = Field(description="the revision replicas should run")
    stable_revision: int = Field(description="the last revision a rollout completed (0: none yet)")
    desired: int = Field(description="replicas wanted now (scale, or the autoscaler)")
    ready: int = Field(description="replicas taking traffic")
    running: int
    pending: int
    port: int
    health_path: str
    command: list[str]
    image: str | None
    gpus: int
    gpu_milli: int
    settings: dict[str, Any] = Field(description="min/max replicas, target rps, surge, queue limit, timeouts")
    autoscaled: bool
    rollout: RolloutOut
    traffic: TrafficOut | None = None
    deleting: bool = False
    created_at: datetime
    updated_at: datetime
    replicas: list[ReplicaOut] = Field(default_factory=list)
    events: list[ServiceEventOut] = Field(default_factory=list)
    revisions: list[RevisionOut] = Field(default_factory=list)


class ServiceSampleOut(BaseModel):
    at: datetime
    rps: float
    error_rate: float
    p50_ms: float | None
    p99_ms: float | None
    desired: int
    ready: int


def template_of(body: _Template, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JobSubmit fields of a revision: `base` (the previous revision's) with what `body` sets."""
    out = dict(base or {})
    for f in TEMPLATE_FIELDS:
        v = getattr(body, f)
        if v is not None:
            out[f] = v
    if "image" in body.model_fields_set and body.image is None:  # an explicit null: back to a process
        out.pop("image", None)
    if "command" in body.model_fields_set and body.command is None:  # an explicit null: the image's own command
        out.pop("command", None)
    return out


def settings_of(body: _Settings, base: dict[str, Any] | None = None) -> dict[str, Any]:
    out = dict(SETTING_DEFAULTS if base is None else base)
    for f in SETTING_FIELDS:
        if f in body.model_fields_set:
            out[f] = getattr(body, f)
    return out

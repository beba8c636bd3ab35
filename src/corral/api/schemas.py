"""Pydantic models at the API edge, shared by the server, the SDK and the agent: requests and responses."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from corral.api import bounds
from corral.api.secrets import check_secret_env, check_secret_name
from corral.api.staging import StageOrder, StageReport
from corral.core import containers, staging
from corral.core.arrays import MAX_ARRAY_TASKS, MAX_ARRAY_TEXT, parse_array
from corral.core.errors import ValidationError
from corral.core.models import Job, JobSpec
from corral.core.resources import GpuInfo
from corral.core.states import JobState

MAX_BATCH_JOBS = 1000  # submissions in one POST /api/v1/jobs/batch
MAX_EXIT_REASON_CHARS = 1000
MAX_NODE_IMAGES = 200  # cached images a node reports (the most recently used)
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_exec_size(command: list[str], env: dict[str, str]) -> None:
    """argv + envp must stay far from ARG_MAX, or the job could never start (E2BIG)."""
    size = bounds.argv_env_bytes(command, env)
    if size > bounds.MAX_ARGV_ENV_BYTES:
        raise ValueError(f"command and env take {size} bytes; at most {bounds.MAX_ARGV_ENV_BYTES} together")


class JobSubmit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: list[Annotated[str, Field(max_length=bounds.MAX_ARG_BYTES)]] = Field(
        min_length=1,
        max_length=bounds.MAX_ARGS,
        description=f"argv of the job; the first item is the program. At most {bounds.MAX_ARGS} items of "
        f"{bounds.MAX_ARG_BYTES} bytes, and with `env` at most {bounds.MAX_ARGV_ENV_BYTES} bytes in all",
    )
    name: str = Field("", max_length=bounds.MAX_JOB_NAME_CHARS, description="one line, no control characters")
    gpus: int = Field(0, ge=0, le=bounds.MAX_GPUS_PER_NODE, description="whole GPUs on one node")
    gpu_milli: int = Field(1000, ge=1, le=1000, description="share of one GPU in milli (1000 = whole)")
    gpu_model: str | None = Field(
        None, max_length=255, description="allowed GPU models, separated by |, e.g. A100|H100"
    )
    min_gpu_memory_mib: int = Field(0, ge=0, le=bounds.MAX_MEMORY_MIB)
    cpu_milli: int = Field(0, ge=0, le=bounds.MAX_CPU_MILLI)
    memory_mib: int = Field(0, ge=0, le=bounds.MAX_MEMORY_MIB)
    env: dict[
        Annotated[str, Field(max_length=bounds.MAX_ENV_KEY_CHARS)],
        Annotated[str, Field(max_length=bounds.MAX_ENV_VALUE_BYTES)],
    ] = Field(
        default_factory=dict,
        max_length=bounds.MAX_ENV_VARS,
        description=f"plain environment variables (not secret: see `secret_env`); at most {bounds.MAX_ENV_VARS}, "
        f"values of {bounds.MAX_ENV_VALUE_BYTES} bytes",
    )
    workdir: str | None = Field(None, max_length=bounds.MAX_PATH_CHARS, description="absolute path")
    priority: int = Field(0, ge=-1000, le=1000)
    queue: str = Field("default", min_length=1, max_length=64, description="one of the tenant's queues")
    time_limit_s: int | None = Field(
        None, ge=1, le=366 * 86400, description="the job is stopped after this long; lets small jobs backfill"
    )
    web_ui: bool = Field(
        False,
        description="the job serves a web UI: Corral assigns it a port on its node "
        "(CORRAL_JOB_PORT and PORT) and opens it at /proxy/jobs/ID/",
    )
    port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="older spelling of web_ui=true: the number is not used, Corral assigns the port",
    )
    nodes: int = Field(1, ge=1, le=256, description="a gang: `gpus` GPUs on each of this many nodes, started together")
    secret_env: dict[str, str] = Field(
        default_factory=dict,
        max_length=64,
        description="VAR -> name of a tenant secret: the job gets VAR set to the secret's value, resolved only when "
        "it starts; listings show the names, never values (plain `env` values are not secret)",
    )

    image: str | None = Field(
        None,
        max_length=containers.MAX_IMAGE_CHARS,
        description="run in a container of this image (on a node with the docker runtime); without it the job "
        "runs as a plain process",
    )
    mounts: list[Annotated[str, Field(max_length=bounds.MAX_PATH_CHARS * 2 + 4)]] = Field(
        default_factory=list,
        max_length=containers.MAX_MOUNTS,
        description="host paths for the container, SRC:DST or SRC:DST:ro; only under the prefixes the cluster "
        "allows (CORRAL_ALLOWED_MOUNTS)",
    )
    shm_size_mib: int | None = Field(
        None,
        ge=1,
        le=containers.MAX_SHM_MIB,
        description=f"the container's /dev/shm in MiB (default {containers.DEFAULT_SHM_MIB}, or a quarter of "
        "memory_mib when that is less)",
    )
    container_user: str | None = Field(
        None, max_length=21, description="UID[:GID] the container runs as (default: the job's own Unix identity)"
    )
    registry_secret: str | None = Field(
        None,
        max_length=64,
        description="name of a tenant secret of kind registry whose login pulls the image (its host must be the "
        "image's registry)",
    )
    container_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="the port the image's web UI listens on inside the container (with web_ui and image): "
        "Corral publishes it on the node port it assigns; default: that node port, as $PORT inside",
    )
    spot: bool = Field(
        False, description="the job may run on spot (interruptible) nodes of a cloud pool: it tolerates their taint"
    )
    tolerations: list[Annotated[str, Field(max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/=:-]{0,127}$")]] = Field(
        default_factory=list, max_length=16, description="node taints the job tolerates (a pool's taints)"
    )
    pool: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[a-z][a-z0-9-]{0,63}$",
        description="run only on nodes of this pool (`static`, or a cloud pool's name); default: any that fits",
    )
    stage_in: list[Annotated[str, Field(max_length=2 * staging.MAX_LOCATION_CHARS + 1)]] = Field(
        default_factory=list,
        max_length=staging.MAX_STAGE_ITEMS,
        description="input copied to the job's node before its GPUs are taken, as SRC:DST: SRC an s3:// URL (a "
        "trailing / copies every object under the prefix) or a path on the shared storage the server allows "
        "(CORRAL_STAGE_PATHS), DST relative to the job's CORRAL_STAGE_DIR. The job waits (pending, `staging input: "
        "3.1 of 12 GiB`) while it is copied; a node keeps what it copied, by content, for the next job",
    )
    stage_out: list[Annotated[str, Field(max_length=2 * staging.MAX_LOCATION_CHARS + 1)]] = Field(
        default_factory=list,
        max_length=staging.MAX_STAGE_ITEMS,
        description="output shipped after the job ends (success or failure), as SRC:DST: SRC relative to "
        "CORRAL_STAGE_DIR (a file or a directory), DST an s3:// URL or an allowed shared path; the outcome is the "
        "job's stage_out_state and stage_out_message",
    )
    stage_secret: str | None = Field(
        None, max_length=64, description="name of a tenant secret of kind s3 that opens the s3:// sources and targets"
    )
    array: str | None = Field(
        None,
        max_length=MAX_ARRAY_TEXT,
        description="a job array of one task per index, as Slurm's --array spells them: 0-999, 1,3,5-7, 0-15:4; "
        f"%N at the end runs at most N tasks at once. Each task gets CORRAL_ARRAY_INDEX. At most {MAX_ARRAY_TASKS} "
        "tasks",
    )

    @field_validator("array")
    @classmethod
    def _array(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                parse_array(v)
            except ValidationError as e:
                raise ValueError(e.problem) from None
        return v

    @field_validator("stage_in", "stage_out")
    @classmethod
    def _stage(cls, v: list[str], info: ValidationInfo) -> list[str]:
        outward = info.field_name == "stage_out"
        return [str(_value_error(staging.parse_stage_out if outward else staging.parse_stage_in, t)) for t in v]

    @field_validator("stage_secret")
    @classmethod
    def _stage_secret(cls, v: str | None) -> str | None:
        return None if v is None else check_secret_name(v)

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return None if v is None else _value_error(containers.check_image, v)

    @field_validator("container_user")
    @classmethod
    def _container_user(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not info.data.get("image"):
            raise ValueError("only a job with an image runs as a container user")
        if v is not None and info.data.get(
            "mounts"
        ):  # host files are used as the job's own identity, never a chosen one
            raise ValueError("a job with host mounts runs as its own Unix identity: drop the mounts or the user")
        return None if v is None else _value_error(containers.check_user, v)

    @field_validator("registry_secret")
    @classmethod
    def _registry_secret(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not info.data.get("image"):
            raise ValueError("only a job with an image pulls with a registry secret")
        return None if v is None else check_secret_name(v)

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, v: list[str], info: ValidationInfo) -> list[str]:
        if v and not info.data.get("image"):
            raise ValueError("only a job with an image mounts host paths")
        return [str(_value_error(containers.parse_mount, m)) for m in v]

    @field_validator("container_port")
    @classmethod
    def _container_port(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and not info.data.get("image"):
            raise ValueError("only a job with an image has a container port (give --image)")
        if v is not None and not (info.data.get("web_ui") or info.data.get("port")):
            raise ValueError("only a job with a web UI publishes a container port (give web_ui)")
        return v

    @field_validator("shm_size_mib")
    @classmethod
    def _shm(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and not info.data.get("image"):
            raise ValueError("only a job with an image has a shared-memory size")
        return v

    @property
    def container(self) -> containers.ContainerSpec | None:
        if self.image is None:
            return None
        return containers.ContainerSpec(
            image=self.image,
            mounts=tuple(containers.parse_mount(m) for m in self.mounts),
            shm_size_mib=self.shm_size_mib,
            user=self.container_user,
            registry_secret=self.registry_secret,
            port=self.container_port,
        )

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if not v[0].strip():
            raise ValueError("the program (first item) must not be empty")
        if problem := bounds.problem_in_command(v):
            raise ValueError(problem)
        _check_exec_size(v, {})
        return v

    @field_validator("secret_env")
    @classmethod
    def _secrets_fit_exec(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        """Secret values are only read when the job starts: count each at its largest, so it still can."""
        from corral.api.secrets import MAX_SECRET_BYTES

        worst = bounds.argv_env_bytes(info.data.get("command") or [], info.data.get("env") or {}) + sum(
            bounds.exec_string_bytes(f"{var}=") + MAX_SECRET_BYTES for var in v
        )
        if worst > bounds.MAX_EXEC_BYTES:
            raise ValueError(
                f"with {len(v)} secret(s) of up to {MAX_SECRET_BYTES} bytes the job's command and "
                f"environment could take {worst} bytes; at most {bounds.MAX_EXEC_BYTES}"
            )
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if problem := bounds.problem_in_text(v, single_line=True):
            raise ValueError(problem)
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        for key in v:
            if not _ENV_KEY.fullmatch(key):
                raise ValueError(f"invalid environment variable name {key!r}")
        if problem := bounds.problem_in_env(v):
            raise ValueError(problem)
        _check_exec_size(info.data.get("command") or [], v)
        return v

    @field_validator("secret_env")
    @classmethod
    def _secret_env(cls, v: dict[str, str]) -> dict[str, str]:
        return check_secret_env(v)

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError("must be an absolute path")
        if v is not None and (problem := bounds.problem_in_text(v, single_line=True)):
            raise ValueError(problem)
        return v

    @property
    def gpu_models(self) -> tuple[str, ...]:
        if not self.gpu_model:
            return ()
        return tuple(m.strip() for m in self.gpu_model.split("|") if m.strip())

    def to_spec(self, tenant_id: int | None, user_id: int | None, schedule_id: int | None = None) -> JobSpec:
        """The one conversion of a submission into the domain spec (its ResourceRequest is built there);
        raises ValidationError naming the field when the request is malformed (e.g. a share of several GPUs)."""
        return JobSpec(
            command=tuple(self.command),
            name=self.name or self.command[0].rsplit("/", 1)[-1],
            env=dict(self.env),
            workdir=self.workdir,
            gpus=self.gpus,
            gpu_milli=self.gpu_milli,
            gpu_models=self.gpu_models,
            min_gpu_memory_mib=self.min_gpu_memory_mib,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            priority=self.priority,
            user_id=user_id,
            tenant_id=tenant_id,
            queue=self.queue,
            time_limit_s=self.time_limit_s,
            nodes=self.nodes,
            schedule_id=schedule_id,
            port=0 if self.web_ui or self.port else None,  # Corral assigns the port at hand-over
            secret_env=dict(self.secret_env),
            container=self.container,
            tolerations=tuple(sorted({*self.tolerations, *(("spot",) if self.spot else ())})),
            pool=self.pool or "",
            stage_in=tuple(staging.parse_stage_in(t) for t in self.stage_in),
            stage_out=tuple(staging.parse_stage_out(t) for t in self.stage_out),
            stage_secret=self.stage_secret or "",
        )


def _value_error(check: Callable[[str], Any], value: str) -> Any:
    """A core check's ValidationError as pydantic's ValueError (so the 422 names the field)."""
    try:
        return check(value)
    except ValidationError as e:
        raise ValueError(e.problem) from None


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
    pending_reason: str | None = Field(description="why it waits, in one plain sentence (pending only)")
    pending_code: str | None = Field(
        None, description="why it waits, as a stable code: capacity, quota, gang-incomplete... (pending only)"
    )
    predicted_run_s: float | None = Field(
        None, description="its run time as predicted from its tenant's finished jobs (pending and running only)"
    )
    prediction: str | None = Field(
        None, description="the prediction's basis: 'median of 38 earlier jobs named train-* on 1 GPU: 2 h 10 m'"
    )
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
    port: int | None = Field(
        None, description="the port Corral assigned to the job's web UI on its node, once handed out"
    )
    web_ui: bool = Field(False, description="the job serves a web UI (submitted with web_ui)")
    nodes: int = 1
    parts: list[dict[str, Any]] = Field(default_factory=list, description="[{node, gpus}] per rank of a placed job")
    web_url: str | None = Field(None, description="the job's own web UI through Corral's proxy, while it runs")
    preemptions: int = 0
    schedule_id: int | None = Field(None, description="the repeating-job schedule that started this job")
    kind: str = Field("batch", description="batch, or replica: a replica of a long-running service")
    service_id: int | None = Field(None, description="a replica: the service it serves (its name is the job's name)")
    service_revision: int | None = Field(None, description="a replica: the service revision it runs")
    tolerations: list[str] = Field(default_factory=list, description="node taints it tolerates (spot: spot nodes)")
    pool: str | None = Field(None, description="the pool it must run in (None: any)")
    stage_in: list[str] = Field(default_factory=list, description="input staged to its node before it runs (SRC:DST)")
    stage_out: list[str] = Field(default_factory=list, description="output shipped after it ends (SRC:DST)")
    stage_secret: str | None = Field(None, description="the tenant s3 secret its s3:// items use")
    stage_state: str | None = Field(
        None, description="its input: staging (on stage_node now) or staged (there: it runs there); None otherwise"
    )
    stage_node: str | None = Field(None, description="the node its input is staged on (pending jobs; a gang's first)")
    stage_nodes: list[str] = Field(
        default_factory=list, description="every node its input is staged on (pending jobs; a gang's, one per part)"
    )
    stage_out_state: str | None = Field(
        None,
        description="its output: pending (ships once it ends), running, done, failed, or skipped (it never ran)",
    )
    stage_out_message: str | None = Field(None, description="how shipping its output went")
    secret_env: dict[str, str] = Field(default_factory=dict, description="VAR -> secret name (never the value)")
    array_id: int | None = Field(None, description="a task of a job array: the array's id (its first task's id)")
    array_index: int | None = Field(None, description="a task of a job array: its index (CORRAL_ARRAY_INDEX)")
    array_limit: int | None = Field(
        None, description="a task of a job array: its array's tasks run at most this many at once"
    )
    image: str | None = Field(None, description="the container image it runs in (None: a plain process)")
    image_digest: str | None = Field(
        None, description="the image its current attempt runs, as the node's engine identifies it (once started)"
    )
    mounts: list[str] = Field(default_factory=list, description="host mounts of its container, SRC:DST[:ro]")
    shm_size_mib: int | None = Field(None, description="its container's /dev/shm in MiB, when it asked for one")
    container_user: str | None = Field(None, description="UID[:GID] its container runs as, when it asked for one")
    registry_secret: str | None = Field(None, description="the tenant's registry secret its image is pulled with")
    phase: str | None = Field(
        None,
        description="what a RUNNING job does before its command starts, e.g. 'pulling 43%' (its GPUs are held "
        "meanwhile); None once its command runs",
    )

    @classmethod
    def from_job(
        cls,
        job: Job,
        now: datetime,
        *,
        pending_reason: str | None = None,
        pending_code: str | None = None,
        position: int | None = None,
        eta: datetime | None = None,
        tenant: str | None = None,
    ) -> JobOut:
        """The one conversion of a domain job into its API shape; the pending fields come from the scheduler."""
        s = job.spec
        return cls(
            id=job.id,
            name=s.name,
            state=job.state,
            node=job.node,
            gpus=list(job.gpu_indices),
            gpu_count=s.gpus,
            nodes=s.nodes,
            parts=[{"node": n, "gpus": list(g)} for n, g in job.placed_parts],
            gpu_milli=s.gpu_milli,
            gpu_model="|".join(s.gpu_models) or None,
            command=list(s.command),
            env=dict(s.env),
            workdir=s.workdir,
            priority=s.priority,
            exit_code=job.exit_code,
            reason=job.reason,
            pending_reason=pending_reason,
            pending_code=pending_code,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            cancel_requested=job.cancel_requested,
            attempt=job.attempt,
            tenant=tenant,
            queue=s.queue,
            time_limit_s=s.time_limit_s,
            queue_position=position,
            eta=eta,
            preemptions=job.preemptions,
            eta_s=None if eta is None else max((eta - now).total_seconds(), 0.0),
            port=s.port or None,
            web_ui=s.port is not None,  # 0: asked for, no port yet (see JobSpec.port)
            web_url=f"/proxy/jobs/{job.id}/" if s.port and job.state is JobState.RUNNING else None,
            schedule_id=s.schedule_id,
            kind="replica" if s.service_id is not None else "batch",
            service_id=s.service_id,
            service_revision=s.service_revision,
            tolerations=list(s.tolerations),
            pool=s.pool or None,
            stage_in=[str(i) for i in s.stage_in],
            stage_out=[str(i) for i in s.stage_out],
            stage_secret=s.stage_secret or None,
            stage_state=(job.stage_state or None) if job.state is JobState.PENDING else None,
            stage_node=job.stage_node if job.state is JobState.PENDING and job.stage_state else None,
            stage_nodes=list(job.stage_nodes) if job.state is JobState.PENDING and job.stage_state else [],
            stage_out_state=compute_stage_out_state(job),
            stage_out_message=job.stage_out_message or None,
            secret_env=dict(s.secret_env),
            array_id=s.array_id,
            array_index=s.array_index,
            array_limit=s.array_limit,
            image=s.container.image if s.container else None,
            image_digest=job.image_digest or None,
            mounts=[str(m) for m in s.container.mounts] if s.container else [],
            shm_size_mib=s.container.shm_size_mib if s.container else None,
            container_user=s.container.user if s.container else None,
            registry_secret=s.container.registry_secret if s.container else None,
            phase=(job.phase or None) if job.state is JobState.RUNNING else None,
        )


def compute_stage_out_state(job: Job) -> str | None:
    """The output's state as shown: a job that ended without running never ships any (skipped)."""
    if not job.stage_out_state:
        return None
    if job.state.terminal and job.node is None and job.stage_out_state == staging.OUT_PENDING:
        return "skipped"
    return job.stage_out_state


class JobBatch(BaseModel):
    """Several submissions in one call (POST /api/v1/jobs/batch), accepted all together or not at all."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[JobSubmit] = Field(
        min_length=1, max_length=MAX_BATCH_JOBS, description=f"at most {MAX_BATCH_JOBS} submissions"
    )

    @field_validator("jobs")
    @classmethod
    def _tasks(cls, v: list[JobSubmit]) -> list[JobSubmit]:
        tasks = sum(len(parse_array(j.array).indices) if j.array else 1 for j in v)
        if tasks > MAX_ARRAY_TASKS:
            raise ValueError(f"{tasks} jobs (arrays counted by task); at most {MAX_ARRAY_TASKS} in one call")
        return v


class ScheduleIn(BaseModel):
    """A repeating job: `job` (a job submission, validated like POST /jobs) started at every firing."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=255, description="unique in the tenant; defaults to the job's name")
    schedule: str = Field(
        min_length=1, max_length=255, description="cron line ('0 2 * * *'), nickname ('@daily') or '@every 15m'"
    )
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

    @field_validator("job")
    @classmethod
    def _job(cls, v: JobSubmit) -> JobSubmit:
        return _no_array(v)


def _no_array(job: JobSubmit) -> JobSubmit:
    if job.array is not None:
        raise ValueError("array: a repeating job starts one job per firing, not an array")
    return job


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

    @field_validator("job")
    @classmethod
    def _job(cls, v: JobSubmit | None) -> JobSubmit | None:
        return None if v is None else _no_array(v)


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
    isolation: str = Field(
        "",
        description="users: jobs run as their users' Unix identities; single-user: every "
        "job runs as the agent's user (the agent is not root); empty: unknown",
    )
    runtimes: list[str] = Field(
        default_factory=lambda: ["process"],
        description="how its agent runs jobs: process, and docker where it reaches a container engine",
    )
    images: list[str] | None = Field(
        None,
        description="container images cached on the node, most recently used first (shown to admins only: an "
        "image's name may be a tenant's private matter)",
    )
    pool: str = Field("static", description="the node's pool: static (agents an operator runs) or a declared pool")
    source: str = Field(
        "agent", description="what runs its jobs: agent (a Corral agent), slurm or kubernetes (an existing cluster)"
    )


class EventOut(BaseModel):
    at: datetime
    kind: str
    message: str
    gpu: int | None = None


class SilenceIn(BaseModel):
    """A silence: alerts whose labels match `matchers` notify nobody from `starts_at` (default now) for
    `duration_s` (default 1 h) or until `ends_at`/`until`. At most 90 days; a tenant-admin's, 30 days."""

    model_config = ConfigDict(extra="forbid")

    matchers: str | dict[str, str] = Field(
        description='selector text (alertname="gpu_temperature", node=~"n1|n2") or {label: value}; not empty'
    )
    duration_s: float | None = Field(None, gt=0, le=90 * 86400, allow_inf_nan=False)
    starts_at: float | None = Field(None, ge=0, le=1e11, allow_inf_nan=False, description="Unix seconds")
    ends_at: float | None = Field(None, ge=0, le=1e11, allow_inf_nan=False, description="Unix seconds")
    until: str | None = Field(None, max_length=64, description="ISO time the silence ends (instead of ends_at)")
    comment: str = Field("", max_length=1000)
    tenant: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="mute only this tenant's alerts (a tenant-admin's silence always does)",
    )

    @field_validator("matchers")
    @classmethod
    def _matchers(cls, v: str | dict[str, str]) -> str | dict[str, str]:
        if isinstance(v, str) and len(v) > 4096:
            raise ValueError("at most 4096 characters")
        if isinstance(v, dict) and (len(v) > 32 or any(len(k) > 128 or len(x) > 1024 for k, x in v.items())):
            raise ValueError("at most 32 labels, names of 128 and values of 1024 characters")
        return v


class AuditOut(BaseModel):
    at: datetime
    actor: str
    action: str
    target: str
    detail: str


class GpuReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int = Field(ge=0, le=bounds.MAX_GPUS_PER_NODE)
    uuid: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, max_length=128)
    memory_mib: int = Field(ge=0, le=bounds.MAX_MEMORY_MIB)
    pci_bus_id: str = Field("", max_length=64)
    numa_node: int | None = Field(None, ge=-1, le=4096)
    nvlink_peers: list[Annotated[int, Field(ge=0, le=bounds.MAX_GPUS_PER_NODE)]] = Field(
        default_factory=list, max_length=bounds.MAX_GPUS_PER_NODE
    )
    pcie_switch: str | None = Field(None, max_length=64)
    ecc_enabled: bool = False
    healthy: bool = True

    @classmethod
    def from_info(cls, g: GpuInfo) -> GpuReport:
        """What an agent reports of a GPU its backend discovered."""
        return cls(
            index=g.index,
            uuid=g.uuid,
            model=g.model,
            memory_mib=g.memory_mib,
            pci_bus_id=g.pci_bus_id,
            numa_node=g.numa_node,
            nvlink_peers=list(g.nvlink_peers),
            pcie_switch=g.pcie_switch,
            ecc_enabled=g.ecc_enabled,
            healthy=g.healthy,
        )

    def to_info(self) -> GpuInfo:
        """The GPU as the server keeps it."""
        return GpuInfo(
            index=self.index,
            uuid=self.uuid,
            model=self.model,
            memory_mib=self.memory_mib,
            pci_bus_id=self.pci_bus_id,
            numa_node=self.numa_node,
            nvlink_peers=tuple(self.nvlink_peers),
            pcie_switch=self.pcie_switch,
            ecc_enabled=self.ecc_enabled,
            healthy=self.healthy,
        )


class AgentRegister(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    hostname: str = Field("", max_length=255)
    address: str = Field("", max_length=255, description="host or IP the server reaches this node at")
    backend: str = Field(min_length=1, max_length=64)
    cpu_milli: int = Field(0, ge=0, le=bounds.MAX_CPU_MILLI)
    memory_mib: int = Field(0, ge=0, le=bounds.MAX_MEMORY_MIB)
    labels: dict[
        Annotated[str, Field(max_length=bounds.MAX_LABEL_KEY_CHARS)],
        Annotated[str, Field(max_length=bounds.MAX_LABEL_VALUE_CHARS)],
    ] = Field(default_factory=dict, max_length=bounds.MAX_LABELS)
    gpus: list[GpuReport] = Field(default_factory=list, max_length=bounds.MAX_GPUS_PER_NODE)
    agent_version: str = Field("", max_length=64)
    isolation: str = Field(
        "",
        pattern="^(users|single-user)?$",
        description="users: jobs run as their users' Unix identities; single-user: as the agent's",
    )
    runtimes: list[Annotated[str, Field(pattern="^(process|docker)$")]] = Field(
        default_factory=lambda: ["process"], max_length=4, description="how this agent runs jobs: process, docker"
    )
    images: list[Annotated[str, Field(max_length=255)]] | None = Field(
        None, max_length=MAX_NODE_IMAGES, description="container images cached on the node, most recently used first"
    )


class RunRef(BaseModel):
    """One attempt of a job: a requeued job runs again as a new attempt, which the agent keeps apart."""

    model_config = ConfigDict(frozen=True)
    job_id: int = Field(ge=1, le=bounds.MAX_ID)
    attempt: int = Field(ge=1, le=bounds.MAX_ID)
    rank: int = Field(0, ge=0, le=1024, description="which part of a multi-node job (0 for single-node jobs)")

    @property
    def key(self) -> str:
        """The executor's id for this run (also a safe file name)."""
        return f"{self.job_id}.{self.attempt}" + (f".{self.rank}" if self.rank else "")

    @classmethod
    def from_key(cls, key: str) -> RunRef:
        parts = key.split(".")
        return cls(
            job_id=int(parts[0]),
            attempt=int(parts[1]) if len(parts) > 1 else 1,
            rank=int(parts[2]) if len(parts) > 2 else 0,
        )


class ExitReport(BaseModel):
    job_id: int = Field(ge=1, le=bounds.MAX_ID)
    attempt: int = Field(1, ge=1, le=bounds.MAX_ID)
    rank: int = Field(0, ge=0, le=1024)
    exit_code: int = Field(ge=-(2**31), le=bounds.INT32_MAX, description="the exit status, or minus the signal")
    reason: str = Field("", description="why it ended, in words (control characters become spaces; at most 1,000)")

    @field_validator("reason")
    @classmethod
    def _reason(cls, v: str) -> str:
        # It may quote a registry's or an engine's answer, which a tenant can choose: stored and shown as text.
        return bounds.printable(v, MAX_EXIT_REASON_CHARS)

    @property
    def run(self) -> RunRef:
        return RunRef(job_id=self.job_id, attempt=self.attempt, rank=self.rank)


class SimFaultCommand(BaseModel):
    """A fault to inject into a simulated GPU (`corral sim fault`), or clear."""

    gpu_index: int = Field(ge=0, le=bounds.MAX_GPUS_PER_NODE)
    xid: int | None = Field(None, ge=1, le=bounds.INT32_MAX)
    ecc: bool = False
    off_bus: bool = False
    temperature_c: float | None = Field(None, gt=0, lt=200)
    clear: bool = False


class WebPortCheck(BaseModel):
    """A run of this node whose web UI Corral assigned `port`: the agent checks who listens there."""

    job_id: int = Field(ge=1, le=bounds.MAX_ID)
    attempt: int = Field(1, ge=1, le=bounds.MAX_ID)
    rank: int = Field(0, ge=0, le=1024)
    port: int = Field(ge=1, le=65535)


class WebPortReport(WebPortCheck):
    """`listening`: the run's own processes, and only they, listen on `port` now; else `detail` says why not."""

    model_config = ConfigDict(extra="forbid")
    listening: bool
    detail: str = Field("", max_length=500)


class AgentSync(BaseModel):
    model_config = ConfigDict(extra="forbid")
    running: list[RunRef] = Field(default_factory=list, description="runs alive on the node")
    exits: list[ExitReport] = Field(default_factory=list, description="finished runs not yet acknowledged")
    web_ports: list[WebPortReport] = Field(
        default_factory=list, max_length=4096, description="what the agent found listening on its jobs' web-UI ports"
    )
    wait_s: float = Field(0.0, ge=0, le=60, description="long-poll: hold the reply up to this long for new work")
    boot: str = Field(
        "", max_length=64, description="the agent process's random id (its reports' `seq` restart with it)"
    )
    image_digests: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=255)]] = Field(
        default_factory=dict,
        max_length=4096,
        description="run key (job.attempt[.rank]) -> the image its container runs, for running container jobs",
    )
    phases: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=64)]] = Field(
        default_factory=dict,
        max_length=4096,
        description="run key -> what the run does before its command starts (e.g. 'pulling 43%'); absent once it runs",
    )
    images: list[Annotated[str, Field(max_length=255)]] | None = Field(
        None,
        max_length=MAX_NODE_IMAGES,
        description="container images cached on the node, most recently used first (None: unchanged / not known)",
    )
    seq: int = Field(
        0,
        ge=0,
        le=2**53,
        description="the report's number in the agent's order of snapshots: one older than a report the server "
        "applied already (two syncs cross on the way) is applied for its exits only",
    )
    staging_in: dict[Annotated[str, Field(max_length=20)], StageReport] = Field(
        default_factory=dict, max_length=1024, description="job id -> how staging its input on this node goes"
    )
    staging_out: dict[Annotated[str, Field(max_length=20)], StageReport] = Field(
        default_factory=dict, max_length=1024, description="job id -> how shipping its output goes"
    )


class RegistryAuth(BaseModel):
    """A registry login handed to the agent that pulls a job's image: never stored or logged on the node."""

    host: str
    username: str
    password: str = Field(repr=False)


class Assignment(BaseModel):
    job_id: int
    attempt: int = 1
    rank: int = 0
    command: list[str]
    env: dict[str, str]
    workdir: str | None
    gpu_indices: list[int]
    gpu_uuids: list[str]
    uid: int | None = Field(None, description="Unix uid the job runs as (resolved by the server for every node)")
    gid: int | None = Field(None, description="Unix gid the job runs as")
    unix_user: str = Field("", description="USER/LOGNAME of the job when the node has no account for its uid")
    secret_env: dict[str, str] = Field(
        default_factory=dict, repr=False, description="VAR -> secret value: kept out of files and logs on the node"
    )
    container: dict[str, Any] | None = Field(
        None, description="a container job: image, mounts, shm_size_mib, user (core.containers.container_to_dict)"
    )
    registry_auth: RegistryAuth | None = Field(
        None, repr=False, description="the login its image is pulled with (a tenant registry secret, opened)"
    )
    cpu_milli: int = Field(0, description="the job's CPU request: a container's limit")
    memory_mib: int = Field(0, description="the job's memory request: a container's limit")
    log_max_bytes: int = Field(
        0, ge=0, description="largest log of this run the node keeps (the server's CORRAL_JOB_LOG_MAX_MB); 0: no limit"
    )
    staged_in: bool = Field(False, description="its input was staged on this node: the agent lays it out at start")
    stage_dir: bool = Field(False, description="it stages data in or out: it gets a CORRAL_STAGE_DIR")
    web_port: int | None = Field(
        None, ge=1, le=65535, description="the node port Corral assigned to the job's web UI (also CORRAL_JOB_PORT)"
    )

    @property
    def run(self) -> RunRef:
        return RunRef(job_id=self.job_id, attempt=self.attempt, rank=self.rank)


class AgentSyncReply(BaseModel):
    assignments: list[Assignment]
    cancels: list[RunRef]
    acked_exits: list[RunRef]
    cancel_grace_s: float
    faults: list[SimFaultCommand] = Field(default_factory=list)
    web_ports: list[WebPortCheck] = Field(default_factory=list, description="runs whose web-UI port to check")
    stage_in: list[StageOrder] = Field(
        default_factory=list, description="every pending job whose input this node stages now (the whole list)"
    )
    stage_out: list[StageOrder] = Field(
        default_factory=list, description="every ended job whose output this node ships now (the whole list)"
    )
    notice_s: float | None = Field(
        None,
        description="seconds left before the node's provider takes it back (a spot interruption notice): the "
        "agent writes them to each job's CORRAL_NOTICE_FILE before it stops the job (cancel_grace_s is then the "
        "notice)",
    )


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64)
    parent: str | None = Field(None, max_length=64, description="parent tenant (department) name")
    weight: float = Field(1.0, ge=0.001, le=1000, allow_inf_nan=False, description="fair-share weight")


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
    role: str = Field("member", max_length=32, description="admin, tenant-admin, member or viewer")
    tenant: str | None = Field(None, max_length=64, description="defaults to the caller's tenant")
    password: str | None = Field(None, min_length=8, max_length=1024)


class UserPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str | None = Field(None, max_length=32)
    password: str | None = Field(
        None, min_length=8, max_length=1024, description="a new password ends every other login session of the user"
    )
    disabled: bool | None = Field(
        None,
        description="a disabled user cannot log in and its tokens and sessions "
        "stop working (the last admin cannot be disabled)",
    )
    current_password: str | None = Field(
        None, max_length=1024, description="needed to change one's own password (not another user's)"
    )


class UserOut(BaseModel):
    id: int
    name: str
    role: str
    tenant: str | None
    has_password: bool
    created_at: datetime
    directory: str = Field("", description='"" for a local user; ldap or oidc for one a directory manages')
    disabled: bool = False
    unix_uid: int | None = Field(
        None,
        description="the Unix account an admin mapped the user to (null: a UID "
        "from CORRAL_JOB_UIDS); see /users/{name}/unix",
    )
    unix_gid: int | None = None


class UnixIdentityIn(BaseModel):
    """Map a user to an existing Unix account (admins): its jobs run as uid:gid on every node."""

    model_config = ConfigDict(extra="forbid")
    uid: int = Field(ge=1000, le=2**32 - 2, description="never 0 or a system account, nor one of CORRAL_JOB_UIDS")
    gid: int | None = Field(None, ge=1000, le=2**32 - 2, description="defaults to the uid")


class UnixIdentityOut(BaseModel):
    user: str
    uid: int
    gid: int
    source: str = Field(description="mapped (an admin's mapping) or range (CORRAL_JOB_UIDS start + user id)")


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field("", max_length=128)
    user: str | None = Field(
        None, max_length=64, description="whose token (admins and tenant admins); defaults to the caller"
    )
    expires_in_s: int | None = Field(None, ge=60, le=10 * 366 * 86400)
    metrics: bool = Field(False, description="a token that can only scrape /metrics (admins; it belongs to no user)")


class TokenOut(BaseModel):
    id: int
    name: str
    user: str | None
    created_at: datetime
    expires_at: datetime | None
    revoked: bool
    token: str | None = Field(None, description="the secret, shown once when the token is created")
    kind: str = Field(
        "user",
        description="user (an API token), session (a login: ends with a password change) or "
        "metrics (can only scrape /metrics)",
    )


class LoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    username: str = Field(min_length=1, max_length=255)
    password: str = Field(min_length=1, max_length=1024)


class WhoAmI(BaseModel):
    user: str | None
    role: str
    tenant: str | None


class GroupMappingIn(BaseModel):
    """Members of a directory group (LDAP group name or DN, or an OpenID Connect groups-claim value) belong to a
    tenant with a role."""

    model_config = ConfigDict(extra="forbid")
    group: str = Field(min_length=1, max_length=255, pattern=r"^[^\x00]*$")
    tenant: str = Field(min_length=1, max_length=64)
    role: str = Field("member", max_length=32, description="admin, tenant-admin, member or viewer")


class GroupMappingOut(BaseModel):
    id: int
    group: str
    tenant: str
    role: str


class JoinTokenIn(BaseModel):
    """A join token for new nodes (admins): it expires after `ttl_s` and is spent after `uses` joins."""

    model_config = ConfigDict(extra="forbid")
    ttl_s: int = Field(3600, ge=60, le=30 * 86400, description="seconds until it expires")
    uses: int = Field(1, ge=1, le=10_000, description="how many nodes may join with it")
    description: str = Field("", max_length=255, pattern=r"^[^\x00]*$")


class JoinTokenOut(BaseModel):
    id: int
    description: str
    created_by: str
    created_at: datetime
    expires_at: datetime
    max_uses: int
    uses: int
    revoked_at: datetime | None
    state: str = Field(description="usable, expired, used up or revoked")
    token: str | None = Field(None, description="the token itself: shown once, when it is created")


class JoinCaOut(BaseModel):
    ca: str = Field(description="the cluster CA's certificate (PEM)")
    fingerprint: str = Field(description="sha256:<hex> of the CA certificate (DER)")


class JoinIn(BaseModel):
    """A joining agent: a join token, the node name and a certificate signing request (PEM) over its own key."""

    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=512)
    node: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    csr: str = Field(min_length=1, max_length=16_384)


class RenewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    csr: str = Field(min_length=1, max_length=16_384)


class NodeCertOut(BaseModel):
    """A node's certificate (PEM) signed by the cluster CA, and the CA itself."""

    node: str
    cert: str
    ca: str
    serial: str
    not_after: datetime


class NodeRevokeOut(BaseModel):
    node: str
    revoked_serials: list[str]


class ReplicaOut(BaseModel):
    id: str = Field(description="host:pid:random, new for each server process")
    host: str
    url: str = Field(description="where it serves the API")
    version: str
    started_at: datetime
    last_seen_at: datetime = Field(description="its last heartbeat (each second while it runs)")
    leader: bool = Field(description="it holds the leader lease: it applies plans, fires schedules, runs alerts")
    schema_head: str = Field("", description='the newest migration its code knows ("": older than 0022)')


class StatusOut(BaseModel):
    """The control plane: the server replicas sharing the database and which of them leads (issue 17)."""

    replica: str = Field(description="the id of the replica that answered")
    leader: str | None = Field(description="the id of the leading replica (None: none holds a live lease)")
    leader_since: datetime | None = Field(description="since when the leader has led")
    leader_epoch: int = Field(description="grows with each new leader (a fencing token)")
    lease_expires_at: datetime | None = Field(description="when another replica may take over unless renewed")
    replicas: list[ReplicaOut] = Field(description="replicas heard from in the last 15 s, oldest first")
    schema_revision: str = Field("", description="the database's schema revision (the newest migration applied)")
    min_compatible_revision: str = Field(
        "", description="the oldest code revision that may still run on the schema (a contract migration raises it)"
    )

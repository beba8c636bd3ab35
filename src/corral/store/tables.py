"""SQLAlchemy 2 table definitions; the migrations in migrations/versions/ create exactly these."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


UTC_DT = DateTime(timezone=True)


class TenantRow(Base):
    __tablename__ = "tenants"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"), nullable=True)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    created_at: Mapped[datetime] = mapped_column(UTC_DT)


class UsageRow(Base):
    """Fair share's history: each tenant's decayed GPU-seconds as of `as_of` (kept across restarts)."""

    __tablename__ = "fair_share_usage"
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    as_of: Mapped[datetime] = mapped_column(UTC_DT)


class QuotaRow(Base):
    __tablename__ = "quotas"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    gpu_model: Mapped[str] = mapped_column(String(128), default="")
    guaranteed_gpus: Mapped[int] = mapped_column(Integer, default=0)
    max_gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)

    __table_args__ = (UniqueConstraint("tenant_id", "gpu_model", name="uq_quotas_tenant_model"),)


class QueueRow(Base):
    __tablename__ = "queues"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    mode: Mapped[str] = mapped_column(String(16), default="best-effort")
    priority: Mapped[int] = mapped_column(Integer, default=0)

    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_queues_tenant_name"),)


class UserRow(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    role: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTC_DT)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"), nullable=True)
    password_hash: Mapped[str] = mapped_column(String(255), default="")
    # The Unix account an admin mapped the user to (jobs run as it); NULL: a UID from CORRAL_JOB_UIDS. Migration 0010.
    unix_uid: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    unix_gid: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)  # a disabled user's tokens and sessions fail
    # "" for a local user; "ldap" or "oidc" for one a directory manages (no local password; tenant and role
    # follow its groups at each login). Migration 0015.
    directory: Mapped[str] = mapped_column(String(16), default="", server_default="")


class TokenRow(Base):
    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(128), default="")
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTC_DT)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    expires_at: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)
    # A login session (web or `corral login`): ends when its user's password changes. `parent_id`: the token a
    # session was opened with; revoking that token revokes the session too.
    is_session: Mapped[bool] = mapped_column(Boolean, default=False)
    parent_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)


class LoginFailureRow(Base):
    """Consecutive failed logins of one user name or client address (`key`), and until when it is locked."""

    __tablename__ = "login_failures"
    key: Mapped[str] = mapped_column(String(80), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    last_failure_at: Mapped[datetime] = mapped_column(UTC_DT)
    locked_until: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)


class NodeRow(Base):
    __tablename__ = "nodes"
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    backend: Mapped[str] = mapped_column(String(32))
    cpu_milli: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(BigInteger)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    state: Mapped[str] = mapped_column(String(16))
    registered_at: Mapped[datetime] = mapped_column(UTC_DT)
    last_heartbeat_at: Mapped[datetime] = mapped_column(UTC_DT)
    cordoned: Mapped[bool] = mapped_column(Boolean, default=False)
    address: Mapped[str] = mapped_column(String(255), default="")  # where the server reaches jobs' web UIs
    isolation: Mapped[str] = mapped_column(String(16), default="", server_default="")  # users | single-user (0010)
    runtimes: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)  # process, docker (0019; None: process)
    images: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)  # cached container images (0020)
    # What its agent last reported of its jobs' web-UI ports, for the job proxy of any replica (0021)
    web_ports: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    web_ports_at: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)
    # The newest agent report applied, by any replica: (its agent process's boot id, its number) (0021)
    report_boot: Mapped[str] = mapped_column(String(64), default="", server_default="")
    report_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class GpuRow(Base):
    __tablename__ = "gpus"
    node_name: Mapped[str] = mapped_column(ForeignKey("nodes.name", ondelete="CASCADE"), primary_key=True)
    index: Mapped[int] = mapped_column("gpu_index", Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(128))
    memory_mib: Mapped[int] = mapped_column(BigInteger)
    pci_bus_id: Mapped[str] = mapped_column(String(64), default="")
    numa_node: Mapped[int | None] = mapped_column(Integer, nullable=True)
    nvlink_peers: Mapped[list[int]] = mapped_column(JSON, default=list)
    pcie_switch: Mapped[str | None] = mapped_column(String(64), nullable=True)
    ecc_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    healthy: Mapped[bool] = mapped_column(Boolean, default=True)
    health_reason: Mapped[str] = mapped_column(String(255), default="")
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)


_ACTIVE = "state IN ('PENDING', 'RUNNING')"  # ix_jobs_active_id's rows


class JobRow(Base):
    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    command: Mapped[list[str]] = mapped_column(JSON)
    env: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    workdir: Mapped[str | None] = mapped_column(Text, nullable=True)
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    gpu_milli: Mapped[int] = mapped_column(Integer, default=1000)
    gpu_models: Mapped[list[str]] = mapped_column(JSON, default=list)
    min_gpu_memory_mib: Mapped[int] = mapped_column(BigInteger, default=0)
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(BigInteger, default=0)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(16))
    node: Mapped[str | None] = mapped_column(String(255), nullable=True)
    gpu_indices: Mapped[list[int]] = mapped_column(JSON, default=list)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTC_DT)
    started_at: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    delivered: Mapped[bool] = mapped_column(Boolean, default=False)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"), nullable=True)
    queue: Mapped[str] = mapped_column(String(64), default="default")
    time_limit_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_retries: Mapped[int] = mapped_column(Integer, default=3)
    failures: Mapped[int] = mapped_column(Integer, default=0)  # attempts ended by a GPU or node failure
    preempt_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    preempted_for: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the waiting job it is stopped for
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    attained_gpu_s: Mapped[float] = mapped_column(Float, default=0.0)  # GPU-seconds of earlier attempts
    not_before: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)
    gpu_summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    port: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the job's own web UI, proxied by Corral
    nodes: Mapped[int] = mapped_column(Integer, default=1)  # a gang of `nodes` parts, `gpus` GPUs on each
    parts: Mapped[list[Any]] = mapped_column(JSON, default=list)  # [[node, [gpu, ...]], ...], rank order
    node_list: Mapped[str] = mapped_column(Text, default="")  # ",n1,n2,": finds a gang's jobs by node
    delivered_nodes: Mapped[str] = mapped_column(Text, default="")  # ",n1,": agents that hold their part
    part_exits: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # node -> exit code of its part
    schedule_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the schedule that started it
    # VAR -> secret name: resolved only when the job is handed to its agent, never a value. Migration 0012.
    secret_env: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    # A task of a job array: the array's id (its first task's id), the task's index, the most running at once.
    # Migration 0017.
    array_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    array_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    array_limit: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # A container job: its image, mounts, shm size and user (core.containers.container_to_dict), and the image its
    # current attempt runs as the node's engine named it. Migration 0019.
    container: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    image_digest: Mapped[str] = mapped_column(String(255), default="", server_default="")
    # What a RUNNING attempt does before its command starts, as its agent reports it ("pulling 43%"). Migration 0020.
    phase: Mapped[str] = mapped_column(String(64), default="", server_default="")
    # A replica of a service: the service and its revision. Migration 0024.
    service_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    service_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Node taints it tolerates (`submit --spot` tolerates spot nodes) and the pool it asked for. Migration 0025.
    tolerations: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    pool: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Data staging (core/staging.py): the SRC:DST items each way and the S3 secret; where the input is being staged
    # (stage_state staging|staged on stage_node, with its progress); the stage-out's state and outcome. Migration 0026.
    stage_in: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    stage_out: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    stage_secret: Mapped[str | None] = mapped_column(String(64), nullable=True)
    stage_state: Mapped[str] = mapped_column(String(16), default="", server_default="")
    stage_node: Mapped[str | None] = mapped_column(String(255), nullable=True)
    stage_progress: Mapped[str] = mapped_column(String(255), default="", server_default="")
    # A gang's input is staged on each of its nodes: ",n1,n2," (NULL: stage_node alone) and those done. Migration 0027.
    stage_nodes: Mapped[str | None] = mapped_column(Text, nullable=True)
    stage_done: Mapped[str] = mapped_column(Text, default="", server_default="")
    stage_out_state: Mapped[str] = mapped_column(String(16), default="", server_default="")
    stage_out_message: Mapped[str] = mapped_column(Text, default="", server_default="")
    # How often the row was updated: the database bumps it on every UPDATE (a trigger; migration 0028), so a reader
    # loads again only the jobs whose row changed (SqlStore.list_jobs_changed). Never set by a statement.
    row_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    __table_args__ = (
        Index("ix_jobs_state", "state"),
        Index("ix_jobs_stage_out", "stage_out_state", "node"),  # 0026: a node's ended jobs with output to ship
        Index("ix_jobs_stage_node", "stage_node"),  # 0026: the jobs a node stages input for
        Index("ix_jobs_stage_state", "stage_state"),  # 0027: the jobs being staged (a gang's on any of its nodes)
        Index("ix_jobs_service", "service_id"),
        Index("ix_jobs_array", "array_id"),
        Index("ix_jobs_node", "node"),
        Index("ix_jobs_tenant", "tenant_id"),
        Index("ix_jobs_schedule", "schedule_id"),
        Index("ix_jobs_state_id", "state", "id"),  # 0018: the job list's filters and id order
        Index("ix_jobs_tenant_state_id", "tenant_id", "state", "id"),  # 0018
        Index("ix_jobs_node_state", "node", "state"),  # 0030: a node's running jobs (an agent's sync)
        # 0030: the running gangs, by a partial index that no query without `nodes > 1` can pick
        Index("ix_jobs_gangs_state", "state", sqlite_where=text("nodes > 1"), postgresql_where=text("nodes > 1")),
        # 0033: the pending and running jobs in id order (the default job list), which PostgreSQL otherwise finds by
        # walking the primary key past every finished job
        Index("ix_jobs_active_id", "id", sqlite_where=text(_ACTIVE), postgresql_where=text(_ACTIVE)),
    )


class ScheduleRow(Base):
    """A repeating job: a validated job submission plus when to run it (see corral.core.schedules)."""

    __tablename__ = "schedules"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    name: Mapped[str] = mapped_column(String(255))
    expr: Mapped[str] = mapped_column(String(255))
    timezone: Mapped[str] = mapped_column(String(64), default="UTC")
    concurrency: Mapped[str] = mapped_column(String(16), default="forbid")
    paused: Mapped[bool] = mapped_column(Boolean, default=False)
    job: Mapped[dict[str, Any]] = mapped_column(JSON)  # the JobSubmit body
    created_at: Mapped[datetime] = mapped_column(UTC_DT)
    next_run_at: Mapped[datetime] = mapped_column(UTC_DT)
    last_run_at: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)
    last_job_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    runs: Mapped[int] = mapped_column(Integer, default=0)
    skipped: Mapped[int] = mapped_column(Integer, default=0)
    missed: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (
        UniqueConstraint("tenant_id", "name", name="uq_schedules_tenant_name"),
        Index("ix_schedules_due", "paused", "next_run_at"),
    )


class ServiceRow(Base):
    """A long-running service (core/services.py): its revisions, desired replicas, rollout and recent events."""

    __tablename__ = "services"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    name: Mapped[str] = mapped_column(String(63))  # unique in the cluster: the gateway's /services/NAME/
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)  # public, scaling, surge, queue limit ...
    revisions: Mapped[list[Any]] = mapped_column(JSON)  # the newest MAX_REVISIONS: template, port, health path
    revision: Mapped[int] = mapped_column(Integer)  # the one replicas should run
    stable_revision: Mapped[int] = mapped_column(Integer, default=0)  # the last one a rollout completed
    replicas: Mapped[int] = mapped_column(Integer)  # desired now (set by scale or the autoscaler)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)  # rollout, draining replicas, restarts (the controller's)
    events: Mapped[list[Any]] = mapped_column(JSON)  # the newest MAX_EVENTS: {at, kind, message}
    deleting: Mapped[bool] = mapped_column(Boolean, default=False)
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTC_DT)
    updated_at: Mapped[datetime] = mapped_column(UTC_DT)

    # ids are never reused (old replica jobs keep their service_id as history)
    __table_args__ = (UniqueConstraint("name", name="uq_services_name"), {"sqlite_autoincrement": True})


class ServiceTrafficRow(Base):
    """The gateway counts of one server replica for one service (cumulative since it started), replaced every
    second or so; the leader's controller sums them over replicas."""

    __tablename__ = "service_traffic"
    service_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    server: Mapped[str] = mapped_column(String(128), primary_key=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(UTC_DT)


class ServiceSampleRow(Base):
    """A point of a service's graphs (request rate, errors, latency, replicas), written by the leader."""

    __tablename__ = "service_samples"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    service_id: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(UTC_DT)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)

    __table_args__ = (Index("ix_service_samples_service_at", "service_id", "at"),)


class JobEventRow(Base):
    __tablename__ = "job_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(UTC_DT)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")


class NodeEventRow(Base):
    __tablename__ = "node_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(255), index=True)
    gpu_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    at: Mapped[datetime] = mapped_column(UTC_DT)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")


class AuditRow(Base):
    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTC_DT, index=True)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(255), default="")
    detail: Mapped[str] = mapped_column(Text, default="")


class MetricPointRow(Base):
    """Raw samples, kept for the raw retention period (24 h by default). gpu = -1 for host series."""

    __tablename__ = "metric_points"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float)
    node: Mapped[str] = mapped_column(String(255))
    gpu: Mapped[int] = mapped_column(Integer)
    metric: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)
    job_id: Mapped[int | None] = mapped_column(Integer, nullable=True)

    __table_args__ = (
        Index("ix_metric_points_lookup", "metric", "node", "ts"),
        Index("ix_metric_points_ts", "ts"),
        Index("ix_metric_points_job", "job_id"),
    )


class MetricRollupRow(Base):
    """1-minute rollups, kept for the rollup retention period (30 days by default)."""

    __tablename__ = "metric_rollups"
    metric: Mapped[str] = mapped_column(String(64), primary_key=True)
    node: Mapped[str] = mapped_column(String(255), primary_key=True)
    gpu: Mapped[int] = mapped_column(Integer, primary_key=True)
    bucket: Mapped[float] = mapped_column(Float, primary_key=True)
    count: Mapped[int] = mapped_column(Integer)
    min: Mapped[float] = mapped_column(Float)
    max: Mapped[float] = mapped_column(Float)
    sum: Mapped[float] = mapped_column(Float)
    last: Mapped[float] = mapped_column(Float)
    last_ts: Mapped[float] = mapped_column(Float)


class AlertRuleRow(Base):
    __tablename__ = "alert_rules"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTC_DT)


class AlertHistoryRow(Base):
    """Every state change of every alert (pending, firing, resolved), newest last."""

    __tablename__ = "alert_history"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    rule: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(16))
    severity: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, Any]] = mapped_column(JSON)
    value: Mapped[float] = mapped_column(Float)
    summary: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(UTC_DT, index=True)


class SilenceRow(Base):
    __tablename__ = "silences"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTC_DT)


class SecretRow(Base):
    """A tenant's secret, sealed (AES-GCM) with a key from the key file, never in plain text. Migration 0012."""

    __tablename__ = "secrets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))  # generic | registry (host, username in `meta`)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # public attributes of the kind
    key_id: Mapped[str] = mapped_column(String(32), index=True)  # which key of the key file sealed it
    sealed: Mapped[str] = mapped_column(Text)  # base64(nonce + ciphertext + tag)
    created_by: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[datetime] = mapped_column(UTC_DT)
    updated_at: Mapped[datetime] = mapped_column(UTC_DT)

    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_secrets_tenant_name"),)


class DirectoryGroupRow(Base):
    """Members of a directory group (LDAP or OpenID Connect) belong to this tenant with this role. Migration 0015."""

    __tablename__ = "directory_group_mappings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    group_name: Mapped[str] = mapped_column(String(255), unique=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTC_DT)


class JoinTokenRow(Base):
    """A join token (its secret stored hashed): short-lived, limited uses, revocable. Migration 0011."""

    __tablename__ = "join_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    secret_hash: Mapped[str] = mapped_column(String(128), unique=True)
    description: Mapped[str] = mapped_column(String(255), default="")
    created_by: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[datetime] = mapped_column(UTC_DT)
    expires_at: Mapped[datetime] = mapped_column(UTC_DT)
    max_uses: Mapped[int] = mapped_column(Integer)
    uses: Mapped[int] = mapped_column(Integer, default=0)
    revoked_at: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)


class NodeCertRow(Base):
    """A certificate the cluster CA issued to a node; an agent request is accepted only with a live one."""

    __tablename__ = "node_certs"
    serial: Mapped[str] = mapped_column(String(64), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(80), unique=True)  # sha256:<hex> of the DER
    node: Mapped[str] = mapped_column(String(255), index=True)
    issued_at: Mapped[datetime] = mapped_column(UTC_DT)
    not_after: Mapped[datetime] = mapped_column(UTC_DT)
    join_token_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # None: renewal or the local agent
    revoked_at: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)


class IdempotencyKeyRow(Base):
    """A job submission's Idempotency-Key: the same key from the same caller returns this job. Migration 0013."""

    __tablename__ = "idempotency_keys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(64))  # user:<id>, or token:<id> for a token without a user
    key: Mapped[str] = mapped_column(String(255))
    request_hash: Mapped[str] = mapped_column(String(64))  # sha256 of the canonical request
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))  # the first job it made
    job_ids: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)  # all of them (array, batch); 0017
    created_at: Mapped[datetime] = mapped_column(UTC_DT, index=True)
    __table_args__ = (UniqueConstraint("owner", "key", name="uq_idempotency_keys_owner_key"),)


class LeaseRow(Base):
    """The leader lease of the server replicas (issue 17): one row per lease name ("leader"), claimed by a single
    conditional UPDATE: by its holder to renew it, by anyone once it expired (then `epoch` grows: a fencing token).
    Migration 0021 inserts the row."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128), default="")
    epoch: Mapped[int] = mapped_column(BigInteger, default=0)
    since: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)  # when the holder took it
    expires_at: Mapped[datetime] = mapped_column(UTC_DT)


class ReplicaRow(Base):
    """A server replica's heartbeat: what `corral status` lists. Migration 0021."""

    __tablename__ = "replicas"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)  # host:pid:random, new per process
    host: Mapped[str] = mapped_column(String(255), default="")
    url: Mapped[str] = mapped_column(String(255), default="")  # where it serves the API
    version: Mapped[str] = mapped_column(String(64), default="")
    started_at: Mapped[datetime] = mapped_column(UTC_DT)
    last_seen_at: Mapped[datetime] = mapped_column(UTC_DT, index=True)
    schema_head: Mapped[str] = mapped_column(String(64), default="", server_default="")  # its newest migration; 0022


class SchemaCompatRow(Base):
    """One row (id 1): the oldest code revision that may still run on this schema; a contract migration raises it,
    older code refuses to start (store/migrate.py). Migration 0022."""

    __tablename__ = "schema_compat"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    min_revision: Mapped[str] = mapped_column(String(64), default="", server_default="")
    reason: Mapped[str] = mapped_column(Text, default="", server_default="")


class AlertSnapshotRow(Base):
    """One row (id 1): the leader's current alerts (firing, pending, recently resolved; the API's dicts) as of its
    last round, for the replicas that do not lead to answer GET /alerts from. Migration 0023."""

    __tablename__ = "alert_snapshot"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    alerts: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    at: Mapped[datetime] = mapped_column(UTC_DT)
    holder: Mapped[str] = mapped_column(String(128), default="", server_default="")


class PoolRow(Base):
    """A cloud pool an admin declared (core/pools.py PoolSpec as JSON). Migration 0025."""

    __tablename__ = "pools"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_by: Mapped[str] = mapped_column(String(255), default="")
    created_at: Mapped[datetime] = mapped_column(UTC_DT)
    updated_at: Mapped[datetime] = mapped_column(UTC_DT)
    version: Mapped[int] = mapped_column(Integer, default=1)


class PoolNodeRow(Base):
    """A node a cloud pool started (autoscaler/model.py PoolNode), live or as history (what it cost). 0025."""

    __tablename__ = "pool_nodes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    pool: Mapped[str] = mapped_column(String(64))
    instance_type: Mapped[str] = mapped_column(String(64))
    spot: Mapped[bool] = mapped_column(Boolean, default=False)
    price_per_hour: Mapped[float] = mapped_column(Float, default=0.0)
    gpus: Mapped[int] = mapped_column(Integer, default=0)  # its type's GPUs (a GPU-hour's price: price / gpus)
    state: Mapped[str] = mapped_column(String(16))
    provider_id: Mapped[str] = mapped_column(String(255), default="")
    token_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # its one-time join token
    launched_at: Mapped[datetime] = mapped_column(UTC_DT)
    joined_at: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)
    idle_since: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)
    # when its provider takes it back (a spot interruption notice's deadline)
    notice_at: Mapped[datetime | None] = mapped_column(UTC_DT, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    job_ids: Mapped[list[str]] = mapped_column(JSON, default=list)  # the jobs it was started for

    __table_args__ = (Index("ix_pool_nodes_pool_state", "pool", "state"),)


class PoolEventRow(Base):
    """What the autoscaler decided and saw, with its reason (launch, joined, release, failed ...). 0025."""

    __tablename__ = "pool_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    pool: Mapped[str] = mapped_column(String(64))
    node: Mapped[str] = mapped_column(String(255), default="")
    at: Mapped[datetime] = mapped_column(UTC_DT)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (Index("ix_pool_events_pool_id", "pool", "id"),)


class BudgetRow(Base):
    """A tenant's budget per period (core/budgets.py). Migration 0025."""

    __tablename__ = "budgets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    period: Mapped[str] = mapped_column(String(16))
    gpu_hours: Mapped[float | None] = mapped_column(Float, nullable=True)
    money: Mapped[float | None] = mapped_column(Float, nullable=True)
    policy: Mapped[str] = mapped_column(String(16))
    updated_at: Mapped[datetime] = mapped_column(UTC_DT)

    __table_args__ = (UniqueConstraint("tenant_id", name="uq_budgets_tenant"),)


class ChangeCounterRow(Base):
    """Counters the database bumps itself (triggers) when a set of rows changes, so that a reader can keep what it
        read until its counter moves. `node_shapes`: nodes or GPUs registered, removed, or changed in what a job could
        ever ask of them (host CPUs and memory, labels, GPU models and memory). Migration 0029. `submit_rules`: queues,
        quotas or cloud pools added, changed or removed. Migration 0031. `nodes`: anything the node list shows but a node's
    state and last heartbeat. Migration 0032."""

    __tablename__ = "change_counters"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0)


NODE_SHAPES = "node_shapes"
NODES = "nodes"
SUBMIT_RULES = "submit_rules"

"""One settings object, built at start and passed down. Precedence: flag > CORRAL_* env > default."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from corral.api.paths import default_data_dir

if TYPE_CHECKING:
    from corral.core.staging import StagingRules
    from corral.core.unix_identity import UidRange
    from corral.server.services.jobs import SubmitRules

DEFAULT_PORT = 8600


class Settings(BaseSettings):
    """Every field is also the environment variable CORRAL_<NAME> (documented in docs/settings.md)."""

    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address the server listens on.")
    port: int = Field(DEFAULT_PORT, ge=0, le=65535, description="Port the server listens on.")
    data_dir: Path = Field(
        default_factory=default_data_dir, description="Where the database, logs and credentials live."
    )
    database_url: str = Field(
        "", description="SQLAlchemy URL; empty means SQLite in the data dir. postgresql:// works too."
    )
    gpus: str = Field("auto", description="GPU backend of the local agent: auto, nvml, none, or sim:8xH100-80GB.")
    node_name: str = Field(default_factory=socket.gethostname, description="Name of the local agent's node.")
    policy: str = Field("corral", description="Placement policy the scheduler uses (see docs/scheduling.md).")
    queueing: str = Field(
        "predict", description="Queueing policy: predict (default), corral, fifo, sjf or las (docs/queueing.md)."
    )
    schedule_interval_s: float = Field(2.0, gt=0, description="Longest pause between scheduling passes.")
    schedule_recheck_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="A quiet plan (nothing started, preempted or nominated) over unchanged work is kept at most this "
        "long before it is computed again (0: every pass computes).",
    )
    node_lost_after_s: float = Field(60.0, gt=0, description="Heartbeat silence after which a node is LOST.")
    long_poll_s: float = Field(
        20.0,
        gt=0,
        le=60,
        description="Longest the server holds an agent's sync open waiting "
        "for work (the agent's heartbeat interval at most).",
    )
    agent_threads: int = Field(
        8,
        ge=1,
        le=200,
        description="Threads agents' syncs and telemetry batches run their work on at once, a pool of their own (joins "
        "and identity checks keep the port's 40): under load a fleet's work queues for them instead of 40 threads "
        "taking turns on one interpreter.",
    )
    switch_interval_ms: float | None = Field(
        None,
        ge=0.05,
        le=100.0,
        description="How long a busy thread of a server process holds the interpreter before one waiting for it takes "
        "its turn (Python's switch interval). Unset: 0.5 ms in each process of a server with CORRAL_WORKERS > 1, "
        "CPython's 5 ms in a server of one process.",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Server processes `corral server` runs on this machine, sharing its ports and the database "
        "(PostgreSQL): each is a replica (docs/operations.md), so a server uses more than one core.",
    )
    worker_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="With CORRAL_WORKERS > 1: how much lower the CPU priority (nice) of the processes serving the "
        "agents' port is than that of the one answering people. Agents report every few seconds and wait well; "
        "people's reads should not wait behind a fleet's reports for a core.",
    )
    idempotency_key_ttl_s: float = Field(
        86400.0, ge=86400, le=30 * 86400.0, description="How long a job submission's Idempotency-Key is remembered."
    )
    max_active_jobs_per_tenant: int = Field(
        50_000,
        ge=1,
        le=10_000_000,
        description="Pending and running jobs one tenant may have; a submission beyond it is refused (429).",
    )
    cancel_grace_s: float = Field(10.0, ge=0, description="Seconds between SIGTERM and SIGKILL on cancel.")
    retry_backoff_s: float = Field(1.0, ge=0, description="First retry backoff of a job whose GPU or node failed.")
    metrics_interval_s: float = Field(5.0, ge=0, description="The local agent's telemetry interval (0: off).")
    fatal_xids: str = Field("48,63,64,74,79,92,94,95", description="Xid codes that take a GPU out of the pool.")
    gpu_temperature_limit_c: float = Field(90.0, gt=0, lt=200, description="A GPU this hot is taken out.")
    health_recovery_checks: int = Field(3, ge=1, description="Clean checks before a failed GPU returns.")
    alert_interval_s: float = Field(5.0, gt=0, description="Seconds between alert evaluations.")
    alert_webhooks: str = Field("", description="Comma-separated webhook URLs that receive alert notifications.")
    smtp_host: str = Field("", description="SMTP server for alert e-mail (empty: no e-mail).")
    smtp_port: int = Field(25, ge=1, le=65535, description="SMTP port.")
    alert_email_from: str = Field("corral@localhost", description="Sender of alert e-mail.")
    alert_email_to: str = Field("", description="Comma-separated recipients of alert e-mail.")
    alert_webhooks_file: str = Field(
        "",
        description="File with more webhook URLs, one a line (keeps URLs that "
        "carry tokens out of the environment and `ps`).",
    )
    smtp_tls: str = Field("none", pattern="^(none|starttls|ssl)$", description="SMTP transport: none, starttls or ssl.")
    smtp_username: str = Field("", description="SMTP login user (empty: no login).")
    smtp_password_file: str = Field("", description="File holding the SMTP password (never the password itself).")
    secrets_key_file: Path | None = Field(
        None,
        description="The key file (0600) that seals tenant secrets and stored credentials; keep it apart from "
        "the database and its backups (default: secrets.key in the data dir, created on first start).",
    )
    job_ui_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Port that serves jobs' own web UIs on an origin apart from the portal (default: the API port "
        "+ 1; 0: on the API port, where a job's page could use the session of whoever opens it).",
    )
    job_ui_url: str = Field(
        "",
        description="Public base URL of the job-UI port behind a reverse proxy, e.g. "
        "https://jobs.corral.example (default: the portal's host, job-UI port).",
    )
    job_ports: str = Field(
        "20000-29499",
        description="Ports (LOW-HIGH) Corral assigns to jobs' web UIs, one per "
        "running job of a node (CORRAL_JOB_PORT); keep them free of "
        "other services on every node.",
    )
    job_log_max_mb: int = Field(
        1024,
        ge=1,
        le=1_048_576,
        description="Largest log (MB, 2**20 bytes) of one run of a job (an attempt's rank): the node keeps and the "
        "server stores its output up to this, and drops the rest with a notice in the log.",
    )
    agent_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Port of the agents' mutual-TLS listener (join, register, sync, telemetry, logs; default: the "
        "API port + 2).",
    )
    gateway_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Port of the services' gateway (/services/NAME/...; default: the API port + 3; 0: on the API "
        "port).",
    )
    gateway_url: str = Field(
        "",
        description="Public base URL of the gateway behind a reverse proxy, e.g. https://svc.corral.example "
        "(default: the portal's host, gateway port).",
    )
    owned_gpu_price_per_hour: float = Field(
        0.0,
        ge=0,
        le=10_000,
        description="What an hour of one owned GPU (a node of the static pool) costs, in the currency budgets are "
        "kept in: spend and budgets count owned and cloud GPUs alike (docs/elastic.md).",
    )
    service_activation_timeout_s: float = Field(
        120.0,
        ge=1,
        le=3600,
        description="How long the gateway holds a request for a service scaled to zero while a replica starts.",
    )
    node_cert_ttl_s: float = Field(
        7 * 86400.0, ge=10, le=366 * 86400.0, description="Lifetime of a node certificate; agents renew at 2/3 of it."
    )
    tls: str = Field(
        "auto",
        pattern="^(auto|on|off)$",
        description="HTTPS for the API, portal and job-UI ports: auto (on when bound beyond loopback or "
        "CORRAL_TLS_CERT is set), on, or off.",
    )
    tls_cert: str = Field(
        "", description="The operator's certificate chain (PEM) for HTTPS (default: one from the cluster CA)."
    )
    tls_key: str = Field("", description="The private key (PEM) of CORRAL_TLS_CERT.")
    tls_names: str = Field(
        "",
        description="Extra comma-separated DNS names or IPs for the CA-issued server "
        "certificate (the host name, localhost and loopback are always in it).",
    )
    metrics_raw_retention_s: float = Field(86400.0, ge=60, description="How long raw samples are kept.")
    metrics_rollup_retention_s: float = Field(30 * 86400.0, ge=60, description="How long 1-minute rollups are kept.")
    metrics_public: bool = Field(
        False, description="Serve /metrics without a token (default: a metrics token or an admin's token is needed)."
    )
    login_failures_allowed: int = Field(
        5,
        ge=1,
        le=1000,
        description="Failed logins of one user name before it backs off (an address: 4 times as many).",
    )
    login_lockout_max_s: float = Field(900.0, ge=1, le=86400, description="Longest back-off after failed logins.")
    password_hash_workers: int = Field(1, ge=1, le=64, description="Password hashes (argon2) computed at once.")
    password_hash_queue: int = Field(
        8, ge=0, le=1024, description="Password checks that may wait for a worker; more are refused at once (429)."
    )
    job_uids: str = Field(
        "200000-265535",
        description="UIDs (and GIDs) jobs run as: a user without an admin-set "
        "mapping runs as START + its user id (`corral users unix`).",
    )
    allowed_mounts: str = Field(
        "",
        description="Comma-separated host directories under which container jobs may mount paths "
        "(`--mount SRC:DST`); empty: no host mounts at all.",
    )
    stage_paths: str = Field(
        "",
        description="Comma-separated shared-storage directories (the same path on every node) that jobs may stage "
        "data from and to (`submit --stage-in /path:DST`); `{tenant}` stands for the job's tenant name, `:ro` after "
        "one allows input only: e.g. /srv/shared/{tenant},/srv/datasets:ro. Empty: S3 only.",
    )
    stage_s3_endpoints: str = Field(
        "",
        description="Comma-separated S3-compatible endpoint URLs that tenants' s3 secrets may name (MinIO, Ceph); "
        "AWS's own is always allowed. Empty: AWS only.",
    )
    # ---- directory login (docs/directory-login.md) ----
    ldap_url: str = Field(
        "",
        description="LDAP server for password logins of non-local users: ldap://host:389 or "
        "ldaps://host:636 (empty: no LDAP).",
    )
    ldap_start_tls: bool = Field(False, description="Upgrade an ldap:// connection with StartTLS before binding.")
    ldap_ca_file: str = Field(
        "", description="CA certificates (PEM) that verify the LDAP server (default: the system's)."
    )
    ldap_user_dn_template: str = Field(
        "", description="Bind DN of a user, e.g. uid={username},ou=people,dc=example,dc=org."
    )
    ldap_user_search_base: str = Field("", description="Where to search for a user instead of the DN template.")
    ldap_user_filter: str = Field("(uid={username})", description="Filter that finds a user under the search base.")
    ldap_bind_dn: str = Field("", description="Service account that searches (empty: anonymous search).")
    ldap_bind_password_file: str = Field("", description="File holding the service account's password.")
    ldap_group_search_base: str = Field("", description="Where groups (groupOfNames) are (empty: read memberOf).")
    ldap_group_filter: str = Field(
        "(|(member={user_dn})(uniqueMember={user_dn}))",
        description="Filter that finds a user's groups under the group search base.",
    )
    ldap_group_name_attr: str = Field("cn", description="Attribute that names a group for the mappings.")
    ldap_timeout_s: float = Field(5.0, gt=0, le=120, description="Connect and reply timeout of LDAP calls.")
    oidc_issuer: str = Field("", description="OpenID Connect issuer URL for portal logins (empty: no OIDC).")
    oidc_client_id: str = Field("", description="Client id registered at the OpenID Connect provider.")
    oidc_client_secret_file: str = Field("", description="File holding the OpenID Connect client secret.")
    oidc_scopes: str = Field("openid profile email groups", description="Scopes asked for at OpenID Connect login.")
    oidc_groups_claim: str = Field("groups", description="ID token claim that lists the user's groups.")
    oidc_username_claim: str = Field("preferred_username", description="ID token claim that names the user.")
    oidc_redirect_url: str = Field(
        "", description="Callback URL registered at the provider (default: <portal URL>/web/oidc/callback)."
    )
    oidc_ca_file: str = Field("", description="CA certificates (PEM) that verify the provider (default: the system's).")

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return Path(v).expanduser().resolve()

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        from corral.server.settings_checks import find_contradiction

        if problem := find_contradiction(self):
            raise ValueError(problem)
        return self

    @field_validator("job_ports", "job_uids")
    @classmethod
    def _check_range(cls, v: str, info: ValidationInfo) -> str:
        """A range setting parses with its core parser; its problem becomes the setting's error."""
        from corral.core.errors import ValidationError
        from corral.core.unix_identity import parse_uid_range
        from corral.core.webports import parse_port_range

        parse = parse_port_range if info.field_name == "job_ports" else parse_uid_range
        try:
            parse(v)
        except ValidationError as e:
            raise ValueError(e.problem) from e
        return v

    @property
    def job_port_salt(self) -> int:
        """Where this cluster starts looking in CORRAL_JOB_PORTS: stable for its data dir, another for another."""
        import hashlib

        return int.from_bytes(hashlib.sha256(str(self.data_dir).encode()).digest()[:4], "big")

    @field_validator("allowed_mounts")
    @classmethod
    def _check_allowed_mounts(cls, v: str) -> str:
        from corral.core.containers import check_allowed_mounts_setting

        return check_allowed_mounts_setting(v)

    @field_validator("stage_paths")
    @classmethod
    def _check_stage_paths(cls, v: str) -> str:
        from corral.core.errors import ValidationError
        from corral.core.staging import parse_shared_roots

        try:
            parse_shared_roots(v, "tenant")
        except ValidationError as e:
            raise ValueError(e.problem) from e
        return v

    @property
    def staging_rules(self) -> StagingRules:
        from corral.core.staging import StagingRules

        endpoints = tuple(e.strip().rstrip("/") for e in self.stage_s3_endpoints.split(",") if e.strip())
        return StagingRules(shared_paths=self.stage_paths, s3_endpoints=endpoints)

    @property
    def submit_rules(self) -> SubmitRules:
        """What these settings allow in a job (submissions, schedules' firings, services' replicas alike)."""
        from corral.server.services.jobs import SubmitRules

        return SubmitRules(allowed_mounts=self.allowed_mount_prefixes, staging=self.staging_rules)

    @property
    def allowed_mount_prefixes(self) -> tuple[str, ...]:
        from corral.core.containers import parse_allowed_mounts

        return parse_allowed_mounts(self.allowed_mounts)

    @property
    def job_port_range(self) -> range:
        from corral.core.webports import parse_port_range

        return parse_port_range(self.job_ports)

    @property
    def job_log_max_bytes(self) -> int:
        """CORRAL_JOB_LOG_MAX_MB in bytes: the most of one run's log a node keeps and the server stores."""
        return self.job_log_max_mb << 20

    @property
    def job_uid_range(self) -> UidRange:
        from corral.core.unix_identity import parse_uid_range

        return parse_uid_range(self.job_uids)

    @property
    def fatal_xid_set(self) -> frozenset[int]:
        try:
            return frozenset(int(x) for x in self.fatal_xids.split(",") if x.strip())
        except ValueError as e:
            from corral.core.errors import ValidationError

            raise ValidationError("fatal_xids", f"expected comma-separated Xid codes, got {self.fatal_xids!r}") from e

    @property
    def effective_secrets_key_file(self) -> Path:
        return (
            Path(self.secrets_key_file).expanduser().resolve()
            if self.secrets_key_file
            else self.data_dir / "secrets.key"
        )

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'corral.db'}"

    @property
    def effective_job_ui_port(self) -> int:
        """The job-UI port, or 0 when job UIs share the API's origin."""
        if self.job_ui_port is not None:
            return self.job_ui_port
        return self.port + 1 if 0 < self.port < 65535 else 0

    @property
    def effective_gateway_port(self) -> int:
        """The gateway's port, or 0 when it shares the API port."""
        if self.gateway_port is not None:
            return self.gateway_port
        return self.port + 3 if 0 < self.port < 65533 else 0

    @property
    def effective_agent_port(self) -> int:
        if self.agent_port is not None:
            return self.agent_port
        return self.port + 2 if 0 < self.port < 65534 else 0

    @property
    def serves_https(self) -> bool:
        """HTTPS on the people's ports: `on`, or `auto` with an operator certificate or a non-loopback bind."""
        if self.tls != "auto":
            return self.tls == "on"
        return bool(self.tls_cert) or self.host not in ("127.0.0.1", "localhost", "::1")

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"{'https' if self.serves_https else 'http'}://{host}:{self.port}"

    @property
    def agent_url(self) -> str:
        """Where agents join and sync (always TLS)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"https://{host}:{self.effective_agent_port}"


def build_settings(**flags: Any) -> Settings:
    """Settings from flags (None = not given) over the environment."""
    return Settings(**{k: v for k, v in flags.items() if v is not None})

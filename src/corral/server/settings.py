"""One settings object, built at start and passed down. Precedence: flag > CORRAL_* env > default."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from corral.api.paths import default_data_dir

DEFAULT_PORT = 8600


class Settings(BaseSettings):
    """Every field is also the environment variable CORRAL_<NAME> (documented in docs/settings.md)."""

    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address the server listens on.")
    port: int = Field(DEFAULT_PORT, ge=0, le=65535, description="Port the server listens on.")
    data_dir: Path = Field(default_factory=default_data_dir, description="Where the database, logs and credentials live.")
    database_url: str = Field("", description="SQLAlchemy URL; empty means SQLite in the data dir. postgresql:// works too.")
    gpus: str = Field("auto", description="GPU backend of the local agent: auto, nvml, none, or sim:8xH100-80GB.")
    node_name: str = Field(default_factory=socket.gethostname, description="Name of the local agent's node.")
    policy: str = Field("corral", description="Placement policy the scheduler uses (see docs/scheduling.md).")
    queueing: str = Field("corral", description="Queueing policy: corral (default), fifo, sjf or las.")
    schedule_interval_s: float = Field(2.0, gt=0, description="Longest pause between scheduling passes.")
    node_lost_after_s: float = Field(60.0, gt=0, description="Heartbeat silence after which a node is LOST.")
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
    job_ui_port: int | None = Field(
        None, ge=0, le=65535,
        description="Port that serves jobs' own web UIs on an origin apart from the portal (default: the API port "
                    "+ 1; 0: on the API port, where a job's page could use the session of whoever opens it).")
    job_ui_url: str = Field("", description="Public base URL of the job-UI port behind a reverse proxy, e.g. "
                                            "https://jobs.corral.example (default: the portal's host, job-UI port).")
    metrics_raw_retention_s: float = Field(86400.0, ge=60, description="How long raw samples are kept.")
    metrics_rollup_retention_s: float = Field(30 * 86400.0, ge=60, description="How long 1-minute rollups are kept.")

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return Path(v).expanduser().resolve()

    @property
    def fatal_xid_set(self) -> frozenset[int]:
        try:
            return frozenset(int(x) for x in self.fatal_xids.split(",") if x.strip())
        except ValueError as e:
            from corral.core.errors import ValidationError

            raise ValidationError("fatal_xids", f"expected comma-separated Xid codes, got {self.fatal_xids!r}") from e

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
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"


def build_settings(**flags: Any) -> Settings:
    """Settings from flags (None = not given) over the environment."""
    return Settings(**{k: v for k, v in flags.items() if v is not None})

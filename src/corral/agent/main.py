"""Build and run an agent from its settings: GPU backend, process executor, SDK client."""

from __future__ import annotations

import getpass
import logging
import os
import socket
import ssl
import threading
import time
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from corral.agent.gpu import load_gpu_backend
from corral.agent.identity import CertRenewer, NodeTlsFiles, join, mtls_context, usable_identity
from corral.agent.journal import Journal
from corral.agent.runner import Agent
from corral.agent.runtimes import DEFAULT_DOCKER_HOST, load_container_executor
from corral.agent.staging import STAGE_DIRS, StageEngine
from corral.api.paths import default_data_dir, secure_data_dir
from corral.executors.jobhome import CHECKPOINTS
from corral.executors.process import ProcessExecutor
from corral.executors.router import RuntimeRouter
from corral.sdk.client import AgentClient, CorralConnectionError
from corral.sdk.endpoints import parse_urls, split_urls

log = logging.getLogger("corral.agent")


class AgentSettings(BaseSettings):
    """Every field is also the environment variable CORRAL_<NAME> (documented in docs/settings.md)."""

    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    server_url: str = Field(
        "https://127.0.0.1:8602",
        description="The server's agent port (mutual TLS), as `corral up` prints it; `corral agent --join URL`. "
        "Several replicas' agent ports, comma-separated: the agent fails over among them.",
    )
    join_token_file: str = Field(
        "",
        description="File holding a join token (`-`: stdin), needed only until the node "
        "has its certificate (`corral tokens join create`).",
    )
    gpus: str = Field("auto", description="GPU backend: auto, nvml, none, or a simulated spec like sim:8xH100-80GB.")
    node_name: str = Field(default_factory=socket.gethostname, description="Name this node registers under.")
    data_dir: Path = Field(
        default_factory=default_data_dir, description="Agent state: job dirs and logs (under agent/)."
    )
    poll_wait_s: float = Field(20.0, gt=0, le=60, description="Long-poll length of the agent's sync with the server.")
    metrics_interval_s: float = Field(5.0, ge=0, description="Seconds between telemetry batches (0: no telemetry).")
    advertise_address: str = Field(
        "",
        description="Host or IP the server reaches this node at (jobs' web UIs); "
        "default: 127.0.0.1 for a server on loopback, else the hostname.",
    )
    jobs_dir: Path | None = Field(
        None,
        description="Where jobs' own dirs (HOME, default workdir, checkpoints) live, "
        "under <jobs_dir>/<node>; outside the data dir, and reachable by "
        "the users jobs run as (default: /var/lib/corral-jobs as root, "
        "else jobs/ in the data dir).",
    )

    docker_host: str = Field(
        DEFAULT_DOCKER_HOST,
        description="The container engine's API (Docker, or Podman's Docker-compatible socket): with one that "
        "answers, the node runs jobs with an image; empty or none: processes only.",
    )
    allowed_mounts: str = Field(
        "",
        description="Comma-separated host directories under which container jobs may mount paths (checked "
        "again here with symbolic links resolved); empty: no host mounts.",
    )

    image_cache_gb: str = Field(
        "",
        description="Container images this node keeps, in GB (decimals allowed): beyond it the least recently "
        "used image Corral pulled goes, never one a container uses; default 100, 0 or none: no limit.",
    )

    stage_cache_gb: float = Field(
        100.0,
        ge=0,
        le=1_000_000,
        description="Staged input this node keeps for later jobs, in GB: beyond it the least recently used files "
        "go after each staging, never one a job still uses.",
    )

    @property
    def effective_address(self) -> str:
        if self.advertise_address:
            return self.advertise_address
        from urllib.parse import urlparse

        hosts = {urlparse(u).hostname or "" for u in split_urls(self.server_url)}
        return "127.0.0.1" if hosts <= {"127.0.0.1", "localhost", "::1"} else socket.gethostname()

    @field_validator("server_url")
    @classmethod
    def _check_server_url(cls, v: str) -> str:
        """One URL, or several replicas' separated by commas; each an http(s) URL with a host."""
        urls = parse_urls(v)
        return v if len(urls) == 1 else ",".join(urls)

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return Path(v).expanduser().resolve()

    @field_validator("allowed_mounts")
    @classmethod
    def _check_allowed_mounts(cls, v: str) -> str:
        from corral.core.containers import check_allowed_mounts_setting

        return check_allowed_mounts_setting(v)

    @field_validator("image_cache_gb")
    @classmethod
    def _check_image_cache_gb(cls, v: str) -> str:
        from corral.executors.image_cache import parse_cache_gb

        parse_cache_gb(v)
        return v

    @property
    def agent_dir(self) -> Path:
        return self.data_dir / "agent" / self.node_name

    @property
    def work_root(self) -> Path:
        """This node's jobs' dirs: beside the 0700 data dir when jobs run as other users, never inside it."""
        if self.jobs_dir is not None:
            base = Path(self.jobs_dir).expanduser().resolve()
        else:
            base = Path("/var/lib/corral-jobs") if os.geteuid() == 0 else self.data_dir / "jobs"
        return base / self.node_name

    @property
    def tls_files(self) -> NodeTlsFiles:
        return NodeTlsFiles(self.agent_dir / "tls")


def ensure_identity(settings: AgentSettings, token: str | None, retry_for_s: float = 30.0) -> NodeTlsFiles:
    """The node's certificate: the one kept in the agent dir while valid (a restart needs no token), else a
    join with `token`. Raises JoinNeeded when there is neither, CorralSDKError when the join fails."""
    files = settings.tls_files
    why = usable_identity(files, settings.node_name)
    if why is None:
        return files
    if not token:
        raise JoinNeeded(
            f"node {settings.node_name}: {why}; join with a token: corral agent --join URL "
            "--token-file FILE (or CORRAL_JOIN_TOKEN_FILE)"
        )
    deadline = time.monotonic() + retry_for_s
    while True:
        try:
            join(files, settings.server_url, token, settings.node_name)
            return files
        except CorralConnectionError as e:
            if time.monotonic() > deadline:
                raise
            log.warning("join: %s; retrying", e)
            time.sleep(1.0)


class JoinNeeded(Exception):
    """No usable certificate and no join token: str() says what to run."""


def build_agent(settings: AgentSettings) -> tuple[Agent, AgentClient, RuntimeRouter]:
    """Wire an Agent for this node (its certificate must be in place: `ensure_identity`). Raises
    ValidationError/GpuBackendError for a bad `gpus` setting."""
    backend = load_gpu_backend(settings.gpus, settings.node_name)
    secure_data_dir(settings.data_dir, skip=(settings.work_root,))
    process = ProcessExecutor(settings.agent_dir / "jobs", work_root=settings.work_root)
    containers = load_container_executor(
        settings.docker_host,
        settings.agent_dir / "containers",
        settings.node_name,
        settings.allowed_mounts,
        image_cache_gb=settings.image_cache_gb,
        nvidia=backend.name == "nvml",  # real GPUs: the container gets them by device request; simulated: env only
    )
    executor = RuntimeRouter(process, containers)
    if executor.isolation != "users":
        log.warning(
            "SINGLE-USER MODE: the agent is not root, so every job runs as %s and can read everything that "
            "user can (the agent's data dir and its credentials too); run the agent as root to run each job "
            "as its user's own Unix identity",
            getpass.getuser(),
        )
    stager = StageEngine(
        settings.agent_dir / "stage",
        process.work_root / STAGE_DIRS,
        int(settings.stage_cache_gb * 1e9),
        shared_dirs=executor.isolation == "users",
    )
    ctx = mtls_context(settings.tls_files)
    client = AgentClient(settings.server_url, "", verify=ctx)
    agent = Agent(
        client,
        settings.node_name,
        backend,
        executor,
        settings.agent_dir / "logs",
        poll_wait_s=settings.poll_wait_s,
        metrics_interval_s=settings.metrics_interval_s,
        checkpoint_dir=process.work_root / CHECKPOINTS,
        address=settings.effective_address,
        runtimes=executor.runtimes,
        image_digests=executor.image_digests,
        phases=executor.phases,
        cached_images=executor.cached_images,
        journal=Journal(settings.agent_dir),
        stager=stager,
    )
    process.set_exit_listener(agent.wake)  # a job's end is reported at once, not at the watch loop's next look
    return agent, client, executor


class AgentThread:
    """An agent running on a background thread (used by `corral up`)."""

    def __init__(self, settings: AgentSettings) -> None:
        self.agent, self._client, self._executor = build_agent(settings)
        verify = self._client.verify
        assert isinstance(verify, ssl.SSLContext)
        self.renewer = CertRenewer(settings.tls_files, self._client, verify, settings.node_name)
        self._thread = threading.Thread(target=self._run, name="corral-agent", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.agent.run()
        except BaseException as e:  # reported by the owner; the thread must not die silently
            self.error = e
            log.exception("agent stopped with an error")

    def start(self) -> None:
        self.renewer.start()
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self.agent.stop()
        self.renewer.stop()
        self._thread.join(timeout=timeout_s)
        self._executor.close()
        self._client.close()
        self.agent.backend.close()

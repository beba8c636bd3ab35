"""Build and run an agent from its settings: GPU backend, process executor, SDK client."""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from corral.agent.gpu import load_gpu_backend
from corral.agent.runner import Agent
from corral.api.paths import default_data_dir
from corral.executors.process import ProcessExecutor
from corral.sdk.client import AgentClient

log = logging.getLogger("corral.agent")


class AgentSettings(BaseSettings):
    """Every field is also the environment variable CORRAL_<NAME> (documented in docs/settings.md)."""

    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    server_url: str = Field("http://127.0.0.1:8600", description="URL of the Corral server the agent joins.")
    join_token: str = Field("", description="Agent join token (the server's data dir holds it in `join-token`).")
    gpus: str = Field("auto", description="GPU backend: auto, nvml, none, or a simulated spec like sim:8xH100-80GB.")
    node_name: str = Field(default_factory=socket.gethostname, description="Name this node registers under.")
    data_dir: Path = Field(default_factory=default_data_dir, description="Agent state: job dirs and logs (under agent/).")
    poll_wait_s: float = Field(20.0, gt=0, le=60, description="Long-poll length of the agent's sync with the server.")
    metrics_interval_s: float = Field(5.0, ge=0, description="Seconds between telemetry batches (0: no telemetry).")
    advertise_address: str = Field("", description="Host or IP the server reaches this node at (jobs' web UIs); "
                                                   "default: 127.0.0.1 for a server on loopback, else the hostname.")

    @property
    def effective_address(self) -> str:
        if self.advertise_address:
            return self.advertise_address
        from urllib.parse import urlparse

        host = urlparse(self.server_url).hostname or ""
        return "127.0.0.1" if host in ("127.0.0.1", "localhost", "::1") else socket.gethostname()

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return Path(v).expanduser().resolve()

    @property
    def agent_dir(self) -> Path:
        return self.data_dir / "agent" / self.node_name


def build_agent(settings: AgentSettings) -> tuple[Agent, AgentClient, ProcessExecutor]:
    """Wire an Agent for this node. Raises ValidationError/GpuBackendError for a bad `gpus` setting."""
    backend = load_gpu_backend(settings.gpus, settings.node_name)
    executor = ProcessExecutor(settings.agent_dir / "jobs")
    client = AgentClient(settings.server_url, settings.join_token)
    agent = Agent(client, settings.node_name, backend, executor, settings.agent_dir / "logs",
                  poll_wait_s=settings.poll_wait_s, metrics_interval_s=settings.metrics_interval_s,
                  checkpoint_dir=settings.agent_dir / "checkpoints", address=settings.effective_address)
    return agent, client, executor


class AgentThread:
    """An agent running on a background thread (used by `corral up`)."""

    def __init__(self, settings: AgentSettings) -> None:
        self.agent, self._client, self._executor = build_agent(settings)
        self._thread = threading.Thread(target=self._run, name="corral-agent", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.agent.run()
        except BaseException as e:  # reported by the owner; the thread must not die silently
            self.error = e
            log.exception("agent stopped with an error")

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self.agent.stop()
        self._thread.join(timeout=timeout_s)
        self._executor.close()
        self._client.close()
        self.agent.backend.close()

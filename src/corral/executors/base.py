"""The Executor protocol: how the agent starts, watches and stops jobs on its node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from corral.core.containers import ContainerSpec
from corral.core.unix_identity import JobIdentity

# Exit codes an executor reports for jobs that did not run to their own end, shell style.
EXIT_CANNOT_EXECUTE = 126
EXIT_COMMAND_NOT_FOUND = 127
EXIT_LOST = 255


@dataclass(frozen=True, slots=True)
class RegistryLogin:
    """The login a container job's image is pulled with (a tenant's registry secret, opened by the server)."""

    host: str
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    job_id: str
    command: tuple[str, ...]
    env: Mapping[str, str]  # user env; the executor adds CUDA_VISIBLE_DEVICES etc.
    workdir: str | None
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    log_path: Path  # stdout+stderr both appended here
    identity: JobIdentity | None = None  # whom the job runs as; required when the executor switches users
    checkpoint_dir: Path | None = None  # kept across attempts; created owned by the job's identity
    # VAR -> value of the job's tenant secrets: written only to a 0600 file the shim reads and deletes at once
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    container: ContainerSpec | None = None  # run in a container of this image (ContainerExecutor); None: a process
    registry_login: RegistryLogin | None = field(default=None, repr=False)  # pulls the container's image
    cpu_milli: int = 0  # the job's requests: a container's limits (0: none)
    memory_mib: int = 0
    log_max_bytes: int = 0  # the job's output kept in its log at most; the rest is dropped with a notice (0: no limit)
    web_port: int | None = None  # the node port Corral assigned to the job's web UI (a container publishes it)
    stage_dir: Path | None = None  # its staged input and output (CORRAL_STAGE_DIR): made by the agent, the job's own


@dataclass(frozen=True, slots=True)
class PublishedPort:
    """A running container's web port as its engine reports it: the node port it publishes, and what the engine's
    own forwarder of that port names (the container, its addresses on its network, the port inside)."""

    host_port: int
    container_port: int
    container_id: str
    container_ips: tuple[str, ...] = ()
    pid: int = 0  # its main process as the node sees it (its network namespace shows what listens inside); 0: unknown


@dataclass(frozen=True, slots=True)
class ExitRecord:
    job_id: str
    exit_code: int  # 128+signal for a signal death, like a shell
    reason: str = ""  # e.g. "command not found", "lost: shim died"


class Executor(Protocol):
    """Runs jobs on this node. Failures of jobs are events (ExitRecords), never exceptions.

    Implementations: ProcessExecutor (plain processes), ContainerExecutor (containers of the job's image) and
    RuntimeRouter (each job to the one of those its spec asks for). All methods are thread-safe and non-blocking.
    `isolation` is "users" when every job runs under its own identity, "single-user" when jobs run as the
    executor's own user (it cannot switch users).
    """

    @property
    def isolation(self) -> str: ...

    def launch(self, spec: LaunchSpec) -> None:
        """Start the job and return without waiting for it.

        Idempotent per job_id: a second call for a known id (running or finished, not yet acked) is a
        no-op. A command that cannot start is not an exception: it becomes an ExitRecord (127 command
        not found, 126 not executable or refused, 1 workdir missing, with a reason). In "users" isolation a
        spec without an identity, or with uid/gid 0, is refused (126). The job gets a clean environment
        (its env, Corral's per-job variables, PATH/HOME/USER/LOGNAME/LANG), never the executor's. Raises
        ValidationError only for a malformed spec (e.g. a job_id that is not a safe file name).
        """
        ...

    def running(self) -> list[str]:
        """Ids of jobs alive now, including those recovered from a previous agent process."""
        ...

    def leader_pid(self, job_id: str) -> int | None:
        """The pid of the process that leads a running job's session and process group (its shim), or None when
        the job is not running here. The job proxy's ownership check starts from it. Does not block."""
        ...

    def published_port(self, job_id: str) -> PublishedPort | None:
        """The node port the engine publishes for this run's container while the container runs, as the engine says
        now; None for a process job, a run that is not running here, or a container that publishes nothing. The
        job proxy's ownership check of a container run starts from it. Asks the engine (a local call that may take
        a moment: called from the agent's web-port watch, never its sync); engine errors are None, not raised."""
        ...

    def collect_exits(self) -> list[ExitRecord]:
        """Finished jobs not yet acknowledged. Repeats the same records on every call until ack()."""
        ...

    def ack(self, job_id: str) -> None:
        """Forget a finished job once its exit was reported upstream. No-op for unknown or running ids."""
        ...

    def cancel(self, job_id: str, grace_s: float) -> None:
        """SIGTERM to the job's process group now, SIGKILL after grace_s. Returns at once.

        No-op for unknown or finished ids. The job's exit then arrives through collect_exits().
        """
        ...

"""The cluster protocol: what the server may assume of an existing cluster it fronts (a Slurm cluster, a Kubernetes
cluster) as one of its pools. Corral decides *when* a job runs (quotas, fair share, budgets, priorities); the
cluster decides *where* on its nodes and starts it. server/background/clusters.py drives a backend:

- `list_nodes` is the cluster's inventory (GPUs per node and their model): the pool's nodes in `corral nodes`.
- `submit` is idempotent by `Submission.name` (`corral-<job>-<attempt>`): submitting a name that the cluster
  already has (a server that died between the call and its write) returns that job's id and starts nothing more.
- `list_jobs` returns every job of this pool that Corral submitted and the cluster still knows, found by name or
  label, never by what the server remembers: after a restart of either side the server reconciles from it.
- `cancel` is idempotent: an id that has ended or is gone is not an error.
- `read_log` returns the job's output from byte `offset` (at most `limit` bytes): the server appends it to the
  job's log as it grows (`corral logs --follow`).
- A call that fails raises ClusterError with one line why; calls may take seconds and are made outside any store
  transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

# A cluster job's state as Corral reads it (each backend maps its own onto these).
QUEUED = "queued"  # accepted by the cluster, not started (Slurm PENDING; a Pod Pending, image pulls included)
STARTED = "running"  # its command runs
SUCCEEDED = "succeeded"  # ended with exit code 0
FAILED = "failed"  # ended otherwise (exit code != 0, OOM-killed, evicted, node failure, image pull error...)
CANCELLED = "cancelled"  # stopped by a cancel (Corral's or the cluster admin's)
ENDED_STATES = (SUCCEEDED, FAILED, CANCELLED)
STATES = (QUEUED, STARTED, *ENDED_STATES)

NAME_PREFIX = "corral-"  # every job Corral submits is named corral-<job id>-<attempt>


class ClusterError(Exception):
    """The cluster could not do what it was asked (unreachable, refused, bad settings): one line why.
    `transient`: it could not be reached (try again later), as against a refusal of what was asked."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


def job_name(job_id: int, attempt: int) -> str:
    return f"{NAME_PREFIX}{job_id}-{attempt}"


def parse_job_name(name: str) -> tuple[int, int] | None:
    """(job id, attempt) from `corral-<job id>-<attempt>`; None for a name Corral did not give."""
    if not name.startswith(NAME_PREFIX):
        return None
    head, sep, tail = name[len(NAME_PREFIX) :].partition("-")
    if not sep or not head.isdigit() or not tail.isdigit() or len(head) > 18 or len(tail) > 9:
        return None
    return int(head), int(tail)


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """One node of the cluster as it reports it. `state`: `up` (takes work), `down`, or `drain` (takes no new
    work). `gpu_model`: "" when the cluster does not say."""

    name: str
    gpus: int
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    cpus: int = 0
    memory_mib: int = 0
    state: str = "up"
    labels: Mapping[str, str] = field(default_factory=dict)  # partitions (Slurm), node labels (Kubernetes)
    taints: tuple[str, ...] = ()  # "key=value:Effect" (Kubernetes; a job must tolerate them to run there)


@dataclass(frozen=True, slots=True)
class RegistryLogin:
    """The login a Kubernetes pool's Pod pulls its image with (an image pull secret made from a tenant secret)."""

    host: str
    username: str
    password: str


@dataclass(frozen=True, slots=True)
class Submission:
    """One attempt of one Corral job, as the cluster is asked to run it. `gpus` is per node; `nodes` > 1 is a
    multi-node job (Slurm only). `cpus` / `memory_mib` per node, 0: not asked. `tenant`: the tenant's name (the
    Kubernetes namespace is made from it). `labels`: what ties the cluster's job to Corral's."""

    job_id: int
    attempt: int
    tenant: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    gpus: int = 0
    gpu_model: str = ""  # "" any
    nodes: int = 1
    cpus: int = 0
    memory_mib: int = 0
    time_limit_s: int | None = None
    image: str = ""  # a container image (Kubernetes: required)
    registry_login: RegistryLogin | None = None
    tolerations: tuple[str, ...] = ()  # node taints it tolerates ("key", "key=value", "key=value:Effect")
    uid: int | None = None  # the Unix identity it runs as where the cluster lets Corral say
    gid: int | None = None
    since_s: float = 0.0  # when Corral placed this attempt: a cluster job of the same name made before is not it
    uid_mapped: bool = False  # `uid` is the account an admin mapped the user to (not one from Corral's own range)

    @property
    def name(self) -> str:
        return job_name(self.job_id, self.attempt)

    @property
    def labels(self) -> dict[str, str]:
        return {"corral.job-id": str(self.job_id), "corral.attempt": str(self.attempt), "corral.tenant": self.tenant}


@dataclass(frozen=True, slots=True)
class ClusterJob:
    """A job of this pool as the cluster reports it. `detail`: the cluster's own words for what it waits on or
    why it ended ("PENDING (Resources)", "ImagePullBackOff: ...", "OOMKilled"). `placement`: node -> the GPU
    indices the cluster gave it there (empty where the cluster does not say)."""

    external_id: str
    job_id: int
    attempt: int
    state: str
    exit_code: int | None = None
    detail: str = ""
    placement: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    submitted_s: float | None = None  # when the cluster was given it (epoch s; None: not known)
    uid: int | None = None  # the Unix account the cluster runs it as, where it says (Slurm: its user_id)

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


@runtime_checkable
class ClusterBackend(Protocol):
    """One pool's cluster, made for that pool (its settings) by corral.clusters.registry."""

    kind: str  # "slurm" | "kubernetes"

    def list_nodes(self) -> list[ClusterNode]: ...

    def submit(self, sub: Submission) -> str:
        """Start `sub` (idempotent by `sub.name`); returns the cluster's id for it."""
        ...

    def list_jobs(self) -> list[ClusterJob]:
        """Every job Corral submitted to this pool that the cluster still knows (ended ones while it keeps them)."""
        ...

    def cancel(self, external_id: str) -> None:
        """Stop it (idempotent)."""
        ...

    def read_log(self, external_id: str, offset: int, limit: int) -> bytes:
        """Its output from byte `offset`, at most `limit` bytes (b"" when nothing new, or none yet)."""
        ...

    def runs_as(self, uid: int | None) -> int | None:
        """The `ClusterJob.uid` a job of a user whose Unix identity is `uid` carries when this backend submitted
        it (None: the cluster does not say). A job of the right name but another account is not Corral's: another
        user of the cluster made it, and it is neither followed nor stopped."""
        ...

    def close(self) -> None: ...


__all__ = [
    "CANCELLED",
    "ENDED_STATES",
    "FAILED",
    "NAME_PREFIX",
    "QUEUED",
    "STARTED",
    "STATES",
    "SUCCEEDED",
    "ClusterBackend",
    "ClusterError",
    "ClusterJob",
    "ClusterNode",
    "RegistryLogin",
    "Submission",
    "job_name",
    "parse_job_name",
]

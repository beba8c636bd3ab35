"""The queueing core's view of a job: what it asks for, who owns it, where it queues (frozen values)."""

from __future__ import annotations

from dataclasses import dataclass

from corral.core.errors import ValidationError
from corral.core.requests import ResourceRequest, model_matches
from corral.core.resources import FULL_GPU_MILLI


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job waiting for (or holding) GPUs.

    gpus x gpu_milli is asked for on each of `nodes` nodes, all at once (a gang). `model` "" = any model.
    `time_limit_s` is the declared limit (None = unknown); `attained_gpu_s` is the GPU-seconds the job has
    already run (for least-attained-service ordering); `known_duration_s` is only for the `sjf` oracle.
    `nominated_s`: when running jobs were first preempted to make room for it (set by the caller from the
    plan, cleared when it starts); nominated jobs take the GPUs they freed before newcomers do.
    """

    id: str
    tenant: str
    gpus: int = 1
    gpu_milli: int = FULL_GPU_MILLI
    model: str = ""
    nodes: int = 1
    priority: int = 0
    submit_s: float = 0.0
    time_limit_s: float | None = None
    queue: str = ""
    attained_gpu_s: float = 0.0
    known_duration_s: float | None = None
    nominated_s: float | None = None

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.nodes < 1:
            raise ValidationError("gpus", f"job {self.id}: gpus must be >= 0 and nodes >= 1")
        if not 0 < self.gpu_milli <= FULL_GPU_MILLI or (self.gpu_milli < FULL_GPU_MILLI and self.gpus != 1):
            raise ValidationError("gpu_milli", f"job {self.id}: a share (< 1000) needs gpus=1, in 1..1000")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ValidationError("time_limit_s", f"job {self.id}: must be > 0")

    @property
    def need_milli(self) -> int:
        """Total GPU demand in milli-GPUs across all gang members."""
        return self.gpus * self.gpu_milli * self.nodes

    @property
    def queue_name(self) -> str:
        return self.queue or self.tenant

    def matches(self, model: str) -> bool:
        return model_matches(model, (self.model,) if self.model else ())

    def to_request(self) -> ResourceRequest:
        """The per-node request the placement code (scheduler/cycle.py) understands."""
        return ResourceRequest(gpus=self.gpus, gpu_milli=self.gpu_milli, gpu_models=(self.model,) if self.model else ())


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding GPUs since `start_s` on `model`; `exit_s` is set while it is being preempted
    (SIGTERM sent, it still holds its GPUs until then) and `preempted_for` names the waiting job the
    GPUs were freed for (it is nominated: it gets them first, as in Kubernetes)."""

    job: QueuedJob
    start_s: float
    model: str
    exit_s: float | None = None
    preempted_for: str = ""

    @property
    def expected_end_s(self) -> float | None:
        """When the job must be gone: the preemption deadline, else start + time limit, else unknown."""
        if self.exit_s is not None:
            return self.exit_s
        limit = self.job.time_limit_s
        return None if limit is None else self.start_s + limit

    @property
    def terminating(self) -> bool:
        return self.exit_s is not None


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """A named queue: `strict` = a blocked head blocks the jobs behind it (unless backfill lets them
    through without delaying the head); otherwise best-effort (later jobs may go when the head can't)."""

    name: str
    strict: bool = False

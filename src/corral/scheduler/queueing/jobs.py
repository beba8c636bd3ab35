"""The queueing core's view of a job: what it asks for, who owns it, where it queues (frozen values)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from corral.core.errors import ValidationError
from corral.core.requests import ResourceRequest, model_matches
from corral.core.resources import FULL_GPU_MILLI
from corral.scheduler.queueing.prediction import DurationPrediction


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job waiting for (or holding) GPUs.

    gpus x gpu_milli is asked for on each of `nodes` nodes, all at once (a gang). `model` "" = any model.
    `time_limit_s` is the declared limit (None = unknown); `attained_gpu_s` is the GPU-seconds the job has
    already run (for least-attained-service ordering); `known_duration_s` is only for the `sjf` oracle.
    `nominated_s`: when running jobs were first preempted to make room for it (set by the caller from the
    plan, cleared when it starts); nominated jobs take the GPUs they freed before newcomers do.
    `request`: the full per-node request (minimum GPU memory, CPU, host memory, NVLink...), None = only
    the fields above (the queueing simulators' jobs).
    `predicted`: its run time as predicted from finished jobs (prediction.py; None = unknown), read only by
    the `predict` order.
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
    request: ResourceRequest | None = None
    # Jobs of one `group` (the tasks of a job array) run at most `group_limit` at once (0: no limit).
    group: str = ""
    group_limit: int = 0
    predicted: DurationPrediction | None = None

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

    def wanted_models(self) -> str:
        """The models it may run on, as a person reads them ("" = any): the pool model it was held to, else the
        models its request allows (none of which the pool has)."""
        if self.model:
            return self.model
        return "|".join(self.request.gpu_models) if self.request is not None else ""

    def no_gpus_detail(self) -> str:
        """Why no GPU of the pool can ever be its: none of the models it may run on (or none at all) is there."""
        wanted = self.wanted_models()
        return f"no {wanted} GPUs in the pool" if wanted else "no GPUs in the pool"

    def matches(self, model: str) -> bool:
        return model_matches(model, (self.model,) if self.model else ())

    def to_request(self) -> ResourceRequest:
        """The per-node request the placement engine places: the full one, held to `model` (a pool model
        the job allows) when set, so it lands where its tenant's quota is counted."""
        req = self.request
        if req is None:
            return ResourceRequest(
                gpus=self.gpus, gpu_milli=self.gpu_milli, gpu_models=(self.model,) if self.model else ()
            )
        if self.model and req.gpus and req.gpu_models != (self.model,):
            return replace(req, gpu_models=(self.model,))
        return req


# A request's shape: (constraints that must be equal, amounts that must all be >= to dominate).
Shape = tuple[tuple[object, ...], tuple[int, ...]]
MAX_SHAPES = 8  # failed shapes kept per (tenant, model): the skip is a short cut, not a full index


def compute_shape(job: QueuedJob) -> Shape:
    """Constraints (models, MIG profile, NVLink, selector, tolerations, ECC) and amounts (GPUs, share,
    nodes, CPU, host memory, minimum GPU memory) of the job's request."""
    r = job.to_request()
    return (
        (r.gpu_models, r.mig_profile, r.nvlink, r.node_selector, r.tolerations, r.ecc),
        (r.gpus, r.gpu_milli, job.nodes, r.cpu_milli, r.memory_mib, r.min_gpu_memory_mib),
    )


def is_dominated(shape: Shape, failed: list[Shape]) -> bool:
    """True when `shape` asks at least as much as some failed shape with the same constraints: where
    that one fits nowhere, this one cannot fit either."""
    constraints, amounts = shape
    return any(c == constraints and all(a <= b for a, b in zip(f, amounts)) for c, f in failed)


def add_shape(failed: list[Shape], shape: Shape) -> None:
    """Keep the minimal failed shapes (those no other failed shape is dominated by), at most MAX_SHAPES."""
    if is_dominated(shape, failed) or len(failed) >= MAX_SHAPES:
        return
    failed[:] = [f for f in failed if not is_dominated(f, [shape])]
    failed.append(shape)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding GPUs since `start_s` on `model`; `exit_s` is set while it is being preempted
    (SIGTERM sent, it still holds its GPUs until then) and `preempted_for` names the waiting job the
    GPUs were freed for (it is nominated: it gets them first, as in Kubernetes). `parts`: (node, GPU
    indices) it holds on each node (empty when unknown: then preemption can only count GPUs)."""

    job: QueuedJob
    start_s: float
    model: str
    exit_s: float | None = None
    preempted_for: str = ""
    parts: tuple[tuple[str, tuple[int, ...]], ...] = ()

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

"""Named queueing policies: how pending jobs are ordered and which mechanisms (backfill, preemption,
fair share) are on. `predict` is the default: `corral` with run times predicted from finished jobs in place of
service levels (issue 15); `fifo`, `sjf`, `las` are the published baselines."""

from __future__ import annotations

from dataclasses import dataclass

from corral.core.errors import ValidationError

ORDERS = ("fifo", "sjf", "las", "corral", "predict")


@dataclass(frozen=True, slots=True)
class QueueingPolicy:
    """order: the rank key (ordering.py). head_blocks: the first blocked job blocks every job behind it
    (classic FIFO; strict queues do this per queue). backfill: jobs may pass a blocked head when they do
    not delay its reserved start (EASY, from declared time limits). preempt: a pending job may preempt
    lower-ranked running jobs (least-attained-service time slicing). fair_share: tenants' jobs within their
    weighted fair share rank before borrowed work. las_thresholds_gpu_s: attained GPU-seconds that move a
    job to the next (lower) service level. min_run_s: a job runs at least this long before rank
    preemption may pick it (quota reclaim ignores it). drain_nodes: a non-preemptive policy keeps the nodes
    closest to holding a job that fragmentation blocks, so that they drain for it."""

    name: str
    order: str
    head_blocks: bool = False
    backfill: bool = False
    preempt: bool = False
    fair_share: bool = False
    las_thresholds_gpu_s: tuple[float, ...] = ()
    min_run_s: float = 0.0
    half_life_s: float = 7 * 24 * 3600.0
    drain_nodes: bool = False  # keep the closest nodes for a job blocked by fragmentation (node_room.py)

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValidationError("order", f"unknown order {self.order!r}; expected one of {', '.join(ORDERS)}")


# Tiresias (Gu et al., NSDI'19) discretised 2D-LAS: two levels split at 3,200 GPU-seconds.
TIRESIAS_THRESHOLDS_GPU_S = (3200.0,)
# Corral: geometric levels so short jobs finish first without knowing durations.
CORRAL_THRESHOLDS_GPU_S = (120.0, 960.0, 7680.0, 61440.0)

POLICIES: dict[str, QueueingPolicy] = {
    "fifo": QueueingPolicy("fifo", "fifo", head_blocks=True),
    "sjf": QueueingPolicy("sjf", "sjf"),
    "las": QueueingPolicy("las", "las", preempt=True, las_thresholds_gpu_s=TIRESIAS_THRESHOLDS_GPU_S),
    "corral": QueueingPolicy(
        "corral",
        "corral",
        backfill=True,
        preempt=True,
        fair_share=True,
        las_thresholds_gpu_s=CORRAL_THRESHOLDS_GPU_S,
        min_run_s=30.0,
        half_life_s=3600.0,
    ),
    # `corral`'s mechanisms and fair share, unchanged; within a tier, the job's expected remaining GPU-seconds
    # given its attained service (ordering.compute_predicted_level) replaces the service level, and
    # jobs without a prediction (cold start) fall back to the service levels on the same GPU-second scale.
    "predict": QueueingPolicy(
        "predict",
        "predict",
        backfill=True,
        preempt=True,
        fair_share=True,
        las_thresholds_gpu_s=CORRAL_THRESHOLDS_GPU_S,
        min_run_s=30.0,
        half_life_s=3600.0,
    ),
}
DEFAULT_QUEUEING = "predict"


def get_queueing_policy(name: str | None) -> QueueingPolicy:
    """The policy called `name` (None = Corral's default); ValidationError names the choices."""
    key = DEFAULT_QUEUEING if name is None else name
    if key not in POLICIES:
        raise ValidationError("queueing", f"unknown queueing {name!r}; expected one of {', '.join(POLICIES)}")
    return POLICIES[key]

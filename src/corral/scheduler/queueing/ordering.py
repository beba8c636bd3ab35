"""Rank keys: a smaller key goes first. Priority first, then the policy's order; under the fair-share order
(`corral`, `predict`) the tier (0: within the tenant's share; 0.5: the job its share is rounded up to; 1:
borrowed) comes before priority."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from corral.scheduler.queueing.jobs import QueuedJob
from corral.scheduler.queueing.policy import QueueingPolicy

RankKey = tuple[float, ...]


@dataclass(frozen=True, slots=True)
class RankContext:
    """Per-cycle facts a rank needs: which jobs lie within their tenant's fair share (tier 0), which ones a
    share is rounded up to (tier 0.5), and each tenant's decayed usage divided by its weight."""

    within_share: frozenset[str] = frozenset()
    usage_per_weight: Mapping[str, float] = field(default_factory=dict)
    rounded_in: frozenset[str] = frozenset()  # tier 0.5: a share rounded up to a whole job (select_share_tiers)


def compute_las_level(attained_gpu_s: float, thresholds: tuple[float, ...]) -> int:
    """The service level of a job: 0 until it has attained thresholds[0] GPU-seconds, then 1, ..."""
    level = 0
    for t in thresholds:
        if attained_gpu_s < t:
            break
        level += 1
    return level


# Orders that rank by attained service (the admission computes running jobs' service for them).
ATTAINED_ORDERS = ("las", "corral", "predict")
PREDICT_LEVEL_BASE = 2.0  # `predict` levels: expected remaining GPU-seconds, in steps of this factor


def compute_predicted_level(job: QueuedJob, attained_gpu_s: float, thresholds: tuple[float, ...]) -> float:
    """The `predict` order's level: log base PREDICT_LEVEL_BASE of the job's expected remaining GPU-seconds
    (its predicted run time left given how long it has run, plus 1 s, times its GPUs). A job that outlives
    what was predicted is expected to run as long again, so a misprediction sinks as service accrues and
    preemption corrects it. Levels, not the raw figure, so that jobs of about the same expected length tie
    and fair share and arrival order them (and a running job is not preempted for one a few seconds
    shorter). Without a prediction: the next service threshold above the attained service (`corral`'s
    levels, on the same scale). (A Gittins index over the same distribution, `DurationPrediction.gittins_s`,
    did 0.1-0.8% worse on the tuning windows: docs/queueing.md.)"""
    gpus = max(job.need_milli / 1000, 1e-3)
    p = job.predicted
    if p is not None:
        value = (p.expected_remaining_s(attained_gpu_s / gpus) + 1.0) * gpus
    else:
        level = compute_las_level(attained_gpu_s, thresholds)
        value = thresholds[level] if level < len(thresholds) else 2 * max(attained_gpu_s, 1.0)
    return float(math.floor(math.log(max(value, 1.0), PREDICT_LEVEL_BASE)))


def compute_rank(
    job: QueuedJob, policy: QueueingPolicy, ctx: RankContext, seq: int, attained_gpu_s: float | None = None
) -> RankKey:
    """The job's place in line; `seq` (e.g. arrival order) breaks the last ties deterministically.
    `attained_gpu_s` overrides the job's own figure (a running job keeps accruing service)."""
    prio = -float(job.priority)
    head = (prio,)
    if policy.order == "fifo":
        return head + (job.submit_s, seq)
    if policy.order == "sjf":
        known = job.known_duration_s if job.known_duration_s is not None else job.time_limit_s
        return head + (math.inf if known is None else known, job.submit_s, seq)
    attained = job.attained_gpu_s if attained_gpu_s is None else attained_gpu_s
    if policy.order == "predict":
        level = compute_predicted_level(job, attained, policy.las_thresholds_gpu_s)
    else:
        level = float(compute_las_level(attained, policy.las_thresholds_gpu_s))
    if policy.order == "las":
        return head + (level, job.submit_s, seq)
    tier = 0.0 if job.id in ctx.within_share else 0.5 if job.id in ctx.rounded_in else 1.0
    usage = ctx.usage_per_weight.get(job.tenant, 0.0)
    # The fair-share tier comes before priority: any member may set a job's priority, so it orders work within
    # a tier (and a tenant's own jobs into its share), never one tenant's borrowed work (nor the job its share
    # is rounded up to, tier 0.5) ahead of another's share. Within a tier: priority, least attained service (short jobs finish first without knowing
    # durations), the tenant with the least decayed usage per unit of weight, then arrival.
    return (tier, prio, level, usage, job.submit_s, seq)


def compute_tenant_order_key(job: QueuedJob, policy: QueueingPolicy, attained_gpu_s: float) -> tuple[float, ...]:
    """Order inside one tenant, used to decide which of its jobs fall within its fair share."""
    if policy.order == "predict":
        return (
            -float(job.priority),
            compute_predicted_level(job, attained_gpu_s, policy.las_thresholds_gpu_s),
            job.submit_s,
        )
    level = compute_las_level(attained_gpu_s, policy.las_thresholds_gpu_s)
    return (-float(job.priority), float(level), job.submit_s)

"""EASY backfill (Slurm, Lifka '95): a blocked head gets a reserved start (its shadow time) from the running
jobs' time limits; a later job may start now only if it ends before that time or uses GPUs the head
will not need then (the "extra" GPUs)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from corral.scheduler.queueing.jobs import QueuedJob, RunningJob


@dataclass(slots=True)
class Reservation:
    """The head `job_id` starts on `model` at `shadow_s` (inf = unknown); `extra_milli` GPUs of that model
    are spare at that time and may be used by backfilled jobs of any length (consumed as they are)."""

    job_id: str
    model: str
    shadow_s: float
    extra_milli: int


def compute_reservation(
    head: QueuedJob, models: Sequence[str], free: dict[str, int], running: Sequence[RunningJob], now_s: float
) -> Reservation | None:
    """The earliest reserved start for `head` over the matching `models`; None if no model matches."""
    best: Reservation | None = None
    for model in models:
        if not head.matches(model):
            continue
        avail = free.get(model, 0)
        shadow, extra = math.inf, avail - head.need_milli
        ends = sorted(
            (max(r.expected_end_s, now_s), r.job.need_milli)
            for r in running
            if r.model == model and r.expected_end_s is not None
        )
        if avail >= head.need_milli:
            shadow = now_s
        for end_s, milli in ends:
            if avail >= head.need_milli:
                break
            avail += milli
            if avail >= head.need_milli:
                shadow, extra = end_s, avail - head.need_milli
        if not math.isfinite(shadow):
            extra = 0
        if best is None or shadow < best.shadow_s:
            best = Reservation(head.id, model, shadow, max(extra, 0))
    return best


def allow_backfill(job: QueuedJob, model: str, reservations: Sequence[Reservation], now_s: float) -> bool:
    """True when starting `job` now on `model` delays none of the reservations; consumes extra GPUs."""
    using_extra: list[Reservation] = []
    for res in reservations:
        if res.model != model:
            continue
        if job.time_limit_s is not None and now_s + job.time_limit_s <= res.shadow_s:
            continue
        if job.need_milli > res.extra_milli:
            return False
        using_extra.append(res)
    for res in using_extra:
        res.extra_milli -= job.need_milli
    return True

"""GPUs allocated over time, from the jobs' runs: the fleet page's allocation graph, drawn from the server's
history rather than from what one browser tab happened to see.

compute_allocation_series is pure: each bucket [t, t + step) holds the GPUs that running jobs held, averaged
over the part of the bucket that has passed (a share counts its fraction, a multi-node job every node's GPUs),
as the usage reports count GPU-hours. As there, only a job's current (or last) attempt is known by time:
earlier attempts of a requeued job are not in the series.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from corral.core.errors import ValidationError
from corral.server.services.reports import JobRun

MAX_POINTS = 2000  # buckets one answer may hold
MAX_SPAN_S = 400 * 86400.0  # as far back as a usage report looks


def check_allocation_range(start_s: float, end_s: float, step_s: float, now_s: float) -> tuple[float, int, int]:
    """(end, index of the first bucket, bucket count) of [start_s, min(end_s, now_s)) in `step_s` buckets; raises
    ValidationError when the range is empty, longer than MAX_SPAN_S or needs over MAX_POINTS buckets (checked
    before any run is read: an unbounded range costs nothing)."""
    end_s = min(end_s, now_s)
    if not start_s < end_s:
        raise ValidationError("start", "must be before end (and before now)")
    if end_s - start_s > MAX_SPAN_S:
        raise ValidationError("start", "the allocation history covers at most 400 days")
    if not step_s > 0:
        raise ValidationError("step_s", "must be above 0")
    first = math.floor(start_s / step_s)
    count = math.ceil(end_s / step_s) - first
    if count > MAX_POINTS:
        raise ValidationError("step_s", f"{count} points asked for; at most {MAX_POINTS} (use a larger step_s)")
    return end_s, first, count


def compute_allocation_series(
    runs: Sequence[JobRun], start_s: float, end_s: float, step_s: float, now_s: float
) -> list[list[float]]:
    """[[bucket start, GPUs allocated]] for every bucket of [start_s, min(end_s, now_s)), oldest first.
    Raises ValidationError when the range is empty, longer than MAX_SPAN_S or needs over MAX_POINTS buckets."""
    end_s, first, count = check_allocation_range(start_s, end_s, step_s, now_s)
    held = [0.0] * count  # GPU-seconds per bucket
    for run in runs:
        if run.started_at is None:
            continue
        a = max(run.started_at.timestamp(), start_s)
        b = min(run.finished_at.timestamp() if run.finished_at else now_s, end_s)
        if a >= b:
            continue
        gpus = run.gpus * run.gpu_milli / 1000 * run.nodes
        # Over bucket indices, each bucket's overlap with [a, b): at most `count` steps per run whatever the float
        # rounding (walking a float time from edge to edge could stop advancing: (k * step) / step < k).
        lo_i = max(math.floor(a / step_s) - first - 1, 0)
        hi_i = min(math.ceil(b / step_s) - first + 1, count)
        for i in range(lo_i, hi_i):
            overlap = min((first + i + 1) * step_s, b) - max((first + i) * step_s, a)
            if overlap > 0:
                held[i] += overlap * gpus
    out = []
    for i, gpu_s in enumerate(held):
        lo = max((first + i) * step_s, start_s)
        hi = min((first + i + 1) * step_s, end_s)
        out.append([(first + i) * step_s, round(gpu_s / (hi - lo), 4) if hi > lo else 0.0])
    return out
